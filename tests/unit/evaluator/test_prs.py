"""The evaluator-side PRS keep probability (`tritongym.evaluator.reward.prs_keep_probability`).

``p = clip((coverage − threshold) / factor, 0, 1)`` for an `ok` turn, a hard cut when factor is 0,
1 for any other status, None for an `ok` turn without coverage. The defaults (0.3, 0.1) are pinned
in tests/unit/evaluator/test_defaults.py; here other thresholds and factors, so that the two
parameters cannot be swapped, and the rules' order.
"""

from __future__ import annotations

import math

import pytest

from tritongym.evaluator.result import EvalResult, Status
from tritongym.evaluator.reward import prs_keep_probability


def keep(coverage, status=Status.OK, **kw):
    return prs_keep_probability(EvalResult(status=status, coverage=coverage), **kw)


@pytest.mark.parametrize(("coverage", "p"), [
    (0.0, 0.0), (0.5, 0.0), (0.6, 0.0), (0.65, 0.25), (0.7, 0.5), (0.75, 0.75), (0.79, 0.95),
    (0.8, 1.0), (0.81, 1.0), (1.0, 1.0), (3.0, 1.0), (-1.0, 0.0),
])
def test_the_ramp_runs_from_threshold_to_threshold_plus_factor(coverage, p):
    assert keep(coverage, threshold=0.6, factor=0.2) == pytest.approx(p)


def test_threshold_and_factor_are_not_interchangeable():
    assert keep(0.5, threshold=0.4, factor=0.2) == pytest.approx(0.5)
    assert keep(0.5, threshold=0.2, factor=0.4) == pytest.approx(0.75)


def test_a_zero_factor_is_a_hard_cut_at_the_threshold_inclusive():
    assert keep(0.6, threshold=0.6, factor=0) == 1.0
    assert keep(0.6 - 1e-9, threshold=0.6, factor=0) == 0.0
    assert keep(0.0, threshold=0.0, factor=0.0) == 1.0


@pytest.mark.parametrize("status", [s for s in Status if s != Status.OK])
@pytest.mark.parametrize("coverage", [None, 0.0, 0.99])
def test_turns_that_are_not_ok_are_always_kept_even_without_coverage(status, coverage):
    assert keep(coverage, status=status) == 1.0
    assert keep(coverage, status=status, threshold=0.9, factor=0) == 1.0


def test_an_ok_turn_without_coverage_has_no_keep_probability_whatever_the_factor():
    assert keep(None) is None
    assert keep(None, factor=0) is None
    assert keep(None, threshold=0.0) is None


def test_the_probability_is_a_float():
    p = keep(1, threshold=0, factor=1)
    assert type(p) is float and p == 1.0
    assert not math.isnan(keep(0.35))
