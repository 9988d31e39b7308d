"""Compare a candidate's outputs with the expected outputs (in the trusted parent).

Rules (GPU MODE's ``verbose_allclose`` and KernelBench's ``allclose``, made explicit): the output
structure (tensor, tuple, list) and every tensor's shape and dtype must match exactly; NaN and
±Inf must sit at the same positions; every finite element must satisfy
``|out − expected| ≤ atol + rtol·|expected|``; integer and boolean tensors must match exactly.
Arithmetic is done in float64 so the comparison itself adds no rounding error.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from tritongym.evaluator.options import Tolerance

#: Inside `shared_float64`: each tensor's flat float64 copy and whether it is all finite, by id
#: (the tensor itself is kept, so an id is never reused while the block lasts).
_FLOAT64: contextvars.ContextVar[dict[int, tuple[torch.Tensor, torch.Tensor, bool]] | None] = \
    contextvars.ContextVar("tritongym_float64", default=None)


@contextlib.contextmanager
def shared_float64() -> Iterator[None]:
    """Within the block, `float64_flat` converts each tensor once.

    The parent checks one trial's outputs several times over (the comparison, the trivial outputs
    twice, the precision against float64): at KernelBench sizes (16M elements) the repeated
    float64 copies and finiteness scans were most of the parent's time per trial. Nothing mutates
    the tensors in between (they are the parent's own copies).
    """
    token = _FLOAT64.set({})
    try:
        yield
    finally:
        _FLOAT64.reset(token)


def float64_flat(tensor: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """`tensor` flattened in float64, and whether every element is finite (shared in `shared_float64`)."""
    cache = _FLOAT64.get()
    hit = cache.get(id(tensor)) if cache is not None else None
    if hit is not None and hit[0] is tensor:
        return hit[1], hit[2]
    flat = tensor.detach().reshape(-1).to(torch.float64)
    # A NaN or ±Inf makes the sum non-finite; a finite sum proves every element finite. (A sum that
    # overflows reads "not finite": the callers then take their masked, exact path.) 6x faster
    # than isfinite(flat).all() on 16M elements.
    finite = bool(torch.isfinite(flat.sum()))
    if cache is not None:
        cache[id(tensor)] = (tensor, flat, finite)
    return flat, finite


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing one trial's outputs (see `TrialReport` for the error definitions)."""

    passed: bool
    max_abs_error: float | None
    max_rel_error: float | None
    mismatch_fraction: float | None
    message: str | None


def _flatten(value: Any, path: str = "output") -> list[tuple[str, Any]]:
    if isinstance(value, (tuple, list)):
        return [leaf for i, item in enumerate(value) for leaf in _flatten(item, f"{path}[{i}]")]
    return [(path, value)]


def _structure(value: Any) -> Any:
    # A list where the reference returns a tuple (or the reverse) holds the same outputs.
    if isinstance(value, (tuple, list)):
        return ("sequence", tuple(_structure(v) for v in value))
    return "tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def _index_text(flat_index: int, shape: torch.Size) -> str:
    if len(shape) == 0:
        return "()"
    coords = []
    for size in reversed(shape):
        coords.append(flat_index % size)
        flat_index //= size
    return str(tuple(reversed(coords)))


def identical_outputs(first: Any, second: Any) -> bool:
    """Whether two output structures hold the same bytes: same nesting (tuple vs list included),
    plain tensors of one dtype, shape and device with equal bits (NaN payloads and the sign of
    zero included), or both None. Anything else (a subclass, a Python number) answers False.

    Every check of a trial's outputs (`_Evaluation.review_outputs`) reads only these, so two
    structures that are identical here get the same review: the parent reviews a clean-room
    replay that reproduced the candidate's outputs bit for bit by the review it already made.
    """
    if first is None or second is None:
        return first is None and second is None
    if type(first) in (tuple, list):
        return (type(second) is type(first) and len(first) == len(second)
                and all(identical_outputs(a, b) for a, b in zip(first, second, strict=True)))
    if type(first) is not torch.Tensor or type(second) is not torch.Tensor:
        return False
    if first.dtype != second.dtype or first.shape != second.shape or first.device != second.device:
        return False
    return torch.equal(first.detach().reshape(-1).view(torch.uint8), second.detach().reshape(-1).view(torch.uint8))


def compare_outputs(
    expected: Any, actual: Any, tolerance_for: Callable[[torch.dtype], Tolerance]
) -> Comparison:
    """Compare `actual` with `expected`; `tolerance_for(dtype)` gives each tensor's tolerance."""
    if _structure(expected) != _structure(actual):
        return Comparison(False, None, None, None,
                          f"output structure differs: expected {_structure(expected)}, got {_structure(actual)}")
    max_abs = 0.0
    max_rel = 0.0
    mismatched = 0
    total = 0
    first_problem: str | None = None
    for (path, exp), (_, act) in zip(_flatten(expected), _flatten(actual), strict=True):
        if not isinstance(exp, torch.Tensor):
            if exp != act and not (isinstance(exp, float) and isinstance(act, float) and exp != exp and act != act):
                return Comparison(False, None, None, None, f"{path}: expected {exp!r}, got {act!r}")
            continue
        if exp.shape != act.shape:
            return Comparison(False, None, None, None,
                              f"{path}: shape mismatch: expected {tuple(exp.shape)}, got {tuple(act.shape)}")
        if exp.dtype != act.dtype:
            return Comparison(False, None, None, None,
                              f"{path}: dtype mismatch: expected {exp.dtype}, got {act.dtype}")
        total += exp.numel()
        if exp.numel() == 0:
            continue
        if exp.dtype.is_floating_point or exp.dtype.is_complex:
            tol = tolerance_for(exp.dtype)
            if exp.dtype.is_complex:
                e, a = exp.detach().to(torch.complex128).reshape(-1), act.detach().to(torch.complex128).reshape(-1)
                all_finite = False
            else:
                (e, e_finite), (a, a_finite) = float64_flat(exp), float64_flat(act)
                all_finite = e_finite and a_finite
            diff = (a - e).abs()
            if all_finite:  # the common case: no NaN or Inf masks to build (the same verdict)
                finite = torch.ones_like(diff, dtype=torch.bool)
                bad = diff > tol.atol + tol.rtol * e.abs()
            else:
                special = e.isnan() | a.isnan() | e.isinf() | a.isinf()
                same_special = (e.isnan() & a.isnan()) | (e.isinf() & a.isinf() & (e == a))
                finite = ~special
                bad = (special & ~same_special) | (finite & (diff > tol.atol + tol.rtol * e.abs()))
            if all_finite or finite.any():
                max_abs = max(max_abs, float(diff.max() if all_finite else diff[finite].max()))
                nonzero = (e != 0) if all_finite else finite & (e != 0)
                if nonzero.any():
                    # Elsewhere the quotient is 0 (never above a real one): no masked copies.
                    max_rel = max(max_rel, float((diff / e.abs()).masked_fill_(~nonzero, 0.0).max()))
        else:
            e = exp.reshape(-1)
            a = act.reshape(-1)
            bad = e != a
            if bad.any():
                max_abs = max(max_abs, float((e.to(torch.float64) - a.to(torch.float64)).abs().max()))
            tol = None
        count = int(bad.sum())
        mismatched += count
        if count and first_problem is None:
            where = int(bad.nonzero()[0])
            index = _index_text(where, exp.shape)
            rule = f"atol={tol.atol:g}, rtol={tol.rtol:g}" if tol else "exact match"
            first_problem = (
                f"{path}: {count} of {exp.numel()} elements ({count / exp.numel():.1%}) differ beyond "
                f"{rule}; first at {index}: expected {exp.reshape(-1)[where].item():.6g}, "
                f"got {act.reshape(-1)[where].item():.6g}"
            )
            if tol is not None and not all_finite:
                # NaN or Inf where the reference is finite: a value the kernel computed, or an
                # element no kernel wrote (checked trials fill fresh allocations with NaN bytes).
                unfinished = int((bad & ~finite & e.isfinite()).sum())
                if unfinished:
                    first_problem += (f"; {unfinished} of them NaN or Inf where the reference is finite (an element "
                                      "no kernel wrote reads NaN: fresh torch.empty memory is NaN-filled here)")
            if tol is not None and count > 1:
                # A few worst positions (by absolute error; non-finite mismatches first): where the
                # kernel goes wrong, without values.
                score = torch.where(bad & finite, diff.real if diff.is_complex() else diff,
                                    torch.zeros_like(diff.real if diff.is_complex() else diff))
                score = torch.where(bad & ~finite, torch.full_like(score, float("inf")), score)
                worst = torch.argsort(-score, stable=True)[:min(3, count)].tolist()  # ties: lower index first
                first_problem += "; worst at " + ", ".join(_index_text(int(i), exp.shape) for i in worst)
    fraction = mismatched / total if total else 0.0
    return Comparison(
        passed=mismatched == 0,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        mismatch_fraction=fraction,
        message=first_problem,
    )
