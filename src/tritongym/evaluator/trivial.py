"""Scale-aware checks that compare a candidate's error with reference-free predictors.

Both are run in the parent on outputs that already passed the per-element tolerance.

**Beat the trivial outputs** (reward-hacking.md B1–B4). A loose absolute tolerance lets zeros pass
when outputs are tiny, a constant pass when they barely vary (the expected value of a loss on
uniform inputs), the input pass when the task is the identity on its input distribution, and
subsampled reductions pass when the result concentrates. So the candidate's relative L2 error must
be at most ``margin`` times that of every trivial predictor:

    rel(y, E) = ‖y − E‖₂ / ‖E‖₂         (over all floating output elements of one trial)
    violation if rel(candidate) > margin · min_T rel(T)

with T ranging over: all zeros; the mean of the previous trials' expected outputs (the "expected
value" a model could learn); the trial's own per-output mean broadcast (for outputs of more than
one element); and each input with the output's shape and dtype (passthrough). An honest float32
kernel is ~10⁻⁶ off; a trivial predictor on a non-degenerate task is O(1) off, so the rule binds
only where the task is degenerate, and there it demands real accuracy.

**No precision downgrade** (B6). Computing an fp32 task in fp16/bf16/TF32 can pass a 1e-2
tolerance. The reference worker also evaluates the model in float64 (the truth); the candidate's
error must stay within ``factor`` times the float32 reference's own error plus a floor:

    violation if rel(candidate, truth) > factor · rel(expected, truth) + floor
"""

from __future__ import annotations

from typing import Any

import torch

from tritongym.evaluator.result import Violation, ViolationCode


def float_leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.dtype.is_floating_point and value.numel() > 0 else []
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in float_leaves(v)]
    return []


def tensors(value: Any) -> list[torch.Tensor]:
    """Every tensor of a nested list/tuple structure."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    return []


def relative_l2(predicted: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    """‖predicted − expected‖₂ / ‖expected‖₂ over all leaves, in float64 (inf when ‖E‖ = 0 ≠ ‖y − E‖)."""
    num = 0.0
    den = 0.0
    for y, e in zip(predicted, expected, strict=True):
        if y.shape != e.shape:  # never broadcast one against the other
            raise ValueError(f"relative_l2 needs equal shapes, got {tuple(y.shape)} and {tuple(e.shape)}")
        e64 = e.detach().to(torch.float64)
        y64 = y.detach().to(torch.float64)
        finite = torch.isfinite(e64) & torch.isfinite(y64)
        num += float(((y64 - e64)[finite] ** 2).sum())
        den += float((e64[finite] ** 2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return (num / den) ** 0.5


class TrivialBaselines:
    """Keeps the running mean of expected outputs across trials (per input family)."""

    def __init__(self) -> None:
        self.sums: dict[str, list[torch.Tensor]] = {}
        self.counts: dict[str, int] = {}

    def previous_mean(self, family: str, shapes: list[torch.Size]) -> list[torch.Tensor] | None:
        sums = self.sums.get(family)
        if not sums or [s.shape for s in sums] != shapes:
            return None
        return [s / self.counts[family] for s in sums]

    def add(self, family: str, expected: list[torch.Tensor]) -> None:
        leaves = [e.detach().to(torch.float64) for e in expected]
        if family not in self.sums or [s.shape for s in self.sums[family]] != [e.shape for e in leaves]:
            self.sums[family], self.counts[family] = leaves, 1
            return
        self.sums[family] = [s + e for s, e in zip(self.sums[family], leaves, strict=True)]
        self.counts[family] += 1


def same_shapes(*leaf_lists: list[torch.Tensor]) -> bool:
    """Whether the lists hold the same number of leaves, with equal shapes position by position."""
    first = leaf_lists[0]
    return all(len(other) == len(first) and all(a.shape == b.shape for a, b in zip(first, other, strict=True))
               for other in leaf_lists[1:])


def trivial_predictions(expected: list[torch.Tensor], inputs: list[Any],
                        previous_mean: list[torch.Tensor] | None) -> dict[str, list[torch.Tensor]]:
    """The reference-free predictors of one trial's floating outputs, by name."""
    predictors: dict[str, list[torch.Tensor]] = {"zeros": [torch.zeros_like(e) for e in expected]}
    if previous_mean is not None:
        predictors["mean of previous trials"] = previous_mean
    if all(e.numel() > 1 for e in expected):
        predictors["constant (the output's mean)"] = [
            torch.full_like(e, float(e.detach().to(torch.float64)[torch.isfinite(e)].mean()))
            if torch.isfinite(e).any() else torch.zeros_like(e)
            for e in expected
        ]
    input_tensors = [t for t in float_leaves(inputs)]
    for index, tensor in enumerate(input_tensors):
        if len(expected) == 1 and tensor.shape == expected[0].shape:
            predictors[f"input {index} passed through"] = [tensor]
    return predictors


def check_beats_trivial(expected: Any, actual: Any, inputs: list[Any],
                        previous_mean: list[torch.Tensor] | None, margin: float) -> Violation | None:
    """`ViolationCode.TRIVIAL_OUTPUT` when the candidate is not clearly better than a trivial output."""
    expected_leaves = float_leaves(expected)
    actual_leaves = float_leaves(actual)
    if not expected_leaves or not same_shapes(expected_leaves, actual_leaves):
        return None  # a structure or shape mismatch is the comparison's verdict
    candidate_error = relative_l2(actual_leaves, expected_leaves)
    for name, prediction in trivial_predictions(expected_leaves, inputs, previous_mean).items():
        trivial_error = relative_l2(prediction, expected_leaves)
        if trivial_error == 0.0:
            continue  # the predictor is exact: the outputs carry no information to test against
        if candidate_error > margin * trivial_error:
            return Violation(
                ViolationCode.TRIVIAL_OUTPUT,
                f"the output is not clearly closer to the reference than a trivial output ({name}): relative "
                f"L2 error {candidate_error:.3g} vs {trivial_error:.3g} for the trivial output (must be at most "
                f"{margin:g}x); compute the actual result",
            )
    return None


def check_precision(expected: Any, actual: Any, truth: Any, factor: float, floor: float) -> Violation | None:
    """`ViolationCode.PRECISION_DOWNGRADE` when the candidate is far less accurate than float32."""
    truth_leaves = float_leaves(truth)
    expected_leaves = float_leaves(expected)
    actual_leaves = float_leaves(actual)
    if not truth_leaves or not same_shapes(truth_leaves, expected_leaves, actual_leaves):
        return None  # a structure or shape mismatch is the comparison's verdict
    reference_error = relative_l2(expected_leaves, truth_leaves)
    candidate_error = relative_l2(actual_leaves, truth_leaves)
    if candidate_error > factor * reference_error + floor:
        return Violation(
            ViolationCode.PRECISION_DOWNGRADE,
            f"the output is much less accurate than the float32 reference (relative error to a float64 "
            f"evaluation {candidate_error:.3g} vs {reference_error:.3g} for the reference); compute in the "
            "task's precision (for float32 tl.dot pass input_precision='ieee' instead of the TF32 default, and "
            "do not cast to float16/bfloat16)",
        )
    return None
