"""End-to-end: every built-in problem with its honest solution from examples/builtin/ is ``ok``."""

from __future__ import annotations

import math

import pytest

from tritongym import Status, builtin_suite, evaluate

from .helpers import FIXTURES

EXAMPLES = FIXTURES.parents[1] / "examples" / "builtin"
SUITE = builtin_suite()


@pytest.mark.slow
@pytest.mark.parametrize("problem", SUITE, ids=[p.name for p in SUITE])
def test_builtin_problem_with_its_honest_solution_is_ok(problem):
    result = evaluate(problem, EXAMPLES / f"{problem.name}.py", device="cpu", num_trials=2, timeout=120)
    assert result.status == Status.OK, (result.error, result.violations)
    assert result.reward == 0.5
    assert result.violations == [] and all(t.passed for t in result.trials)
    assert any(k.defined_in_candidate for k in result.triton_launches)
    assert result.problem_id == problem.problem_id


@pytest.mark.gpu
@pytest.mark.parametrize("problem", SUITE[:2], ids=[p.name for p in SUITE[:2]])
def test_builtin_problem_on_cuda_is_timed(problem):
    result = evaluate(problem, EXAMPLES / f"{problem.name}.py", device="cuda", num_trials=2)
    assert result.status == Status.OK, (result.error, result.violations)
    assert result.device == "cuda"
    assert result.timing is not None and result.timing.meaningful
    assert result.speedup is not None and math.isfinite(result.speedup) and result.speedup > 0
    assert result.reward >= 0.5
    assert not any(n.code == "timing_unavailable" for n in result.notices)
