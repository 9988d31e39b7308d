"""End-to-end: KernelBench for a user who is not on this machine (issue 45 §§1, 2, 4).

A KernelBench clone written here (small problems in its ``KernelBench/levelN/`` layout), samples in
KernelBench's generation layout, a real ``run --run-dir`` in the sandbox, and ``report`` on its
folder; the refusals that must come before any evaluation; ``--server`` with nothing listening.
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from .helpers import FIXTURES, TINY_RELU, run_cli

REPO = FIXTURES.parents[1]
RELU_SOLUTION = REPO / "examples" / "kernelbench" / "level1" / "19_ReLU.py"
SOFTMAX_PROBLEM = REPO / "src" / "tritongym" / "tasks" / "builtin" / "07_softmax.py"
SOFTMAX_SOLUTION = REPO / "examples" / "builtin" / "07_softmax.py"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """A KernelBench clone: KernelBench/level1/19_ReLU.py and KernelBench/level2/7_Softmax.py (small sizes)."""
    root = tmp_path_factory.mktemp("KernelBench-clone")
    (root / "KernelBench" / "level1").mkdir(parents=True)
    (root / "KernelBench" / "level2").mkdir(parents=True)
    shutil.copy(TINY_RELU, root / "KernelBench" / "level1" / "19_ReLU.py")
    shutil.copy(SOFTMAX_PROBLEM, root / "KernelBench" / "level2" / "7_Softmax.py")
    (root / "README.md").write_text("KernelBench")
    return root


@pytest.fixture(scope="module")
def finished_run(clone, tmp_path_factory):
    """``run --run-dir runs/kb`` over KernelBench-layout samples kept in that same folder (as KernelBench's
    generation scripts leave them), with ``--out`` into folders that do not exist yet."""
    work = tmp_path_factory.mktemp("user")
    run_dir = work / "runs" / "kb"
    run_dir.mkdir(parents=True)
    shutil.copy(RELU_SOLUTION, run_dir / "level_1_problem_19_sample_0_kernel.py")
    wrong = RELU_SOLUTION.read_text().replace("tl.maximum(x, 0.0)", "x")
    assert wrong != RELU_SOLUTION.read_text()
    (run_dir / "level_1_problem_19_sample_1_kernel.py").write_text(wrong)
    shutil.copy(SOFTMAX_SOLUTION, run_dir / "level_2_problem_7_sample_0_kernel.py")
    out = work / "fresh" / "folders" / "results.jsonl"
    proc = run_cli("run", "--problems", str(clone), "--solutions", str(run_dir), "--run-dir", str(run_dir),
                   "--out", str(out), "--device", "cpu", "--trials", "2", timeout=500)
    assert proc.returncode == 0, proc.stderr
    return run_dir, out, proc


def test_run_writes_kernelbench_layout_with_results_beside_each_sample(finished_run):
    run_dir, out, proc = finished_run
    assert f"run folder: {run_dir}" in proc.stdout
    rows = {(r["problem"], r["sample"]): r for r in map(json.loads, out.read_text().splitlines())}
    assert {k: r["status"] for k, r in rows.items()} == {
        ("kernelbench/level1/19", 0): "ok", ("kernelbench/level1/19", 1): "incorrect",
        ("kernelbench/level2/7", 0): "ok"}
    for (problem, sample), row in rows.items():
        level, number = problem.split("/")[1][len("level"):], problem.rsplit("/", 1)[1]
        stem = f"level_{level}_problem_{number}_sample_{sample}"
        result = json.loads((run_dir / f"{stem}_result.json").read_text())
        assert result["status"] == row["status"] and result["problem"] == problem
        assert Path(result["solution"]).name == f"{stem}_kernel.py"
    assert sorted(p.name for p in run_dir.glob("*_kernel.py")) == [
        "level_1_problem_19_sample_0_kernel.py", "level_1_problem_19_sample_1_kernel.py",
        "level_2_problem_7_sample_0_kernel.py"]  # evaluated in place, not copied beside themselves
    assert (run_dir / "results.jsonl").read_text() == out.read_text()
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["finished_at"] and meta["counts"] == {"ok": 2, "incorrect": 1}
    assert meta["provenance"]["device"] == "cpu" and meta["provenance"]["problem_size"] == "cpu"


def test_report_reads_the_run_folder_with_kernelbench_metrics_per_level(finished_run):
    run_dir, _, _ = finished_run
    proc = run_cli("report", str(run_dir), timeout=180)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    assert report["kind"] == "run" and report["tasks"] == 2 and report["trajectories"] == 3
    # Task mean of sample means: level1/19 has one correct sample of two, level2/7 one of one.
    assert report["correctness"]["value"] == pytest.approx(0.75)
    levels = {row["level"]: row for row in report["per_level"]}
    assert levels[1]["correctness"] == pytest.approx(0.5) and levels[1]["samples"] == 2
    assert levels[2]["correctness"] == pytest.approx(1.0)
    assert report["vs_eager"] is None  # a CPU run times nothing: fast_p is n/a, and says so
    markdown = (run_dir / "report.md").read_text()
    assert "## By level" in markdown and "| 1 | 1 | 2 | 50.0% |" in markdown and "| 2 | 1 | 1 | 100.0% |" in markdown
    assert "## By turn" not in markdown and "gives correctness only" in markdown


def test_run_on_cuda_without_cuda_is_refused_once_before_any_evaluation(clone, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(RELU_SOLUTION, solutions / "level_1_problem_19_sample_0_kernel.py")
    run = run_cli("run", "--problems", str(clone), "--solutions", str(solutions), "--device", "cuda",
                  "--run-dir", str(tmp_path / "runs" / "x"), timeout=120)
    evaluated = run_cli("eval", "--problem", str(TINY_RELU), "--solution", str(RELU_SOLUTION), "--device", "cuda",
                        timeout=120)
    assert run.returncode == evaluated.returncode == 2
    message = evaluated.stderr.strip().removeprefix("tritongym eval: ")
    assert "no CUDA device" in message
    assert run.stderr.strip() == f"tritongym run: {message}"  # the same message, once
    assert run.stdout == "" and not (tmp_path / "runs").exists()  # no table, no row, no run folder


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # free once closed: nothing listens there


@pytest.mark.parametrize("command", ["eval", "run"])
def test_server_that_does_not_answer_is_one_line_naming_url_and_how_to_start_one(command, clone, tmp_path):
    pytest.importorskip("httpx")
    url = f"http://127.0.0.1:{_closed_port()}"
    if command == "eval":
        args = ["eval", "--problem", str(TINY_RELU), "--solution", str(RELU_SOLUTION)]
    else:
        solutions = tmp_path / "solutions"
        solutions.mkdir()
        shutil.copy(RELU_SOLUTION, solutions / "level_1_problem_19_sample_0_kernel.py")
        args = ["run", "--problems", str(clone), "--solutions", str(solutions), "--size", "original"]
    proc = run_cli(*args, "--server", url, timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "httpx" not in proc.stderr.split("(")[0]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"tritongym {command}: no tritongym server answers at {url}")
    assert "tritongym serve" in lines[0]
