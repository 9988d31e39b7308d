"""The parent's bounds on reported times: physics floor and wall-clock cross-check."""

from __future__ import annotations

import pytest

from tritongym.evaluator.plausibility import (
    ABSOLUTE_FLOOR_MS,
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


def test_wall_clock_estimate_removes_the_shared_overhead():
    # Round trips carry the same input generation, flush and messaging on both sides (~2 ms).
    estimate = wall_clock_estimate_ms([7.0, 7.1, 6.9], [3.0, 3.1, 2.9], [1.0, 1.0, 1.0])
    assert estimate == pytest.approx(5.0)


def test_honest_reports_are_consistent_and_a_tenfold_understatement_is_not():
    estimate = wall_clock_estimate_ms([12.0] * 5, [3.0] * 5, [1.0] * 5)  # the call takes ~10 ms
    assert wall_clock_consistent([9.6, 9.8, 10.1], estimate)
    assert wall_clock_consistent([5.0, 5.2, 4.9], estimate)  # scheduling noise on a loaded host
    assert not wall_clock_consistent([1.0, 1.0, 1.0], estimate)


def test_small_calls_are_judged_with_the_absolute_margin():
    estimate = wall_clock_estimate_ms([2.3] * 3, [2.0] * 3, [0.1] * 3)  # ~0.4 ms
    assert wall_clock_consistent([0.05] * 3, estimate)  # within 0.5 ms: left to the floor and rechecks
