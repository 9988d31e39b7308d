"""Bounds the trusted parent puts on the times a candidate worker reports.

The candidate worker times its own calls, so its figures are claims. Three checks made by the
parent bound them (reward-hacking.md D4, D5, D7, §3.6):

**Bytes floor.** A call cannot finish faster than the bytes it must move divided by the
device's bandwidth. The reference worker (a clean process) measures the device-to-device copy
bandwidth ``B`` (bytes read plus written per second) at setup; the task moves at least the
bytes of its inputs and outputs, ``M``. With a slack of 2 for caches and measurement error:

    bytes_floor_ms = max(M / (2·B) · 1e3, 1 µs);   median < bytes_floor_ms  →  implausible_speedup

**FLOP floor.** The reference's dense matmul FLOPs ``F`` (``mm``, ``bmm``, ``addmm``,
``baddbmm``, counted by torch's flop counter on a timing input) cannot run faster than the
device's own half-precision GEMM rate ``R`` (measured at setup; float8 is at most 2× faster):

    flop_floor_ms = F / (2·R) · 1e3

The FLOP count is *nominal*: a candidate that exploits structure the reference ignores (a
diagonal or triangular operand) does less work honestly. So beating the FLOP floor is a
violation only when the parent's own clock does not corroborate the reported time; a
corroborated one is a notice.

**Wall-clock cross-check.** The parent times every repetition's round trip (the ``rep`` request
and the keep/drop reply after it) itself. Both workers generate inputs and flush the cache with
the same code, and the candidate's evidence is collected by a separate request *after* the
parent's clock stops, so both round trips carry the same overhead; rechecked repetitions (whose
outputs travel back) are left out. The difference of the round-trip medians is the difference of
the call times:

    estimate_ms = median(rt_candidate) − median(rt_reference) + median(t_reference)
    inconsistent when median(t_candidate) < estimate_ms / 3 − margin_ms

with ``margin_ms`` from the measured jitter: four standard errors of the two round-trip medians
(1.2533·σ/√n, σ from the interquartile range), at least 20 µs. On a quiet GPU machine the margin
is tens of microseconds and the check binds well below a millisecond; on a loaded host it
widens by itself instead of producing false verdicts.

**Paired confirmation.** The blocks above time the reference's calls and then the candidate's,
so a burst of other work on the machine (other evaluations of a pool sharing the GPU: their
trials and clean-room replays run outside the timing lock) can land on one side's block only and
open a gap that is not the candidate's. That happened on an H200 with four evaluations at once:
an honest 01_scaled_add read 0.476 ms by the blocks for 0.0045 ms reported, with a jitter margin
of 0.12 ms. So an inconsistent result is never a verdict by itself: the parent times a second
pass of *pairs*, one reference round trip and one candidate round trip back to back (their
order alternating), and the estimate is the median of the pairs' differences:

    paired_estimate_ms = median(rt_candidate_i − rt_reference_i) + median(t_reference)
    inconsistent when  median(t_candidate, paired pass) < paired_estimate_ms / 3 − paired_margin_ms

(``paired_margin_ms``: four standard errors of that median, at least 20 µs), judged on the
blocks' reported median (the figure the speedup uses) and on the pairs' alike. Interference that
lasts longer than one pair cancels in its difference; a candidate whose call really takes longer
than it reports pays the difference in every pair. Implausible timing needs both passes. The
candidate can count its calls and tell the pairs from the blocks, so the pairs' outputs are
rechecked at secret places as often as the blocks' (`measurement._time_pairs`): skipping the work
to make the pairs fast is a timed output mismatch.
"""

from __future__ import annotations

import math
import statistics

#: No GPU call completes, event to event with a device-wide synchronize, in under this.
ABSOLUTE_FLOOR_MS = 1e-3
#: The smallest jitter margin of the wall-clock cross-check.
MIN_MARGIN_MS = 0.02


def physics_floor_ms(bytes_moved: int, bandwidth_bytes_per_s: float, slack: float = 2.0) -> float:
    """Smallest believable time for a call that moves `bytes_moved` bytes."""
    if bandwidth_bytes_per_s <= 0:
        return ABSOLUTE_FLOOR_MS
    return max(bytes_moved / (slack * bandwidth_bytes_per_s) * 1e3, ABSOLUTE_FLOOR_MS)


def flop_floor_ms(flops: float, flops_per_s: float, slack: float = 2.0) -> float | None:
    """Smallest time the nominal dense-matmul FLOPs take at the measured rate; None without either."""
    if flops <= 0 or flops_per_s <= 0 or not math.isfinite(flops_per_s):
        return None
    return flops / (slack * flops_per_s) * 1e3


def wall_clock_estimate_ms(candidate_roundtrips_ms: list[float], reference_roundtrips_ms: list[float],
                           reference_ms: list[float]) -> float:
    """The parent's own estimate of the candidate's call time (see the module docstring)."""
    return (statistics.median(candidate_roundtrips_ms) - statistics.median(reference_roundtrips_ms)
            + statistics.median(reference_ms))


def paired_estimate_ms(differences_ms: list[float], reference_ms: list[float]) -> float:
    """The parent's estimate from back-to-back pairs of round trips (module docstring)."""
    return statistics.median(differences_ms) + statistics.median(reference_ms)


def paired_margin_ms(differences_ms: list[float], standard_errors: float = 4.0) -> float:
    """The paired pass's margin: `standard_errors` × the standard error of the pairs' median, ≥ 20 µs."""
    return max(MIN_MARGIN_MS, standard_errors * _median_standard_error(differences_ms))


def _median_standard_error(samples: list[float]) -> float:
    if len(samples) < 4:
        return float("inf")
    quartiles = statistics.quantiles(samples, n=4)
    sigma = (quartiles[2] - quartiles[0]) / 1.349
    return 1.2533 * sigma / math.sqrt(len(samples))


def jitter_margin_ms(candidate_roundtrips_ms: list[float], reference_roundtrips_ms: list[float],
                     standard_errors: float = 4.0) -> float:
    """The cross-check's margin: `standard_errors` × the standard error of the estimate, ≥ 20 µs.

    With fewer than 4 round trips a side the jitter is unknown and the margin is infinite (no
    verdict from the cross-check).
    """
    error = math.hypot(_median_standard_error(candidate_roundtrips_ms), _median_standard_error(reference_roundtrips_ms))
    return max(MIN_MARGIN_MS, standard_errors * error)


def wall_clock_consistent(candidate_ms: list[float], estimate_ms: float, margin_ms: float,
                          factor: float = 3.0) -> bool:
    """False when the reported median is a small fraction of what the parent's clock says."""
    return statistics.median(candidate_ms) >= estimate_ms / factor - margin_ms


def corroborated(reported_ms: float, estimate_ms: float, margin_ms: float, factor: float = 1.5) -> bool:
    """Whether the parent's clock confirms a reported time (within `factor` and the jitter margin)."""
    return estimate_ms <= reported_ms * factor + margin_ms
