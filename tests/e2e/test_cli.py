"""End-to-end: the ``tritongym`` command line, run as ``python -m tritongym.cli`` in a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import CANDIDATES, TINY_RELU, candidate, run_cli

#: The contract keys of ``eval --json`` and the JSON types each may take.
CONTRACT_TYPES = {
    "status": (str,),
    "correct": (bool,),
    "reward": (int, float),
    "violations": (list,),
    "torch_compute_ops": (list,),
    "speedup": (int, float, type(None)),
    "timing": (dict, type(None)),
    "error": (str, type(None)),
}

#: One candidate per status; timeouts use a short budget.
STATUS_CASES = {
    "ok": ("relu_honest", []),
    "compile_error": ("relu_syntax_error", []),
    "runtime_error": ("relu_forward_raises", []),
    "incorrect": ("relu_fake_report", []),  # also prints fake JSON verdicts to stdout
    "integrity_violation": ("relu_no_kernel", []),
    "timeout": ("relu_import_loop", ["--timeout", "3"]),
    "crashed": ("relu_os_exit", []),
}


def eval_args(name: str, *extra: str) -> list[str]:
    return [
        "eval",
        "--problem",
        str(TINY_RELU),
        "--solution",
        str(candidate(name)),
        "--device",
        "cpu",
        "--trials",
        "1",
        *extra,
    ]


@pytest.mark.parametrize("status", list(STATUS_CASES))
def test_eval_json_prints_one_contract_object_and_exits_0_for_every_status(status):
    name, extra = STATUS_CASES[status]
    completed = run_cli(*eval_args(name, "--json", *extra))
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert len(lines) == 1, completed.stdout[:2000]  # exactly one JSON object, nothing else on stdout
    result = json.loads(lines[0])
    assert isinstance(result, dict)
    for key, types in CONTRACT_TYPES.items():
        assert key in result, key
        assert type(result[key]) in types, (key, result[key])
    assert result["status"] == status
    assert result["correct"] is (status == "ok")
    assert result["reward"] == (0.5 if status == "ok" else 0)
    assert all(
        set(v) >= {"code", "message"} and isinstance(v["code"], str) and isinstance(v["message"], str)
        for v in result["violations"]
    )
    assert all(isinstance(op, str) for op in result["torch_compute_ops"])
    assert result["speedup"] is None and result["timing"] is None  # the CPU
    assert (result["error"] is None) is (status == "ok")
    assert (result["violations"] != []) is (status == "integrity_violation")


def test_eval_without_json_prints_a_readable_summary():
    completed = run_cli(*eval_args("relu_honest"))
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    assert lines[0].startswith("status: ok   reward: 0.500   device: cpu")
    assert any(line.startswith("trials: ") and "passed" in line for line in lines)
    assert any(line.startswith("note [timing_unavailable]:") for line in lines)
    assert not completed.stdout.lstrip().startswith("{")


def test_eval_summary_shows_the_error_of_a_failed_candidate():
    completed = run_cli(*eval_args("relu_no_kernel"))
    assert completed.returncode == 0
    assert "status: integrity_violation" in completed.stdout
    assert "violation [no_triton_kernel]:" in completed.stdout


@pytest.mark.parametrize("missing", ["problem", "solution"])
def test_missing_file_is_a_usage_error(missing, tmp_path):
    absent = tmp_path / f"no_{missing}.py"
    problem = absent if missing == "problem" else TINY_RELU
    solution = absent if missing == "solution" else CANDIDATES / "relu_honest.py"
    completed = run_cli(
        "eval",
        "--problem",
        str(problem),
        "--solution",
        str(solution),
        "--device",
        "cpu",
        "--json",
        timeout=60,
    )
    assert completed.returncode == 2
    assert completed.stdout == ""
    assert f"{missing} file not found: {absent}" in completed.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["eval", "--solution", "x.py"], "the following arguments are required: --problem"),
        (["eval", "--problem", "p.py", "--solution", "s.py", "--device", "gpu"],
         "device must be auto, cpu, cuda or cuda:N"),
        (["eval", "--problem", "p.py", "--solution", "s.py", "--timeout", "soon"], "invalid float value"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_bad_arguments_are_usage_errors(args, message):
    completed = run_cli(*args, timeout=60)
    assert completed.returncode == 2
    assert message in completed.stderr


def test_invalid_option_value_is_a_usage_error():
    completed = run_cli(*eval_args("relu_honest", "--trials", "0"), timeout=60)
    assert completed.returncode == 2
    assert "num_trials must be an integer >= 1" in completed.stderr


def test_help_mentions_every_contract_flag():
    top = run_cli("--help", timeout=60)
    assert top.returncode == 0
    assert "eval" in top.stdout and "Exit codes" in top.stdout
    sub = run_cli("eval", "--help", timeout=60)
    assert sub.returncode == 0
    for flag in ("--problem", "--solution", "--device", "--timeout", "--json", "{auto,cpu,cuda,cuda:N}",
                 "--baseline", "SECONDS"):
        assert flag in sub.stdout, flag


def test_console_script_is_installed_and_runs():
    script = shutil.which("tritongym") or str(Path(sys.executable).with_name("tritongym"))
    completed = subprocess.run([script, "eval", "--help"], capture_output=True, text=True, timeout=60)
    assert completed.returncode == 0 and "--solution" in completed.stdout


def test_run_evaluates_a_folder_of_solutions_and_prints_a_table(tmp_path, repo_root):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name in ("02_leaky_relu", "04_swiglu"):
        shutil.copy(repo_root / "examples" / "builtin" / f"{name}.py", solutions)
    completed = run_cli("run", "--solutions", str(solutions), "--device", "cpu", "--trials", "1", timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    out = completed.stdout
    assert out.splitlines()[0].split() == ["problem", "status", "reward", "trials", "seconds"]
    rows = {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()
        if line.startswith("builtin/") and "(no solution)" not in line
    }
    assert rows == {"builtin/02_leaky_relu": "ok", "builtin/04_swiglu": "ok"}
    assert "2 evaluated: 2 ok; mean reward 0.500" in out
    assert "had no solution file" in out
    # The summary says how candidates were isolated (an unsandboxed run must not look the same).
    from tritongym.evaluator.jail.sandbox import resolve_mode

    mode = resolve_mode("auto")
    assert f"sandbox: {mode}; " in out and "worker(s)" in out
    assert ("UNSANDBOXED" in out) == (mode == "none")


def test_run_with_workers_streams_json_lines_and_states_the_sandbox(tmp_path, repo_root):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    for name in ("01_scaled_add", "02_leaky_relu", "04_swiglu"):
        shutil.copy(repo_root / "examples" / "builtin" / f"{name}.py", solutions)
    (solutions / "03_gelu_tanh.py").write_text("class ModelNew: pass\n")  # no triton: a static verdict
    completed = run_cli("run", "--solutions", str(solutions), "--device", "cpu", "--trials", "1", "--workers", "2",
                        "--json", "--sandbox", "none", timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = [json.loads(line) for line in completed.stdout.splitlines()]
    assert sorted(line["problem"] for line in lines) == ["builtin/01_scaled_add", "builtin/02_leaky_relu",
                                                         "builtin/03_gelu_tanh", "builtin/04_swiglu"]
    by_problem = {line["problem"]: line for line in lines}
    assert by_problem["builtin/03_gelu_tanh"]["status"] == "integrity_violation"
    assert all(by_problem[f"builtin/{n}"]["status"] == "ok" for n in ("01_scaled_add", "02_leaky_relu", "04_swiglu"))
    assert {line["sandbox"] for line in lines if line["problem"] != "builtin/03_gelu_tanh"} == {"none"}
    completed = run_cli("run", "--solutions", str(solutions), "--device", "cpu", "--trials", "1", "--workers", "1",
                        "--sandbox", "none", timeout=300)
    assert "sandbox: none; 1 worker(s)" in completed.stdout and "UNSANDBOXED" in completed.stdout


def test_run_with_no_matching_solution_is_a_usage_error(tmp_path):
    completed = run_cli("run", "--solutions", str(tmp_path), "--device", "cpu", timeout=60)
    assert completed.returncode == 2
    assert "no solution in" in completed.stderr


def test_list_shared_dataset_as_json_lines(kernelbench_jsonl):
    completed = run_cli("list", "--problems", str(kernelbench_jsonl), "--json", timeout=120)
    assert completed.returncode == 0, completed.stderr[-2000:]
    lines = completed.stdout.splitlines()
    assert len(lines) == 250
    rows = [json.loads(line) for line in lines]
    assert {"problem_id", "name", "level", "content_hash"} <= set(rows[0])
    assert len({r["problem_id"] for r in rows}) == 250
    assert [sum(r["level"] == level for r in rows) for level in (1, 2, 3)] == [100, 100, 50]


def test_list_level_filter_and_text_output(kernelbench_jsonl):
    completed = run_cli("list", "--problems", str(kernelbench_jsonl), "--level", "3", timeout=120)
    assert completed.returncode == 0
    assert completed.stdout.splitlines()[-1] == "50 problems"


def test_list_missing_source_is_a_usage_error(tmp_path):
    completed = run_cli("list", "--problems", str(tmp_path / "nothing.jsonl"), timeout=60)
    assert completed.returncode == 2
    assert "dataset file not found" in completed.stderr


def test_info_json_reports_the_environment():
    completed = run_cli("info", "--json", timeout=60)
    assert completed.returncode == 0
    info = json.loads(completed.stdout)
    assert info["cuda_available"] in (True, False)
    # What the machine has, not a constant: bwrap exactly when bubblewrap works here.
    from tritongym.evaluator.jail.sandbox import bwrap_problem

    assert info["sandbox"] == ("bwrap" if bwrap_problem() is None else "none")
    from tritongym.execution.forkserver import forkserver_problem

    reason = bwrap_problem() or forkserver_problem()
    assert info["pool_launcher"] == ("forkserver" if reason is None else "spawn")
    assert info["pool_launcher_problem"] == reason
    assert isinstance(info["pool_workers"], int) and info["pool_workers"] >= 1
    assert info["tritongym"]
