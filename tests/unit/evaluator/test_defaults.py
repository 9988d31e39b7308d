"""The defaults that decide a verdict or a reward, pinned at their boundaries (issue 14).

Each test states the default's value as a literal and checks one case just inside and one just
outside the bound, so moving a default is a deliberate change that fails here first. Fast: no
worker process, hand-made tensors and results.
"""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.evaluator import plausibility, trivial
from tritongym.evaluator.oprules import heavy_share
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.result import EvalResult, Status
from tritongym.evaluator.reward import RewardConfig, compute_reward, prs_keep_probability


def test_default_tolerances_are_kernelbench_1e_2_and_strict_1e_4_for_float32():
    kernelbench = EvalOptions().tolerance_for(torch.float32)
    assert (kernelbench.atol, kernelbench.rtol) == (1e-2, 1e-2)
    strict = EvalOptions(tolerance="strict").tolerance_for(torch.float32)
    assert (strict.atol, strict.rtol) == (1e-4, 1e-4)


def test_the_precision_check_allows_32_times_the_reference_error_plus_1e_5():
    options = EvalOptions()
    assert (options.precision_factor, options.precision_floor) == (32.0, 1e-5)
    truth = torch.ones(1000, dtype=torch.float64)
    expected = torch.full((1000,), 1 + 1e-6, dtype=torch.float64)  # reference error 1e-6
    bound = 32.0 * 1e-6 + 1e-5  # 4.2e-5 relative
    inside = torch.full((1000,), 1 + 0.99 * bound, dtype=torch.float64)
    outside = torch.full((1000,), 1 + 1.01 * bound, dtype=torch.float64)
    assert trivial.check_precision(expected, inside, truth, 32.0, 1e-5) is None
    assert trivial.check_precision(expected, outside, truth, 32.0, 1e-5) is not None


def test_the_output_must_be_ten_times_closer_than_a_trivial_one():
    assert EvalOptions().trivial_margin == 0.1
    expected = torch.full((100,), 2.0)  # zeros are off by relative L2 1.0
    inside = expected * (1 + 0.099)
    outside = expected * (1 + 0.101)
    assert trivial.check_beats_trivial(expected, inside, [], None, 0.1) is None
    assert trivial.check_beats_trivial(expected, outside, [], None, 0.1) is not None


def test_the_fallback_rule_is_half_the_flops_or_all_the_elements():
    assert heavy_share((0, 499), (0, 1000)) is None
    assert heavy_share((0, 500), (0, 1000)) is not None
    assert heavy_share((999, 0), (1000, 0)) is None
    assert heavy_share((1000, 0), (1000, 0)) is not None


def test_the_reward_is_dr_kernels_half_correct_half_capped_speedup_half_coverage():
    config = RewardConfig()
    assert (config.correct_weight, config.speedup_weight, config.speedup_cap, config.coverage_weight) == \
        (0.5, 0.5, 3.0, 0.5)
    ok = EvalResult(status=Status.OK, speedup=2.0, coverage=0.4)
    assert compute_reward(ok) == pytest.approx(0.5 + 0.5 * 2.0 + 0.5 * 0.4)
    capped = EvalResult(status=Status.OK, speedup=3.5, coverage=1.0)
    assert compute_reward(capped) == pytest.approx(0.5 + 0.5 * 3.0 + 0.5)
    assert compute_reward(EvalResult(status=Status.OK)) == 0.5
    for status in Status:
        if status != Status.OK:
            assert compute_reward(EvalResult(status=status, speedup=3.0, coverage=1.0)) == 0.0


def test_prs_keeps_correct_turns_by_coverage_from_threshold_0_3_over_0_1():
    def keep(coverage, status=Status.OK, **kw):
        return prs_keep_probability(EvalResult(status=status, coverage=coverage), **kw)

    assert keep(0.30) == 0.0 and keep(0.35) == pytest.approx(0.5) and keep(0.40) == 1.0
    assert keep(0.29) == 0.0 and keep(0.41) == 1.0
    assert keep(0.2, status=Status.INCORRECT) == 1.0  # PRS targets lazy correct kernels only
    assert keep(None) is None
    assert keep(0.3, factor=0) == 1.0 and keep(0.2999, factor=0) == 0.0
    assert math.isclose(keep(0.33, threshold=0.3, factor=0.1), 0.3)


# -- plausibility margins (evaluator/plausibility.py) ------------------------------------------------
# The jitter margin's constants (four standard errors; 1.2533·σ/√n with σ = IQR/1.349 from quartiles;
# at least 4 samples a side), the cross-check's factor 3 and the corroboration factor 1.5, each inclusive.


def test_the_jitter_margin_is_four_standard_errors_of_both_medians():
    candidate = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]  # exclusive quartiles 2.25 and 6.75
    reference = [2.0 * x for x in candidate]
    se_candidate = 1.2533 * (4.5 / 1.349) / math.sqrt(8)
    expected = 4.0 * math.hypot(se_candidate, 2.0 * se_candidate)
    assert plausibility.jitter_margin_ms(candidate, reference) == pytest.approx(expected, rel=1e-12)
    assert plausibility.jitter_margin_ms(candidate, reference, standard_errors=1.0) == \
        pytest.approx(expected / 4.0, rel=1e-12)


def test_the_jitter_margin_needs_four_round_trips_a_side():
    four = [1.0, 2.0, 3.0, 4.0]
    assert math.isfinite(plausibility.jitter_margin_ms(four, four))
    assert plausibility.jitter_margin_ms(four[:3], four) == math.inf
    assert plausibility.jitter_margin_ms(four, four[:3]) == math.inf
    assert plausibility.jitter_margin_ms([1.0] * 4, [1.0] * 4) == plausibility.MIN_MARGIN_MS == 0.02


def test_the_wall_clock_cross_check_allows_a_third_of_the_estimate_less_the_margin():
    # estimate 3 ms, margin 0.5 ms: the reported median may go down to 3/3 − 0.5 = 0.5 ms
    assert plausibility.wall_clock_consistent([0.5, 0.5, 0.5], 3.0, 0.5)
    assert not plausibility.wall_clock_consistent([0.49, 0.49, 0.49], 3.0, 0.5)


def test_a_report_is_corroborated_up_to_one_and_a_half_times_plus_the_margin():
    # reported 2 ms, margin 0.5 ms: the parent's estimate may reach 2·1.5 + 0.5 = 3.5 ms
    assert plausibility.corroborated(2.0, 3.5, 0.5)
    assert not plausibility.corroborated(2.0, 3.51, 0.5)


def test_the_floors_apply_to_any_positive_rate_and_work():
    assert plausibility.physics_floor_ms(10, 0.5) == pytest.approx(10 / (2 * 0.5) * 1e3)  # a slow "device"
    assert plausibility.physics_floor_ms(10, 0.0) == plausibility.ABSOLUTE_FLOOR_MS
    assert plausibility.flop_floor_ms(1, 0.5) == pytest.approx(1 / (2 * 0.5) * 1e3)
    assert plausibility.flop_floor_ms(0, 1e12) is None and plausibility.flop_floor_ms(1e9, 0.0) is None
    assert plausibility.flop_floor_ms(1e9, math.inf) is None
