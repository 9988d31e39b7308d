"""Report wording a user read wrong (issue 23): n/a speedups, feedback without a budget, the title,
and a missing folder."""

from __future__ import annotations

import json

from tests.env.trajectories import cpu_run

from tritongym.bench.report import write_report
from tritongym.cli import main


def write_run(directory, trajectories):
    directory.mkdir()
    (directory / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajectories))
    return directory


def test_cpu_report_says_n_a_without_a_unit_and_has_a_neutral_title(tmp_path):
    trajectories = cpu_run()
    for t in trajectories:  # a trainer's run: feedback level recorded without a character budget
        t["provenance"] = {"model": "tiny-random", "device": "cpu", "feedback": {"level": "standard",
                                                                                  "max_chars": None}}
    markdown = write_report(write_run(tmp_path / "trl-smoke", trajectories))["markdown"].read_text()
    assert "n/ax" not in markdown and "Geomean speedup at selection n/a," in markdown
    assert "None chars" not in markdown and "feedback standard." in markdown
    assert markdown.startswith("# tritongym report: trl-smoke") and "agent report" not in markdown


def test_report_of_a_missing_folder_says_so(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nonexist")]) == 2
    assert "run folder not found" in capsys.readouterr().err


def test_report_tables_name_each_task_beside_its_id(tmp_path):
    """KernelBench ids (kernelbench/level1/19) say nothing to a reader: the By-task table and the
    comparison's gained/lost lists carry the problem's name (19_ReLU)."""
    from tests.env.trajectories import trajectory, turn

    def run(directory, status):
        trajectories = []
        for number, name in ((19, "19_ReLU"), (23, "23_Softmax")):
            traj = trajectory(name, [turn(0, status if number == 19 else "ok")])
            traj["problem_id"] = f"kernelbench/level1/{number}"
            trajectories.append(traj)
        return write_run(directory, trajectories)

    other = run(tmp_path / "before", "incorrect")
    markdown = write_report(run(tmp_path / "after", "ok"), compare_to=other)["markdown"].read_text()
    assert "| task | name | samples |" in markdown
    assert "| kernelbench/level1/19 | 19_ReLU | 1 | 1 |" in markdown
    assert "| kernelbench/level1/23 | 23_Softmax | 1 | 1 |" in markdown
    assert "gained: kernelbench/level1/19 (19_ReLU); lost: none." in markdown
