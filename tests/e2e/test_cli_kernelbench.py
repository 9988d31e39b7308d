"""End-to-end: KernelBench workflows from the command line (issue 23).

CPU-size runs, problem ids in ``eval``, KernelBench's multi-sample solution layout, plain folders
of problems, ``--only``/``--out``, the pre-flight refusal, and the small CLI defects. Real
evaluations in the sandbox on the CPU; the problems are written here (KernelBench-shaped and
oversized on purpose) so that no test needs the shared dataset except the ones marked so.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from .helpers import CANDIDATES, FIXTURES, TINY_RELU, run_cli

REPO = FIXTURES.parents[1]
EXAMPLES = REPO / "examples" / "kernelbench"
KERNELBENCH_JSONL = Path(os.environ.get("TRITONGYM_KERNELBENCH_JSONL", "")
                         or REPO.parent / "shared" / "datasets" / "kernelbench" / "kernelbench_l1-l3.jsonl")

#: KernelBench's level1/19_ReLU as its authors sized it (a 6 GiB input): only its CPU size can run here.
BIG_RELU = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)

batch_size = 4096
dim = 393216

def get_inputs():
    x = torch.rand(batch_size, dim) * 2 - 1
    return [x]

def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def kernelbench_like(tmp_path_factory) -> Path:
    """A KernelBench checkout layout holding the oversized ReLU as level1/19_ReLU.py."""
    root = tmp_path_factory.mktemp("kb")
    (root / "level1").mkdir()
    (root / "level1" / "19_ReLU.py").write_text(BIG_RELU)
    return root


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_run_at_cpu_size_over_kernelbench_samples_with_out_file(kernelbench_like, tmp_path):
    solutions = tmp_path / "runs"
    solutions.mkdir()
    # KernelBench's own generation layout: two samples of problem 19, one honest and one wrong.
    shutil.copy(EXAMPLES / "level1" / "19_ReLU.py", solutions / "level_1_problem_19_sample_0_kernel.py")
    wrong = (EXAMPLES / "level1" / "19_ReLU.py").read_text().replace("tl.maximum(x, 0.0)", "x")
    (solutions / "level_1_problem_19_sample_1_kernel.py").write_text(wrong)
    out = tmp_path / "results.jsonl"
    proc = run_cli("run", "--problems", str(kernelbench_like), "--solutions", str(solutions), "--device", "cpu",
                   "--out", str(out), "--trials", "2", timeout=400)
    assert proc.returncode == 0, proc.stderr
    assert "run at CPU size" in proc.stderr and "--size original" in proc.stderr  # the default's notice
    rows = sorted(json_lines(out.read_text()), key=lambda r: r["sample"])
    assert [(r["problem"], r["sample"], r["status"]) for r in rows] == [
        ("kernelbench/level1/19", 0, "ok"), ("kernelbench/level1/19", 1, "incorrect")]
    assert all(r["problem_size"] == "cpu" for r in rows)
    assert "kernelbench/level1/19#0 19_ReLU" in proc.stdout and "kernelbench/level1/19#1 19_ReLU" in proc.stdout
    assert all("cpuinfo" not in r["candidate_log"] for r in rows)  # the jail artefact is not reported
    assert "results written to" in proc.stdout


def test_original_size_on_a_cpu_is_refused_before_running(kernelbench_like, tmp_path):
    proc = run_cli("eval", "--problem", str(kernelbench_like / "level1" / "19_ReLU.py"), "--solution",
                   str(EXAMPLES / "level1" / "19_ReLU.py"), "--device", "cpu", "--size", "original", timeout=120)
    assert proc.returncode == 2
    assert "not evaluated" in proc.stderr and "--size cpu" in proc.stderr and "GiB" in proc.stderr


def test_eval_takes_an_id_that_list_prints():
    listed = run_cli("list", "--problems", "builtin")
    assert "builtin/07_softmax" in listed.stdout and "07_softmax" in listed.stdout.split("builtin/07_softmax", 1)[1]
    proc = run_cli("eval", "--problem", "builtin/07_softmax", "--solution",
                   str(REPO / "examples" / "builtin" / "07_softmax.py"), "--device", "cpu", "--json",
                   "--trials", "2")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok" and result["problem_id"] == "builtin/07_softmax"
    assert result["problem_size"] == "original"  # already small: its CPU size is its own size
    assert "CPU size" not in proc.stderr  # nothing scaled, so no notice


def test_eval_unknown_id_and_missing_file_say_what_was_looked_for():
    proc = run_cli("eval", "--problem", "builtin/nope", "--solution", str(CANDIDATES / "relu_honest.py"))
    assert proc.returncode == 2 and "tritongym list" in proc.stderr
    proc = run_cli("eval", "--problem", "nowhere/problem.py", "--solution", str(CANDIDATES / "relu_honest.py"))
    assert proc.returncode == 2 and "problem file not found" in proc.stderr


def test_run_over_a_plain_folder_of_problems_with_only(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(TINY_RELU, problems / "tiny_relu.py")
    shutil.copy(TINY_RELU, problems / "other_relu.py")
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(CANDIDATES / "relu_honest.py", solutions / "tiny_relu.py")
    proc = run_cli("run", "--problems", str(problems), "--solutions", str(solutions), "--device", "cpu",
                   "--only", "tiny_relu", "--json", "--trials", "2")
    assert proc.returncode == 0, proc.stderr
    rows = json_lines(proc.stdout)
    assert [(r["problem"], r["status"]) for r in rows] == [("tiny_relu", "ok")]


def test_run_summarises_missing_solutions_in_one_line(tmp_path):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(REPO / "examples" / "builtin" / "02_leaky_relu.py", solutions)
    proc = run_cli("run", "--problems", "builtin", "--solutions", str(solutions), "--device", "cpu",
                   "--trials", "2")
    assert proc.returncode == 0, proc.stderr
    assert "(no solution)" not in proc.stdout
    assert "16 of 17 problem(s) had no solution file" in proc.stdout


@pytest.mark.parametrize("argv", [["run", "--solutions", "examples/builtin", "--workers", "0"],
                                  ["audit", "--problems", "builtin", "--workers", "0"]])
def test_zero_workers_is_a_usage_error(argv):
    proc = run_cli(*argv)
    assert proc.returncode == 2 and "at least 1" in proc.stderr


def test_version_and_info_print_no_python_none():
    proc = run_cli("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("tritongym ")
    info = run_cli("info")
    assert info.returncode == 0 and "None" not in info.stdout and "True" not in info.stdout


@pytest.mark.skipif(not KERNELBENCH_JSONL.is_file(), reason=f"the shared KernelBench dataset is absent: "
                    f"{KERNELBENCH_JSONL} (clone with shared/ beside the repo, or set TRITONGYM_KERNELBENCH_JSONL)")
def test_readme_kernelbench_level1_cpu_run(tmp_path):
    """The README's command: level 1 at CPU size with the honest solutions in examples/kernelbench."""
    out = tmp_path / "level1.jsonl"
    proc = run_cli("run", "--problems", str(KERNELBENCH_JSONL), "--level", "1", "--solutions", str(EXAMPLES),
                   "--size", "cpu", "--device", "cpu", "--out", str(out), timeout=590)
    assert proc.returncode == 0, proc.stderr
    rows = json_lines(out.read_text())
    names = sorted(p.stem for p in (EXAMPLES / "level1").glob("*.py"))
    assert sorted(r["name"] for r in rows) == names
    assert all(r["status"] == "ok" and r["problem_size"] == "cpu" for r in rows), [
        (r["name"], r["status"], r.get("error")) for r in rows]
    assert f"{100 - len(names)} of 100 problem(s) had no solution file" in proc.stdout


@pytest.mark.skipif(not KERNELBENCH_JSONL.is_file(), reason="the shared KernelBench dataset is absent")
def test_eval_with_a_dataset_and_an_id_refuses_original_size_with_the_fix():
    proc = run_cli("eval", "--problem", str(KERNELBENCH_JSONL), "--id", "kernelbench/level1/19", "--solution",
                   str(EXAMPLES / "level1" / "19_ReLU.py"), "--device", "cpu", "--size", "original", timeout=120)
    assert proc.returncode == 2 and "19_ReLU" in proc.stderr and "--size cpu" in proc.stderr


def test_trials_help_says_what_it_counts():
    from tritongym.cli import build_parser

    eval_parser = build_parser()._subparsers._group_actions[0].choices["eval"]
    text = " ".join(eval_parser.format_help().split())
    assert "get_inputs()" in text and "add one trial each on top" in text


def test_run_table_messages_end_at_a_word_not_mid_sentence():
    from tritongym.cli.options import first_line

    message = "the output of trial 3 differed from the reference " * 20
    line = first_line(message, limit=150)
    assert len(line) <= 152 and line.endswith(" …") and not line[:-2].endswith(" ")
    assert message.startswith(line[:-2]) and " ".join(message.split()).split(" ")[len(line[:-2].split())] != ""
    assert first_line("short message") == "short message"


def test_the_progress_bar_needs_nothing_beyond_the_base_install():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert any(dep.startswith("tqdm") for dep in project["dependencies"])  # run --progress on `pip install -e .`
