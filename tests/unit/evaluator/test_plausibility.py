"""The parent's bounds on reported times: bytes floor, FLOP floor and the wall-clock cross-check."""

from __future__ import annotations

import statistics

import pytest

from tritongym.evaluator.plausibility import (
    ABSOLUTE_FLOOR_MS,
    MIN_MARGIN_MS,
    corroborated,
    flop_floor_ms,
    jitter_margin_ms,
    paired_estimate_ms,
    paired_margin_ms,
    physics_floor_ms,
    wall_clock_consistent,
    wall_clock_estimate_ms,
)


def test_physics_floor_is_bytes_over_twice_the_bandwidth():
    # 1.6 GB in and out at a measured 3.2 TB/s (copy, read + written): at least 0.25 ms.
    assert physics_floor_ms(1_600_000_000, 3.2e12) == pytest.approx(0.25)


def test_physics_floor_never_drops_below_the_absolute_floor():
    assert physics_floor_ms(64, 3.2e12) == ABSOLUTE_FLOOR_MS
    assert physics_floor_ms(10**9, 0.0) == ABSOLUTE_FLOOR_MS


def test_flop_floor_binds_a_compute_bound_gemm_far_above_its_bytes_floor():
    # A 4096³ float32 GEMM: 137 GFLOP; 3 × 64 MiB moved. At an H100-like measured 700 TFLOP/s
    # half-precision rate the FLOP floor is ~0.098 ms; the bytes floor at 3 TB/s is ~0.034 ms.
    flops = 2 * 4096**3
    floor = flop_floor_ms(flops, 700e12)
    assert floor == pytest.approx(flops / 1.4e15 * 1e3)
    assert floor > 2.5 * physics_floor_ms(3 * 4096 * 4096 * 4, 3e12)
    assert flop_floor_ms(0, 700e12) is None and flop_floor_ms(flops, 0.0) is None


def test_wall_clock_estimate_removes_the_shared_overhead():
    # Round trips carry the same input generation, flush and messaging on both sides (~2 ms).
    estimate = wall_clock_estimate_ms([7.0, 7.1, 6.9], [3.0, 3.1, 2.9], [1.0, 1.0, 1.0])
    assert estimate == pytest.approx(5.0)


def test_honest_reports_are_consistent_and_a_tenfold_understatement_is_not():
    estimate = wall_clock_estimate_ms([12.0] * 5, [3.0] * 5, [1.0] * 5)  # the call takes ~10 ms
    margin = jitter_margin_ms([12.0, 12.1, 11.9, 12.0, 12.2], [3.0, 3.1, 2.9, 3.0, 3.05])
    assert wall_clock_consistent([9.6, 9.8, 10.1], estimate, margin)
    assert wall_clock_consistent([5.0, 5.2, 4.9], estimate, margin)  # scheduling noise on a loaded host
    assert not wall_clock_consistent([1.0, 1.0, 1.0], estimate, margin)


def test_a_quiet_machine_binds_well_below_a_millisecond():
    # The old fixed 0.5 ms margin let any call under ~1.5 ms report anything. With round trips
    # that jitter by a few µs, a 0.3 ms call reported as 0.01 ms is caught.
    cand_rt = [0.80 + 0.004 * (i % 5) for i in range(30)]
    ref_rt = [0.55 + 0.004 * (i % 5) for i in range(30)]
    estimate = wall_clock_estimate_ms(cand_rt, ref_rt, [0.05] * 30)  # ≈ 0.30 ms
    margin = jitter_margin_ms(cand_rt, ref_rt)
    assert MIN_MARGIN_MS <= margin < 0.03
    assert not wall_clock_consistent([0.01] * 30, estimate, margin)
    assert wall_clock_consistent([0.28] * 30, estimate, margin)


def test_a_noisy_host_widens_the_margin_instead_of_flagging_honest_calls():
    cand_rt = [2.0, 9.0, 2.5, 12.0, 3.0, 2.2, 8.0, 2.1]
    ref_rt = [1.0, 6.0, 1.2, 1.1, 9.0, 1.3, 1.0, 5.0]
    margin = jitter_margin_ms(cand_rt, ref_rt)
    assert margin > 1.0
    estimate = wall_clock_estimate_ms(cand_rt, ref_rt, [0.5] * 8)
    assert wall_clock_consistent([0.6] * 8, estimate, margin)


def test_too_few_round_trips_give_no_verdict():
    assert jitter_margin_ms([1.0, 1.0], [0.5, 0.5]) == float("inf")


def test_a_fast_report_is_corroborated_only_when_the_parents_clock_agrees():
    assert corroborated(0.05, estimate_ms=0.06, margin_ms=0.02)
    assert not corroborated(0.05, estimate_ms=0.40, margin_ms=0.02)


def test_the_paired_estimate_is_the_median_difference_plus_the_reference_call():
    # Pairs of round trips taken back to back: a burst that slows both members of a pair cancels.
    differences = [0.30, 0.31, 2.5, 0.29, 0.30, 0.32, -1.0, 0.30]  # two pairs hit on one side only
    assert paired_estimate_ms(differences, [1.0, 1.2, 0.8]) == pytest.approx(0.30 + 1.0)
    assert paired_estimate_ms([0.5], [2.0]) == pytest.approx(2.5)


def test_the_paired_margin_is_four_standard_errors_of_the_median_difference_at_least_20_us():
    # sigma from the interquartile range (IQR/1.349), SE of the median 1.2533·sigma/√n, margin 4 SE.
    differences = [0.0, 0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.4]
    quartiles = statistics.quantiles(differences, n=4)
    expected = 4 * 1.2533 * (quartiles[2] - quartiles[0]) / 1.349 / 8 ** 0.5
    assert paired_margin_ms(differences) == pytest.approx(expected)
    assert paired_margin_ms(differences, standard_errors=2.0) == pytest.approx(expected / 2)
    assert paired_margin_ms([0.3] * 8) == MIN_MARGIN_MS          # no jitter: the floor
    assert paired_margin_ms([0.3, 0.4, 0.5]) == float("inf")      # too few pairs: no verdict
