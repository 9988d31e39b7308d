"""Session fixtures of the end-to-end tests (helpers live in helpers.py)."""

from __future__ import annotations

import pytest

from tritongym import EvalResult

from .helpers import run_eval


@pytest.fixture(scope="session")
def honest_result() -> EvalResult:
    """The honest tiny-ReLU candidate's verdict (shared by the contract tests)."""
    return run_eval("relu_honest")
