"""Fixtures shared by the trainer-integration tests (each runs in its own venv; see .ci/)."""

from __future__ import annotations

import pytest

SCALED_ADD = "builtin/01_scaled_add"  # the built-in problem the scripted replies of the TRL tests solve


@pytest.fixture(scope="module")
def problem():
    """The built-in scaled-add problem."""
    from tritongym.tasks import load_problems

    return next(p for p in load_problems("builtin") if p.problem_id == SCALED_ADD)


@pytest.fixture(scope="module")
def evaluator():
    """The real sandboxed evaluator on the CPU, two workers, for one test module."""
    from tritongym.env.evaluators import PoolEvaluator
    from tritongym.evaluator import EvalOptions

    with PoolEvaluator(EvalOptions(device="cpu"), max_workers=2) as pool:
        yield pool
