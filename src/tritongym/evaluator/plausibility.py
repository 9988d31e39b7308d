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
    inconsistent when median(t_candidate) < estimate_ms / 3 − 0.5 ms

which catches a worker that reports a small fraction of the time it took. The generous margin
absorbs scheduling noise (on a loaded 2-core host honest reports were seen at half the estimate);
smaller understatements, and calls under ~0.5 ms, are left to the physics floor and the rechecks.
The round trip of a repetition spans the ``rep`` request *and* the keep/drop reply after it, so a
worker that answers ``rep`` early and works afterwards is still timed.
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
                          absolute_margin_ms: float = 0.5, factor: float = 3.0) -> bool:
    """False when the reported median is a small fraction of what the parent's clock says."""
    return statistics.median(candidate_ms) >= estimate_ms / factor - absolute_margin_ms
