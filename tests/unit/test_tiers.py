"""The two test tiers (tests/conftest.py, docs/testing.md): which tests the default run keeps.

Collected for real in a child pytest (``--collect-only``: nothing runs) with a plugin that records
every test's node id, whether it carries ``slow``, and whether the tier kept it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import DEFAULT_FOLDERS, DEFAULT_TIER, ONE_PER_FAMILY, REPO_ROOT, family_of

RECORDER = textwrap.dedent('''
    import json, os
    import pytest

    seen = {}

    def pytest_deselected(items):
        for item in items:
            seen[item.nodeid] = [bool(item.get_closest_marker("slow")), False]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(config, items):
        for item in items:
            seen[item.nodeid] = [bool(item.get_closest_marker("slow")), True]

    def pytest_collection_finish(session):
        with open(os.environ["TIER_RECORD"], "w") as handle:
            json.dump(seen, handle)
''')

#: Every folder outside DEFAULT_FOLDERS that holds DEFAULT_TIER entries, and one default folder.
FOLDERS = ["tests/e2e", "tests/sandbox", "tests/acceptance", "tests/adversarial", "tests/execution",
           "tests/service", "tests/unit/rl"]


def collect(tmp_path: Path, *args: str) -> tuple[dict[str, list[bool]], str]:
    (tmp_path / "tier_recorder.py").write_text(RECORDER, encoding="utf-8")
    record = tmp_path / "record.json"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "TIER_RECORD": str(record)}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tier_recorder",
                           "-p", "no:cacheprovider", *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(record.read_text(encoding="utf-8")), done.stdout


def relative(node: str) -> tuple[str, str]:
    """``(file, file::name)`` relative to tests/, as DEFAULT_TIER spells them."""
    path, _, name = node.partition("::")
    path = path.removeprefix("tests/")
    return path, f"{path}::{name}"


def test_the_default_run_keeps_the_fast_folders_and_the_listed_tests_and_never_a_slow_one(tmp_path):
    chosen, out = collect(tmp_path, *FOLDERS)
    # Of each ONE_PER_FAMILY test, the first case by id of each family (F1, F2, ..., A1).
    firsts: dict[tuple[str, str | None], str] = {}
    for node in sorted(chosen):
        test, _, case = relative(node)[1].partition("[")
        if test in ONE_PER_FAMILY:
            firsts.setdefault((test, family_of(case)), relative(node)[1])
    assert len(firsts) >= 8  # F1-F8 at least
    matched = set()
    for node, (slow, kept) in chosen.items():
        path, name = relative(node)
        listed = {entry for entry in (path, name) if entry in DEFAULT_TIER}
        matched |= listed
        expected = not slow and (path.split("/", 1)[0] in DEFAULT_FOLDERS or bool(listed)
                                 or name in firsts.values())
        assert kept == expected, (node, slow, kept)
    # No entry is stale: each names a file or a test that exists (a renamed test would silently
    # leave the default run otherwise).
    assert matched == set(DEFAULT_TIER), sorted(set(DEFAULT_TIER) - matched)
    # Every area keeps something in the default run.
    for folder in FOLDERS:
        assert any(kept and node.startswith(folder + "/") for node, (_, kept) in chosen.items()), folder
    left = sum(not kept for _, kept in chosen.values())
    assert left > 0 and f"default tier: {left} tests left for the full run" in out


def test_full_runs_every_test_and_a_file_named_on_the_command_line_runs_whole(tmp_path):
    """``--full`` keeps everything; a contributor who names a file (or a node id) or gives a ``-m``
    expression gets what they asked for, whatever its tier; a folder named gets its tier."""
    full, _ = collect(tmp_path, "--full", "tests/sandbox")
    assert len(full) > 2 and all(kept for _, kept in full.values())
    folder, _ = collect(tmp_path, "tests/sandbox")
    assert set(folder) == set(full)
    assert {node for node, (_, kept) in folder.items() if kept} == {
        "tests/" + entry for entry in DEFAULT_TIER if entry.startswith("sandbox/")}
    named, out = collect(tmp_path, "tests/sandbox/test_escapes.py")
    assert set(named) == {node for node in full if node.startswith("tests/sandbox/test_escapes.py::")}
    assert all(kept for _, kept in named.values()) and "deselected" not in out, out[-2000:]
    one, _ = collect(tmp_path, "tests/sandbox/test_boundary.py::test_the_solution_file_is_read_only")
    assert one == {"tests/sandbox/test_boundary.py::test_the_solution_file_is_read_only": [False, True]}
    # A -m expression selects by itself: every sandbox test it matches, listed or not.
    marked, _ = collect(tmp_path, "-m", "not gpu", "tests/sandbox")
    assert {node for node, (_, kept) in marked.items() if kept} == set(full)
