"""The audit's vocabulary: flags, statuses, sizes, statistics and the per-problem result."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

GiB = 1 << 30
#: robust-kbench's and METR's threshold for "near zero" and "near constant" (absolute).
SIGNAL_THRESHOLD = 0.01
#: An honest kernel must keep this factor of headroom: the float32 reference must pass its own
#: float64 truth at tolerance/`HONEST_MARGIN`, and a reference differing from itself by more
#: than tolerance/`HONEST_MARGIN` on the same seed is flagged nondeterministic.
HONEST_MARGIN = 10.0
#: How far the tolerance search goes below the default: atol·10⁻ⁱ, i < ATOL_STEPS; rtol·10⁻ʲ, j < RTOL_STEPS.
ATOL_STEPS = 7
RTOL_STEPS = 5
#: Elements converted to float64 at a time (keeps temporaries at tens of MiB for GB outputs).
_CHUNK = 1 << 22


class AuditFlag(str, Enum):
    """A defect of a problem; the value is the wire string used in JSON and reports."""

    # Every output element of every seed lies in (−0.01, 0.01) (robust-kbench, METR).
    NEAR_ZERO_OUTPUT = "near_zero_output"
    # The per-element std across input seeds is < 0.01 for every element (robust-kbench).
    NEAR_CONSTANT_OUTPUT = "near_constant_output"
    # All input seeds give the same output within the tolerance (robust-kbench "input impact").
    INPUT_INSENSITIVE = "input_insensitive"
    # The model has parameters, yet all weight seeds give the same output within the tolerance
    # (robust-kbench "init impact").
    WEIGHT_INSENSITIVE = "weight_insensitive"
    # An all-zero output passes the per-element tolerance on at least one seed.
    ZEROS_PASS = "zeros_pass"
    # A constant (the output's own scalar mean, broadcast) passes on at least one seed.
    CONSTANT_PASS = "constant_pass"
    # The per-element mean of the other seeds' outputs (a fixed tensor that ignores the inputs)
    # passes on at least one seed.
    MEAN_OUTPUT_PASS = "mean_output_pass"
    # Returning one of the inputs passes on at least one seed.
    PASSTHROUGH_PASS = "passthrough_pass"
    # The passthrough passes on ``get_inputs()`` but fails on the ``negated`` family: the task
    # is the identity only on its own input distribution (ReLU on ``torch.rand``).
    IDENTITY_ON_TASK_INPUTS = "identity_on_task_inputs"
    # The same seed twice gives outputs further apart than tolerance/HONEST_MARGIN.
    NONDETERMINISTIC_REFERENCE = "nondeterministic_reference"
    # The reference produces NaN or ±Inf on the task's own inputs.
    NON_FINITE_OUTPUT = "non_finite_output"


#: Flags that a per-element tolerance can address (a trivial output passes it).
TRIVIAL_PASS_FLAGS = (AuditFlag.ZEROS_PASS, AuditFlag.CONSTANT_PASS, AuditFlag.MEAN_OUTPUT_PASS,
                      AuditFlag.PASSTHROUGH_PASS)


class AuditStatus(str, Enum):
    """What happened to one problem."""

    AUDITED = "audited"  # every check ran; `flags` is the finding
    SKIPPED = "skipped"  # over the memory or time budget, not (fully) run; `reason` says which
    FAILED = "failed"  # the problem's own code raised; `reason` carries the error


@dataclass(frozen=True)
class SizeEstimate:
    """Sizes measured on the ``meta`` device (nothing allocated); None where unknown.

    Attributes:
        input_bytes: bytes of the tensors ``get_inputs()`` returns.
        param_bytes: bytes of the model's parameters and buffers.
        output_bytes: bytes of the forward's outputs (an input returned as it is not counted again).
        forward_peak_bytes: most bytes held at once by tensors created during the forward
            (intermediates and outputs; views and in-place results not counted twice).
        flops: floating-point operations of one forward (torch's `FlopCounterMode`: matmuls,
            convolutions, attention; elementwise work counts 0).
        float_params: number of floating-point parameter elements.
        error: why the problem could not be built on the meta device.
        forward_error: why the forward could not run on the meta device (``.item()``, too slow).
        measured_on: ``meta``, or ``cpu`` when the problem was run for real because the meta device
            cannot follow its forward (`tritongym.tasks.sizing`); None when not recorded.
        workspace_bytes: the largest buffer a convolution allocates inside the op (im2col
            columns, whole batch, at the op's dtype), which no tensor shows; not in `total_bytes`
            (the pre-flight adds it: `tritongym.tasks.preflight`). None when not recorded.
    """

    input_bytes: int | None = None
    param_bytes: int | None = None
    output_bytes: int | None = None
    forward_peak_bytes: int | None = None
    flops: int | None = None
    float_params: int | None = None
    error: str | None = None
    forward_error: str | None = None
    measured_on: str | None = None
    workspace_bytes: int | None = None

    @property
    def total_bytes(self) -> int | None:
        """inputs + parameters + max(outputs, forward peak): what the budget is compared with."""
        if self.input_bytes is None:
            return None
        produced = max(self.output_bytes or 0, self.forward_peak_bytes or 0)
        return self.input_bytes + (self.param_bytes or 0) + produced


@dataclass(frozen=True)
class ToleranceOverride:
    """The recommended per-element tolerance for a flagged problem (use the stricter of this and yours)."""

    atol: float
    rtol: float


@dataclass(frozen=True)
class AuditStats:
    """What the audit measured on one problem (task-input family unless stated).

    Attributes:
        input_seeds: input seeds run under the first weight seed.
        weight_seeds: weight seeds run (on the first input seed).
        output_shapes: shapes of the output tensors.
        first_trial_s: seconds of the first trial (``get_inputs()``, forward and transfer).
        max_abs_output: max |output| over every input and weight seed.
        mean_abs_output: mean |output| over the input seeds.
        max_std_across_inputs: max over elements of the std across input seeds (None with one seed).
        mean_std_across_inputs: mean over elements of that std.
        fraction_std_below: fraction of elements whose std across input seeds is < 0.01.
        input_seed_max_diff: max |out(seed i) − out(seed 0)|.
        weight_seed_max_diff: max |out(weight j) − out(weight 0)| on the same inputs (None when
            the model has no parameters or one weight seed was run).
        repeat_max_diff: max |difference| between two runs of the same seed.
        trivial_passes: trivial predictor → number of input seeds on which it passed.
        negated_passthrough: whether the passthrough that passed on the task inputs also passes
            on the ``negated`` family (None when not tried or not finite there).
        reference_rel_error: max over seeds of ‖float32 reference − float64 truth‖₂ / ‖truth‖₂
            (None when not computed: only flagged problems need it).
    """

    input_seeds: int
    weight_seeds: int
    output_shapes: tuple[tuple[int, ...], ...]
    first_trial_s: float
    max_abs_output: float
    mean_abs_output: float
    max_std_across_inputs: float | None
    mean_std_across_inputs: float | None
    fraction_std_below: float | None
    input_seed_max_diff: float | None
    weight_seed_max_diff: float | None
    repeat_max_diff: float
    trivial_passes: Mapping[str, int] = field(default_factory=dict)
    negated_passthrough: bool | None = None
    reference_rel_error: float | None = None


@dataclass(frozen=True)
class ProblemAudit:
    """The audit of one problem.

    Attributes:
        problem_id: `Problem.problem_id`.
        name: `Problem.name`.
        level: KernelBench level, None outside KernelBench.
        content_hash: `Problem.content_hash` (the key of the flags file).
        status: audited, skipped or failed.
        reason: why it was skipped or failed (None when audited).
        flags: the defects found (empty for a healthy problem).
        stats: the measurements (None when nothing ran).
        estimate: sizes from the meta device.
        override: the recommended tolerance (None: not needed, or none exists; see `override_note`).
        override_note: why there is or is not an override (None for unflagged problems).
        seconds: wall-clock time spent on the problem.
    """

    problem_id: str
    name: str
    level: int | None
    content_hash: str
    status: AuditStatus
    reason: str | None = None
    flags: tuple[AuditFlag, ...] = ()
    stats: AuditStats | None = None
    estimate: SizeEstimate | None = None
    override: ToleranceOverride | None = None
    override_note: str | None = None
    seconds: float = 0.0

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as their strings)."""
        data = asdict(self)
        data["status"] = self.status.value
        data["flags"] = [flag.value for flag in self.flags]
        if self.estimate is not None:
            data["estimate"]["total_bytes"] = self.estimate.total_bytes
        return data

    def to_json(self) -> str:
        """One line of strict JSON (non-finite numbers become null)."""
        return json.dumps(_finite_json(self.to_dict()), allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProblemAudit:
        """The inverse of `to_dict` (reads saved ``--json`` lines, e.g. to merge runs or redo a report)."""
        data = dict(data)
        stats = data.get("stats")
        if stats is not None:
            stats = AuditStats(**{**stats, "output_shapes": tuple(tuple(s) for s in stats["output_shapes"])})
        estimate = data.get("estimate")
        if estimate is not None:
            estimate = SizeEstimate(**{k: v for k, v in estimate.items() if k != "total_bytes"})
        override = data.get("override")
        return cls(**{**data, "status": AuditStatus(data["status"]),
                      "flags": tuple(AuditFlag(f) for f in data.get("flags", ())), "stats": stats,
                      "estimate": estimate, "override": ToleranceOverride(**override) if override else None})


def _finite_json(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


