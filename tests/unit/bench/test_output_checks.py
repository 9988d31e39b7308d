"""benchmarks/output_checks.py at a small size: it times the parent's checks and refuses to time
an output that fails them (a benchmark of checks that reject its honest output measures nothing)."""

from __future__ import annotations

import pytest
import torch
from tests.unit.bench.conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("output_checks")


def test_it_times_the_checks_of_an_honest_output(bench, capsys):
    threads = torch.get_num_threads()
    try:
        assert bench.main(["--rows", "16", "--cols", "32", "--repeats", "2"]) > 0
    finally:
        torch.set_num_threads(threads)
    assert "16x32 float32 output:" in capsys.readouterr().out


def test_a_wrong_output_is_refused_not_timed(bench):
    from tritongym.evaluator.options import EvalOptions
    from tritongym.evaluator.reference import ReferenceTrial

    x = torch.randn(8, 8)
    trial = ReferenceTrial(family="scaled", inputs=[x], expected=2 * x, compute_ops=[], finite=True,
                           truth=2 * x.double())
    with pytest.raises(AssertionError, match="failed a check"):
        bench.check_one_trial(trial, torch.zeros_like(x), EvalOptions(device="cpu"))
