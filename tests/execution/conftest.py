"""Shared pool for the execution tests: one warm LocalPool (two slots, fork servers) per module."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritongym.evaluator.jail.sandbox import bwrap_problem
from tritongym.execution.forkserver import forkserver_problem

HERE = Path(__file__).resolve().parent
RELU_PROBLEM = HERE.parent / "sandbox" / "relu_problem.py"
FIXTURES = HERE.parent / "fixtures" / "candidates"


def needs_forkserver() -> pytest.MarkDecorator:
    reason = bwrap_problem() or forkserver_problem()
    return pytest.mark.skipif(reason is not None, reason=f"no jailed fork server here: {reason}")
