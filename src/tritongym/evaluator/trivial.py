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

Outputs the reference itself rounds to a narrower float (a model ending in ``.to(torch.bfloat16)``)
are judged apart, with the floor raised to that format's epsilon (`check_precision`).

**On the perturbed input families both findings are a wrong answer, not a cheat** (`review_family_trial`).
A kernel that is exact on the task's own inputs and collapses on, say, negated ones computes a
different function there (a ReLU submitted for LeakyReLU(0.01) outputs zeros for negative inputs,
within atol = 1e-2 of 0.01·x). Labelling that ``trivial_output`` + ``precision_downgrade`` told a
model it had cheated, with advice about constructs it did not use. So on a family trial the
findings fail the trial (status ``incorrect``) with where and by how much it is off against the
float64 evaluation; on the task's own inputs they stay integrity findings, which is where the
degenerate-task exploits live (zeros for tiny outputs, a constant for a loss, subsampling).
Hints name only constructs the solution uses (`precision_hint`).
"""

from __future__ import annotations

import ast
import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from tritongym import pyparse
from tritongym.evaluator.common.families import FAMILY_TASK
from tritongym.evaluator.compare import Comparison, float64_flat
from tritongym.evaluator.result import Violation, ViolationCode

if TYPE_CHECKING:
    from tritongym.evaluator.options import EvalOptions
    from tritongym.evaluator.reference import ReferenceTrial

#: Marks a trial that failed although every element was within the tolerance (feedback shows it).
HIDDEN_BY_TOLERANCE = "within the per-element tolerance only because"
#: What each perturbed family changed, and where to look, for a trial that failed on it.
FAMILY_INPUTS = {
    "negated": ("the negated inputs", "check the branch it takes for negative values"),
    "scaled": ("inputs 2-8x larger than get_inputs() gives", "check constants and clamps tied to a scale"),
    "offset": ("inputs shifted by 1-3 standard deviations", "check code that assumes zero-mean inputs"),
}


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
        (e64, e_finite), (y64, y_finite) = float64_flat(e), float64_flat(y)
        if e_finite and y_finite:  # the common case: dot products, no masked copies (4x faster)
            diff = y64 - e64
            num += float(torch.dot(diff, diff))
            den += float(torch.dot(e64, e64))
            continue
        finite = torch.isfinite(e64) & torch.isfinite(y64)
        num += float(((y64 - e64)[finite] ** 2).sum())
        den += float((e64[finite] ** 2).sum())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return (num / den) ** 0.5


def _constant_mean(expected: torch.Tensor) -> torch.Tensor:
    """`expected`'s shape filled with the mean of its finite elements (zeros when none is finite)."""
    e64, finite = float64_flat(expected)
    if finite:
        return torch.full_like(expected, float(e64.mean()))
    kept = e64[torch.isfinite(e64)]
    return torch.full_like(expected, float(kept.mean())) if kept.numel() else torch.zeros_like(expected)


def _zeros_error(expected: list[torch.Tensor]) -> float:
    """`relative_l2` of all-zero outputs: 1 when any finite element is non-zero, else 0."""
    for e in expected:
        e64, finite = float64_flat(e)
        if bool((e64 != 0).any() if finite else (e64[torch.isfinite(e64)] != 0).any()):
            return 1.0
    return 0.0


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
        predictors["constant (the output's mean)"] = [_constant_mean(e) for e in expected]
    input_tensors = [t for t in float_leaves(inputs)]
    for index, tensor in enumerate(input_tensors):
        if len(expected) == 1 and tensor.shape == expected[0].shape:
            predictors[f"input {index} passed through"] = [tensor]
    return predictors


def trivial_match(expected: Any, actual: Any, inputs: list[Any], previous_mean: list[torch.Tensor] | None,
                  margin: float) -> tuple[str, float, float] | None:
    """(predictor, candidate error, predictor error) for the first trivial output the candidate does
    not clearly beat, else None."""
    expected_leaves = float_leaves(expected)
    actual_leaves = float_leaves(actual)
    if not expected_leaves or not same_shapes(expected_leaves, actual_leaves):
        return None  # a structure or shape mismatch is the comparison's verdict
    candidate_error = relative_l2(actual_leaves, expected_leaves)
    for name, prediction in trivial_predictions(expected_leaves, inputs, previous_mean).items():
        # All zeros is 1 exactly (or 0 for an all-zero output): no need to subtract a zero tensor.
        trivial_error = _zeros_error(expected_leaves) if name == "zeros" else relative_l2(prediction, expected_leaves)
        if trivial_error == 0.0:
            continue  # the predictor is exact: the outputs carry no information to test against
        if candidate_error > margin * trivial_error:
            return name, candidate_error, trivial_error
    return None


def check_beats_trivial(expected: Any, actual: Any, inputs: list[Any],
                        previous_mean: list[torch.Tensor] | None, margin: float) -> Violation | None:
    """`ViolationCode.TRIVIAL_OUTPUT` when the candidate is not clearly better than a trivial output."""
    match = trivial_match(expected, actual, inputs, previous_mean, margin)
    if match is None:
        return None
    name, candidate_error, trivial_error = match
    return Violation(
        ViolationCode.TRIVIAL_OUTPUT,
        f"the output is not clearly closer to the reference than a trivial output ({name}): relative "
        f"L2 error {candidate_error:.3g} vs {trivial_error:.3g} for the trivial output (must be at most "
        f"{margin:g}x); compute the actual result",
    )


def _calls_dot_without_ieee(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name != "dot":
                continue
            keywords = {k.arg: k.value for k in node.keywords}
            ieee = isinstance(keywords.get("input_precision"), ast.Constant) and \
                keywords["input_precision"].value == "ieee"
            no_tf32 = isinstance(keywords.get("allow_tf32"), ast.Constant) and keywords["allow_tf32"].value is False
            if not (ieee or no_tf32):
                return True
    return False


#: Spellings of a half-precision type or cast in a solution.
HALF_NAMES = frozenset({"float16", "bfloat16", "half", "fp16", "bf16"})


def _uses_half(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in HALF_NAMES:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in HALF_NAMES:
            return True
    return False


def precision_hint(source: str | None, rounded_to: torch.dtype | None = None) -> str:
    """What to change for a precision finding, naming only constructs `source` uses.

    Without a source (or when it uses neither construct) the hint names none. `rounded_to`: the
    reference's own output dtype when it is narrower than float32 (then float32 is not the
    task's precision, and the hint says where the one rounding belongs).
    """
    advice = []
    try:
        tree = pyparse.parse(source) if source else None
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None and _calls_dot_without_ieee(tree):
        advice.append("your tl.dot calls use the default input precision (TF32 on a GPU for float32 inputs): "
                      "pass input_precision='ieee'")
    if rounded_to is not None:
        name = str(rounded_to).removeprefix("torch.")
        advice.append(f"the reference computes in float32 and rounds its output to {name} once: keep loads, "
                      f"arithmetic and accumulators in float32 and convert to {name} only at the final store")
    elif tree is not None and _uses_half(tree):
        advice.append("your code uses float16/bfloat16: keep the task's float32 for loads, arithmetic and "
                      "accumulators")
    if not advice:
        advice.append("compute and accumulate in the task's precision")
    return "; ".join(advice)


def _narrow(dtype: torch.dtype) -> bool:
    """A floating dtype coarser than float32 (float16, bfloat16, the float8s)."""
    return dtype.is_floating_point and torch.finfo(dtype).eps > torch.finfo(torch.float32).eps


def check_precision(expected: Any, actual: Any, truth: Any, factor: float, floor: float,
                    source: str | None = None) -> Violation | None:
    """`ViolationCode.PRECISION_DOWNGRADE` when the candidate is far less accurate than float32.

    `source` (the solution's text) lets the hint name the constructs the code uses; without it the
    hint names none. The floor follows the reference's own output dtype: outputs the reference
    itself rounds to a narrower format (a model ending in ``.to(torch.bfloat16)``) are judged
    apart from the others, with the floor raised to that format's epsilon (one unit in the last
    place at 1.0). Their reference error can be exactly 0 (its float64 evaluation rounds to the same
    bf16 values), and an honest kernel that rounds twice where the reference rounds once (Hugging
    Face's RMSNorm order: cast, then scale) is within one such unit, not a downgrade; computing
    in a still narrower format (float8 inside a bf16 task, bf16 inside a float32 one) stays refused.
    """
    truth_leaves = float_leaves(truth)
    expected_leaves = float_leaves(expected)
    actual_leaves = float_leaves(actual)
    if not truth_leaves or not same_shapes(truth_leaves, expected_leaves, actual_leaves):
        return None  # a structure or shape mismatch is the comparison's verdict
    narrow = [i for i, leaf in enumerate(expected_leaves) if _narrow(leaf.dtype)]
    wide = [i for i in range(len(expected_leaves)) if i not in narrow]
    for indices in (wide, narrow):
        if not indices:
            continue
        coarsest = max((expected_leaves[i].dtype for i in indices), key=lambda d: torch.finfo(d).eps)
        group_floor = max(floor, torch.finfo(coarsest).eps) if indices is narrow else floor
        group_truth = [truth_leaves[i] for i in indices]
        reference_error = relative_l2([expected_leaves[i] for i in indices], group_truth)
        candidate_error = relative_l2([actual_leaves[i] for i in indices], group_truth)
        if candidate_error > factor * reference_error + group_floor:
            if indices is narrow:
                name = str(coarsest).removeprefix("torch.")
                return Violation(
                    ViolationCode.PRECISION_DOWNGRADE,
                    f"the output is much less accurate than the reference's own {name} rounding allows "
                    f"(relative error to a float64 evaluation {candidate_error:.3g} vs {reference_error:.3g} "
                    f"for the reference, {group_floor:.3g} allowed for rounding to {name}); "
                    f"{precision_hint(source, coarsest)}",
                )
            return Violation(
                ViolationCode.PRECISION_DOWNGRADE,
                f"the output is much less accurate than the float32 reference (relative error to a float64 "
                f"evaluation {candidate_error:.3g} vs {reference_error:.3g} for the reference); "
                f"{precision_hint(source)}",
            )
    return None


def _worst_positions(actual: list[torch.Tensor], truth: list[torch.Tensor], count: int = 3) -> str:
    """The output and positions with the largest absolute errors against the truth."""
    best: tuple[float, int] | None = None
    for index, (y, t) in enumerate(zip(actual, truth, strict=True)):
        diff = (y.detach().to(torch.float64) - t.detach().to(torch.float64)).abs().nan_to_num(nan=float("inf"))
        top = float(diff.max()) if diff.numel() else 0.0
        if best is None or top > best[0]:
            best = (top, index)
    if best is None:
        return ""
    y, t = actual[best[1]], truth[best[1]]
    diff = (y.detach().to(torch.float64) - t.detach().to(torch.float64)).abs().nan_to_num(nan=float("inf"))
    flat = torch.argsort(-diff.reshape(-1), stable=True)[:count].tolist()
    positions = []
    for where in flat:
        coords = []
        for size in reversed(diff.shape):
            coords.append(where % size)
            where //= size
        positions.append(str(tuple(reversed(coords))))
    name = "output" if len(actual) == 1 else f"output {best[1]}"
    return f"; largest errors in {name} at {', '.join(positions)} (max abs error {best[0]:.3g})"


def review_family_trial(comparison: Comparison, trial: ReferenceTrial, actual: Any,
                        options: EvalOptions) -> Comparison:
    """`comparison`, failed when a perturbed-family output passed the tolerance but is a wrong answer.

    On a trial of a perturbed family (never the task's own inputs), an output within the
    per-element tolerance that is no better than a trivial output, or far less accurate than
    float32 against the float64 evaluation (with ``precision_policy="reject"``), is a failed trial:
    the kernel computes a different function on those inputs. Checks listed in
    ``options.disabled_checks`` decide nothing here either. The parent calls this right after
    comparing, so a failed trial skips the integrity findings (the status is ``incorrect``).
    """
    if not comparison.passed or trial.family == FAMILY_TASK:
        return comparison
    expected_leaves, actual_leaves = float_leaves(trial.expected), float_leaves(actual)
    if not expected_leaves or not same_shapes(expected_leaves, actual_leaves):
        return comparison
    reasons = []
    if ViolationCode.TRIVIAL_OUTPUT not in options.disabled_checks:
        match = trivial_match(trial.expected, actual, trial.inputs, None, options.trivial_margin)
        if match is not None:
            reasons.append(f"no better than a trivial output ({match[0]}, relative L2 error {match[2]:.3g})")
    truth_leaves = float_leaves(trial.truth) if trial.truth is not None else []
    with_truth = bool(truth_leaves) and same_shapes(truth_leaves, actual_leaves)
    reference = truth_leaves if with_truth else expected_leaves
    if options.precision_policy == "reject" and ViolationCode.PRECISION_DOWNGRADE not in options.disabled_checks \
            and with_truth and check_precision(trial.expected, actual, trial.truth, options.precision_factor,
                                               options.precision_floor) is not None:
        reasons.append(f"more than {options.precision_factor:g}x the float32 reference's error")
    if not reasons:
        return comparison
    inputs_text, advice = FAMILY_INPUTS.get(trial.family, (f"the {trial.family} inputs", "check its branches"))
    error = relative_l2(actual_leaves, reference)
    against = "a float64 evaluation" if with_truth else "the float32 reference"
    reference_error = f" (the float32 reference: {relative_l2(expected_leaves, reference):.3g})" if with_truth else ""
    message = (
        f"output: {HIDDEN_BY_TOLERANCE} the outputs are small there: on {inputs_text}, relative L2 error "
        f"{error:.3g} against {against}{reference_error}, {' and '.join(reasons)}"
        f"{_worst_positions(actual_leaves, reference)}. The kernel computes a different function on these "
        f"inputs: {advice}"
    )
    return dataclasses.replace(comparison, passed=False, message=message)
