"""`benchmarks/learning.py`'s `turn_groups`: members per turn when trajectories stop early (issue 48 §2)."""

from __future__ import annotations

import json

import pytest
from tests.unit.bench.conftest import load_benchmark


def _write(folder, groups):
    lines = []
    for (step, problem), lengths in groups.items():
        for sample, length in enumerate(lengths):
            lines.append(json.dumps({"training_step": step, "problem_id": problem, "sample": sample,
                                     "turns": [{"turn": t} for t in range(length)]}))
    (folder / "trajectories.jsonl").write_text("\n".join(lines) + "\n")


def test_members_per_turn_and_lone_members_under_early_stop(tmp_path):
    learning = load_benchmark("learning")
    # Two groups of four: in the first, two stop at turn 0 (ok); in the second, three do.
    _write(tmp_path, {(0, "a"): [1, 1, 2, 2], (0, "b"): [1, 1, 1, 2]})
    rows = learning.turn_groups(tmp_path)
    assert [r["turn"] for r in rows] == [0, 1]
    assert rows[0] == {"turn": 0, "groups": 2, "mean_members": 4.0, "alone_share": 0.0}
    assert rows[1]["groups"] == 2 and rows[1]["mean_members"] == pytest.approx(1.5)
    assert rows[1]["alone_share"] == pytest.approx(1 / 3)  # b's last member is alone at turn 1


def test_without_early_stop_every_turn_has_the_whole_group(tmp_path):
    learning = load_benchmark("learning")
    _write(tmp_path, {(0, "a"): [2, 2, 2, 2], (1, "a"): [2, 2, 2, 2]})
    assert [r["mean_members"] for r in learning.turn_groups(tmp_path)] == [4.0, 4.0]
    assert all(r["alone_share"] == 0.0 for r in learning.turn_groups(tmp_path))
