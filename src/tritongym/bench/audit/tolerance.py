"""Element-wise arithmetic in float64 chunks, and the search for a tolerance trivial outputs fail."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from tritongym.bench.audit.model import _CHUNK, ATOL_STEPS, HONEST_MARGIN, RTOL_STEPS, ToleranceOverride


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _leaves(v)]
    return []


Predicted = float | torch.Tensor | Callable[[int, int], torch.Tensor]


def _chunk(predicted: Predicted, start: int, stop: int) -> torch.Tensor | float:
    if isinstance(predicted, torch.Tensor):
        return predicted.reshape(-1)[start:stop].to(torch.float64)
    if callable(predicted):
        return predicted(start, stop)
    return float(predicted)


def max_excess(predicted: Predicted, expected: torch.Tensor, rtols: Sequence[float]) -> list[float]:
    """For each rtol r: max over elements of ``|p − e| − r·|e|`` in float64.

    `predicted` passes the evaluator's per-element test at ``(atol, r)`` iff the value is ``≤
    atol``. NaN/±Inf in `expected` must be matched at the same positions (+inf otherwise, as in
    `tritongym.evaluator.compare`); integer and boolean outputs must match exactly (−inf when
    they do, +inf when not); an empty output gives −inf. `predicted` is a tensor of the same
    shape, a scalar, or a function of an element range returning that range in float64.
    """
    worst = [-math.inf] * len(rtols)
    flat = expected.detach().reshape(-1)
    exact = not (expected.dtype.is_floating_point or expected.dtype.is_complex)
    for start in range(0, flat.numel(), _CHUNK):
        stop = min(start + _CHUNK, flat.numel())
        e = flat[start:stop].to(torch.float64)
        p = _chunk(predicted, start, stop)
        if exact:
            if bool((e != p).any()):
                return [math.inf] * len(rtols)
            continue
        diff = (e - p).abs_()
        magnitude = e.abs()
        values = _excess(diff, magnitude, rtols)
        if any(math.isnan(v) for v in values):  # NaN or ±Inf somewhere: the slow, exact rule
            p_full = p if isinstance(p, torch.Tensor) else torch.full_like(e, p)
            special = ~torch.isfinite(e) | ~torch.isfinite(p_full)
            same = (e.isnan() & p_full.isnan()) | (e.isinf() & p_full.isinf() & (e == p_full))
            if bool((special & ~same).any()):
                return [math.inf] * len(rtols)
            keep = ~special
            values = _excess(diff[keep], magnitude[keep], rtols)
        worst = [max(a, b) for a, b in zip(worst, values, strict=True)]
    return worst


def _excess(diff: torch.Tensor, magnitude: torch.Tensor, rtols: Sequence[float]) -> list[float]:
    if diff.numel() == 0:
        return [-math.inf] * len(rtols)
    return [float(torch.sub(diff, magnitude, alpha=r).max()) if r else float(diff.max()) for r in rtols]


def _combine(per_leaf: Iterable[list[float]], width: int) -> list[float]:
    """Element-wise max of several `max_excess` results (a predictor passes only if every leaf does)."""
    out = [-math.inf] * width
    for values in per_leaf:
        out = [max(a, b) for a, b in zip(out, values, strict=True)]
    return out


def _max_abs(leaves: Sequence[torch.Tensor]) -> float:
    best = 0.0
    for leaf in leaves:
        if leaf.numel():
            value = leaf.detach().abs().max().to(torch.float64)
            best = max(best, float(value) if math.isfinite(float(value)) else math.inf)
    return best


def tolerance_grid(tolerance: tuple[float, float], atol_steps: int = ATOL_STEPS,
                   rtol_steps: int = RTOL_STEPS) -> tuple[list[float], list[float]]:
    """The candidate tolerances: ``atol·10⁻ⁱ`` (i < atol_steps) and ``rtol·10⁻ʲ`` (j < rtol_steps)."""
    atol, rtol = tolerance
    return ([_tidy(atol * 10.0 ** -i) for i in range(atol_steps)],
            [_tidy(rtol * 10.0 ** -j) for j in range(rtol_steps)])


def _tidy(value: float) -> float:
    """`value` rounded to 6 significant digits (1e-07, not 1.0000000000000001e-07)."""
    return float(f"{value:.6g}")


def recommend_tolerance(trivial_excess: Mapping[str, Sequence[Sequence[float]]],
                        reference_excess: Sequence[Sequence[float]] | None, *,
                        tolerance: tuple[float, float] = (1e-2, 1e-2), atol_steps: int = ATOL_STEPS,
                        rtol_steps: int = RTOL_STEPS, margin: float = HONEST_MARGIN,
                        ) -> tuple[ToleranceOverride | None, str]:
    """The largest tolerance on the grid that every trivial output fails and honest float32 passes.

    Args:
        trivial_excess: predictor name → one list per audited seed of `max_excess(prediction,
            expected, rtols)` over the grid's rtols.
        reference_excess: one list per audited seed of `max_excess(expected, truth, [r/margin for
            r in rtols])` (the float32 reference against its float64 truth); None when no
            float64 evaluation exists.
        tolerance: the default ``(atol, rtol)`` the grid scales down from.
        margin: the factor by which the reference must be inside the tolerance.

    Returns:
        ``(override, note)``. The grid point ``(atol_i, rtol_j)`` is feasible when every trivial
        value exceeds ``atol_i`` (the predictor fails on every seed) and every reference value is
        at most ``atol_i / margin``. Among feasible points the one with the fewest factor-10
        steps ``i + j`` wins, then the larger rtol (a relative tolerance is scale-free, which
        is what honest float32 error is). None when no point is feasible; the note says why.
    """
    atols, rtols = tolerance_grid(tolerance, atol_steps, rtol_steps)
    if not trivial_excess:
        return None, "no trivial output passes the default tolerance; a tolerance change is not needed"
    if reference_excess is None:
        return None, ("the model cannot be evaluated in float64, so no tolerance can be checked against "
                      "honest float32 error")
    grid = [(i, j) for i in range(len(atols)) for j in range(len(rtols))]
    order = sorted(grid, key=lambda ij: (ij[0] + ij[1], ij[1]))
    trivial_fail_somewhere = False
    for i, j in order:
        if not all(v[j] > atols[i] for seeds in trivial_excess.values() for v in seeds):
            continue
        trivial_fail_somewhere = True
        if all(w[j] <= atols[i] / margin for w in reference_excess):
            return ToleranceOverride(atol=atols[i], rtol=rtols[j]), (
                f"every trivial output fails at atol={atols[i]:g}, rtol={rtols[j]:g} while the float32 "
                f"reference stays {margin:g}x inside it against float64")
    smallest = f"atol={atols[-1]:g}, rtol={rtols[-1]:g}"
    if not trivial_fail_somewhere:
        still = sorted(name for name, seeds in trivial_excess.items()
                       if any(v[-1] <= atols[-1] for v in seeds))
        return None, f"{', '.join(still)} still pass(es) at {smallest}: no tolerance separates them"
    return None, (f"every tolerance down to {smallest} that fails the trivial outputs also fails the float32 "
                  f"reference against float64 with a {margin:g}x margin")


