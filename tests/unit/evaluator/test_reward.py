"""`compute_reward` cases not pinned elsewhere: distinct weights, clipping of coverage, non-finite terms.

Default weights and cap at their boundaries: tests/unit/evaluator/test_defaults.py; the speedup term's
clipping, timing marked not meaningful and non-ok statuses: tests/unit/evaluate/test_result.py.
"""

from __future__ import annotations

import math

import pytest

from tritongym.evaluator.result import EvalResult, Status, TimingReport
from tritongym.evaluator.reward import RewardConfig, compute_reward

# Distinct weights, so that a term multiplied by the wrong weight shows.
DISTINCT = RewardConfig(correct_weight=0.25, speedup_weight=0.75, speedup_cap=2.5, coverage_weight=1.5)


def ok(**fields) -> EvalResult:
    return EvalResult(status=Status.OK, **fields)


def timing(meaningful: bool) -> TimingReport:
    return TimingReport(method="m", device_name="d", reference_median_ms=2.0, candidate_median_ms=1.0,
                        reference_reps=3, candidate_reps=3, meaningful=meaningful)


def test_each_term_has_its_own_weight():
    assert compute_reward(ok(), DISTINCT) == 0.25
    assert compute_reward(ok(speedup=2.0), DISTINCT) == pytest.approx(0.25 + 0.75 * 2.0)
    assert compute_reward(ok(coverage=0.4), DISTINCT) == pytest.approx(0.25 + 1.5 * 0.4)
    assert compute_reward(ok(speedup=2.0, coverage=0.4, timing=timing(True)), DISTINCT) == \
        pytest.approx(0.25 + 0.75 * 2.0 + 1.5 * 0.4)


def test_the_speedup_cap_is_the_configured_one():
    assert compute_reward(ok(speedup=2.4), DISTINCT) == pytest.approx(0.25 + 0.75 * 2.4)
    assert compute_reward(ok(speedup=2.6), DISTINCT) == pytest.approx(0.25 + 0.75 * 2.5)


@pytest.mark.parametrize(("coverage", "term"), [
    (0.0, 0.0), (0.5, 0.5), (1.0, 1.0), (1.01, 1.0), (7.0, 1.0), (-0.3, 0.0),
    (math.nan, 0.0), (math.inf, 0.0), (-math.inf, 0.0), (None, 0.0),
])
def test_coverage_is_clipped_to_0_1_and_ignored_when_not_finite(coverage, term):
    assert compute_reward(ok(coverage=coverage), DISTINCT) == pytest.approx(0.25 + 1.5 * term)


def test_coverage_counts_even_when_timing_is_not_meaningful():
    # Coverage comes from the profiler, not from the timing; only the speedup term is dropped.
    result = ok(speedup=2.0, coverage=0.4, timing=timing(False))
    assert compute_reward(result, DISTINCT) == pytest.approx(0.25 + 1.5 * 0.4)


def test_zero_weights_switch_terms_off():
    result = ok(speedup=2.0, coverage=0.5)
    assert compute_reward(result, RewardConfig(speedup_weight=0.0, coverage_weight=0.0)) == 0.5
    assert compute_reward(result, RewardConfig(correct_weight=0.0, coverage_weight=0.0)) == pytest.approx(1.0)


def test_the_reward_is_a_float_and_none_config_is_the_default():
    reward = compute_reward(ok(speedup=2, coverage=1), RewardConfig(correct_weight=1, speedup_weight=1,
                                                                     speedup_cap=3, coverage_weight=1))
    assert type(reward) is float and reward == 4.0
    result = ok(speedup=1.5, coverage=0.2)
    assert compute_reward(result, None) == compute_reward(result, RewardConfig()) == pytest.approx(1.35)


@pytest.mark.parametrize("status", [s for s in Status if s != Status.OK])
def test_non_ok_earns_zero_under_any_weights(status):
    assert compute_reward(EvalResult(status=status, speedup=2.0, coverage=1.0), DISTINCT) == 0.0
