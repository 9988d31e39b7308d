"""benchmarks/gpu_validation.py on a machine without a GPU: its statistics, its table, and that
every GPU line says unverified instead of a number."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.unit.bench.conftest import load_benchmark

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_validation.py"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gpu_validation")


def test_relative_gap_and_cv(bench):
    assert bench.relative_gap(1.1, 1.0) == pytest.approx(0.1)
    assert bench.relative_gap(0.9, 1.0) == pytest.approx(0.1)
    with pytest.raises(ValueError):
        bench.relative_gap(1.0, 0.0)
    assert bench.coefficient_of_variation([1.0]) is None
    assert bench.coefficient_of_variation([2.0, 2.0, 2.0]) == 0
    assert bench.coefficient_of_variation([1.0, 3.0]) == pytest.approx(1.41421356 / 2)


def test_rows_flag_a_gap_beyond_the_target(bench):
    row = bench.Row("07_softmax", do_bench_ms=1.0, graph_ms=0.9, tritongym_ms=[1.2, 1.25, 1.3], speedups=[2.0, 2.2],
                    replay_ms=[1.02, 1.04, 1.08], coverage=0.97, fallback_status="integrity_violation",
                    fallback_reward=0.0)
    assert row.agreement == pytest.approx(0.25) and row.replay_agreement == pytest.approx(0.04)
    table = bench.render([row], 120.0, unverified=False, device="H100")
    assert "| 07_softmax | 1.0000 | 0.9000 | 1.2500 | 25.0% ✗ | 1.0400 | 4.0% | " in table
    assert "integrity_violation, reward 0" in table and "evaluations per hour: 120" in table
    close = bench.Row("10_matmul", do_bench_ms=1.0, tritongym_ms=[1.05], replay_ms=[1.5])
    line = bench.render([close], None, unverified=False, device="H100").splitlines()[4]
    assert "| 5.0% | 1.5000 | 50.0% ✗ |" in line


# Fresh workers per evaluation take the most time: the full tier (the pool runs by default).
@pytest.mark.parametrize("pool", [pytest.param(False, marks=pytest.mark.slow), True], ids=["fresh", "pool-2-at-once"])
def test_the_evaluation_loop_fills_each_row_from_its_own_evaluations(bench, monkeypatch, pool):
    # The loop itself, on the CPU tier (no timing there): every problem's honest runs and its
    # fallback land in that problem's row, whether evaluated one at a time or two at once.
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "_bench_ms",
                        lambda problem, solution, kind="do_bench": 2.0 if kind == "do_bench" else 1.0)
    rows, per_hour = bench.run(1, {"01_scaled_add", "02_leaky_relu"}, pool=pool, workers=2)
    assert [row.problem for row in rows] == ["01_scaled_add", "02_leaky_relu"]
    for row in rows:
        assert row.error is None, row.error
        assert (row.do_bench_ms, row.graph_ms) == (2.0, 1.0)
        # No timing and no profile on the CPU tier: nothing to record but the verdicts.
        assert row.coverage is None and row.tritongym_ms == [] and row.speedups == []
        assert row.fallback_status == "integrity_violation" and row.fallback_reward == 0
    assert per_hour > 0
    wrong = bench.Row("07_softmax")
    bench._record(wrong, type("Result", (), {"status": "incorrect", "error": "max abs diff 3.1", "violations": [],
                                             "timing": None, "speedup": None, "coverage": None})())
    assert wrong.error == "honest solution incorrect: max abs diff 3.1"


def test_without_a_gpu_every_line_says_unverified(bench, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the real run is benchmarks/gpu_validation.py itself")
    assert bench.main(["--only", "07_softmax,10_matmul"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "_" in line.split("|")[1]]
    assert [r.split("|")[1].strip() for r in rows] == ["07_softmax", "10_matmul"]
    assert all(r.count("unverified (no GPU)") == 9 for r in rows)
    assert "evaluations per hour: unverified (no GPU)" in out


@pytest.mark.slow  # the whole device check script, evaluations included: the full tier
def test_the_device_check_runs_here_and_says_the_gpu_lines_are_unverified(tmp_path):
    # benchmarks/device_check.sh is what a lent GPU machine runs (docs/benchmarks.md "GPU"); on a
    # machine without CUDA it must still run to the end: GPU tests skipped, the table unverified.
    import os
    import subprocess

    script = SCRIPT.parent / "device_check.sh"
    env = {**os.environ, "OUT": str(tmp_path), "TESTS_S": "300", "VALID_S": "120", "ONLY": "01_scaled_add",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(script)], cwd=SCRIPT.parents[1], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "bwrap:" in done.stdout and "=== [" in done.stdout
    tests_log = (tmp_path / "gpu_tests.log").read_text()
    assert "SKIPPED" in tests_log and " skipped in " in tests_log and "FAILED" not in tests_log
    table = (tmp_path / "gpu_validation.log").read_text()
    assert "| 01_scaled_add | unverified (no GPU) |" in table
