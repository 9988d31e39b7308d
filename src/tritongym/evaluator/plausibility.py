"""Bounds the trusted parent puts on the times a candidate worker reports.

The candidate worker times its own calls, so its figures are claims. Two checks made by the
parent bound them (reward-hacking.md D4, D5, D7, §3.6):

**Physics floor.** A call cannot finish faster than the bytes it must move divided by the
device's bandwidth. The reference worker (a clean process) measures the device-to-device copy
bandwidth ``B`` (bytes read plus written per second); the task moves at least the bytes of its
inputs and outputs, ``M``. With a slack of 2 for caches and measurement error:

    floor_ms = max(M / (2·B) · 1e3, 1 µs);   candidate median < floor_ms  →  implausible_speedup

**Wall-clock cross-check.** The parent times every repetition request's round trip itself.
Both workers generate inputs and flush the cache with the same code, so the difference of the
round-trip medians is the difference of the call times:

    estimate_ms = median(rt_candidate) − median(rt_reference) + median(t_reference)
    inconsistent when median(t_candidate) < estimate_ms − max(0.5 ms, 0.25·estimate_ms)

which catches a worker that reports far less time than it took. The margin absorbs scheduling
noise; below ~0.5 ms the physics floor and the rechecks carry the weight.
"""

from __future__ import annotations

import statistics

#: No GPU call completes, event to event with a device-wide synchronize, in under this.
ABSOLUTE_FLOOR_MS = 1e-3


def physics_floor_ms(bytes_moved: int, bandwidth_bytes_per_s: float, slack: float = 2.0) -> float:
    """Smallest believable time for a call that moves `bytes_moved` bytes."""
    if bandwidth_bytes_per_s <= 0:
        return ABSOLUTE_FLOOR_MS
    return max(bytes_moved / (slack * bandwidth_bytes_per_s) * 1e3, ABSOLUTE_FLOOR_MS)


def wall_clock_estimate_ms(candidate_roundtrips_ms: list[float], reference_roundtrips_ms: list[float],
                           reference_ms: list[float]) -> float:
    """The parent's own estimate of the candidate's call time (see the module docstring)."""
    return (statistics.median(candidate_roundtrips_ms) - statistics.median(reference_roundtrips_ms)
            + statistics.median(reference_ms))


def wall_clock_consistent(candidate_ms: list[float], estimate_ms: float,
                          absolute_margin_ms: float = 0.5, relative_margin: float = 0.25) -> bool:
    """False when the reported median is far below what the parent's clock says."""
    margin = max(absolute_margin_ms, relative_margin * estimate_ms)
    return statistics.median(candidate_ms) >= estimate_ms - margin
