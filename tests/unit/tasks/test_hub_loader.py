"""KernelBench the ways a user has it (issue 45 §1): a hub id, a clone, a JSONL or Parquet file.

No network here: a Parquet file written at test time, with the hub's splits and columns
(``level_1`` …; ``code``, ``level``, ``name``, ``problem_id``), stands in for the hub and is read
through the real `datasets` library; the shared JSONL is the source of the rows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tritongym.errors import DependencyError, ProblemError
from tritongym.tasks import load_hf_rows, load_problems
from tritongym.tasks.loaders import hub_snapshot_path, is_hub_id, load_hub_dataset


@pytest.fixture(scope="module")
def hub_parquet(kernelbench_rows, tmp_path_factory) -> dict[str, str]:
    """The shared rows split by level into one Parquet file per hub split (``level_1`` …)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path_factory.mktemp("hub")
    files = {}
    for level in sorted({r["level"] for r in kernelbench_rows}):
        rows = [r for r in kernelbench_rows if r["level"] == level]
        path = folder / f"level_{level}-00000-of-00001.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        files[f"level_{level}"] = str(path)
    return files


def test_hub_ids_are_told_from_paths(tmp_path):
    assert is_hub_id("ScalingIntelligence/KernelBench") and is_hub_id("hf:ScalingIntelligence/KernelBench")
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "name").mkdir()
    assert not is_hub_id(tmp_path / "owner" / "name")  # an existing folder is a folder
    assert not is_hub_id("a/b/c") and not is_hub_id("problems.jsonl") and not is_hub_id("x/y.py")


def test_first_load_downloads_through_datasets_then_reads_the_snapshot(hub_parquet, kernelbench_jsonl, tmp_path):
    pytest.importorskip("datasets")
    snapshots = tmp_path / "snapshots"
    first = load_hub_dataset("parquet", data_files=hub_parquet, cache_dir=str(tmp_path / "hf"),
                             snapshot_dir=snapshots)
    shared = load_hf_rows(kernelbench_jsonl)
    by_id = {p.problem_id: p for p in shared}
    assert len(first) == 250 and {p.problem_id for p in first} == set(by_id)
    assert all(p.content_hash == by_id[p.problem_id].content_hash and p.name == by_id[p.problem_id].name
               for p in first)
    snapshot = hub_snapshot_path("parquet", snapshots)
    assert snapshot.is_file() and not snapshot.with_name(snapshot.name + ".partial").exists()
    # The second load needs neither the network nor `datasets`: a process where importing it fails reads it.
    code = ("import sys; sys.modules['datasets'] = None\n"
            "from tritongym.tasks.loaders import load_hub_dataset\n"
            f"ps = load_hub_dataset('parquet', levels=[1], snapshot_dir={str(snapshots)!r})\n"
            "print(len(ps), sorted({p.level for p in ps}), ps[0].problem_id)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    count, levels, _ = out.stdout.split(" ", 2)
    assert (count, levels) == ("100", "[1]")
    level2 = load_hub_dataset("parquet", levels=[2], snapshot_dir=snapshots)
    assert len(level2) == 100 and {p.content_hash for p in level2} == {
        p.content_hash for p in shared if p.level == 2}


def test_a_hub_id_as_a_problem_source_reads_the_cached_snapshot(kernelbench_jsonl, tmp_path, monkeypatch):
    # What a user has after the first download: the snapshot under the cache folder, nothing else.
    monkeypatch.setenv("TRITONGYM_CACHE_DIR", str(tmp_path))
    snapshot = hub_snapshot_path("ScalingIntelligence/KernelBench")
    assert snapshot.parent == tmp_path / "datasets"
    snapshot.parent.mkdir(parents=True)
    snapshot.write_text(kernelbench_jsonl.read_text())
    problems = load_problems("ScalingIntelligence/KernelBench", levels=[1])
    assert len(problems) == 100 and problems[0].problem_id.startswith("kernelbench/level1/")
    assert len(load_problems("hf:ScalingIntelligence/KernelBench")) == 250


def offline_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRITONGYM_CACHE_DIR": str(tmp_path / "cache"), "HF_HOME": str(tmp_path / "hf"),
            "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def test_offline_without_a_snapshot_is_one_clear_line_naming_the_alternatives(tmp_path):
    pytest.importorskip("datasets")
    proc = subprocess.run([sys.executable, "-m", "tritongym.cli", "list", "--problems",
                           "ScalingIntelligence/KernelBench"], capture_output=True, text=True, timeout=120,
                          env=offline_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "could not download the Hugging Face dataset ScalingIntelligence/KernelBench" in line
    assert "offline" in line and "KernelBench clone" in line and ".jsonl/.parquet" in line


def test_without_datasets_the_error_names_the_install_command(tmp_path):
    code = ("import sys; sys.modules['datasets'] = None\n"
            "from tritongym.cli import main\n"
            "sys.exit(main(['list', '--problems', 'ScalingIntelligence/KernelBench']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=offline_env(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install -e '.[data]'" in proc.stderr and "needs the datasets library" in proc.stderr
    with pytest.raises(DependencyError):
        subprocess_free_missing_datasets()


def subprocess_free_missing_datasets() -> None:
    """`load_hub_dataset` in this process with `datasets` unimportable (restored afterwards)."""
    saved = sys.modules.get("datasets")
    sys.modules["datasets"] = None  # type: ignore[assignment]
    try:
        load_hub_dataset("ScalingIntelligence/KernelBench", snapshot_dir=Path("/nonexistent-snapshots"))
    finally:
        if saved is None:
            sys.modules.pop("datasets", None)
        else:
            sys.modules["datasets"] = saved


def test_a_clone_of_the_kernelbench_repository_loads_by_level(kernelbench_rows, tmp_path):
    clone = tmp_path / "KernelBench-main"
    for row in kernelbench_rows:
        folder = clone / "KernelBench" / f"level{row['level']}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / row["name"]).write_text(row["code"])
    (clone / "README.md").write_text("a clone has other files too")
    from_clone = load_problems(clone, levels=[1, 3])
    assert len(from_clone) == 150 and {p.level for p in from_clone} == {1, 3}
    by_id = {p.problem_id: p.content_hash for p in from_clone}
    expected = {f"kernelbench/level{r['level']}/{r['problem_id']}": r["code"] for r in kernelbench_rows
                if r["level"] != 2}
    assert set(by_id) == set(expected)
    assert all(p.source == expected[p.problem_id] for p in from_clone)
    assert from_clone[0].problem_id == "kernelbench/level1/1"  # numeric order, not 1, 10, 100


def test_a_parquet_file_loads_like_the_jsonl(hub_parquet, kernelbench_jsonl):
    from_parquet = load_problems(hub_parquet["level_1"])
    from_jsonl = load_problems(kernelbench_jsonl, levels=[1])
    assert sorted((p.problem_id, p.content_hash) for p in from_parquet) == sorted(
        (p.problem_id, p.content_hash) for p in from_jsonl)


def test_a_missing_path_is_not_taken_for_a_hub_id(tmp_path):
    with pytest.raises(ProblemError, match="no such problem source.*Hugging Face dataset id"):
        load_problems(tmp_path / "no" / "such" / "folder")
