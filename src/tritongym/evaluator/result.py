"""The verdict: `Status`, `Violation`, per-trial and timing reports, and `EvalResult`.

This is a contract used by tools outside the repository (``tritongym eval --json``, the
service, trainers): field names and status strings are stable. `EvalResult.to_dict()` is the
JSON object the CLI prints; `EvalResult.from_dict()` reads it back.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class _StrEnum(str, Enum):
    """`enum.StrEnum` for Python 3.10: members compare equal to, and print as, their value."""

    def __str__(self) -> str:
        return str(self.value)


class Status(_StrEnum):
    """How an evaluation ended. Exactly one per result; `correct` is derived from it."""

    OK = "ok"  # every trial matched, every integrity check passed
    # no runnable ModelNew: syntax error, import or constructor failure, Triton compile error
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"  # the candidate's forward raised
    INCORRECT = "incorrect"  # ran, but an output did not match the reference within tolerance
    INTEGRITY_VIOLATION = "integrity_violation"  # the work was not done honestly in the candidate's Triton kernels
    TIMEOUT = "timeout"  # the candidate exceeded the wall-clock budget; it and its descendants were killed
    CRASHED = "crashed"  # the candidate process died or broke the protocol (signal, os._exit, garbage)
    # the CPU interpreter cannot run a construct the candidate uses (inline asm, an extern library):
    # a limit of the CPU tier, not a verdict on the kernel's correctness; evaluate it on a GPU
    UNSUPPORTED = "unsupported"


class ViolationCode(_StrEnum):
    """What an integrity check found. Each code names the defect; see docs/integrity.md."""

    NO_TRITON_KERNEL = "no_triton_kernel"  # the solution defines no Triton kernel (found at run time)
    FORBIDDEN_CONSTRUCT = "forbidden_construct"  # the source uses introspection, processes, monkeypatching, ...
    HARNESS_TAMPERING = "harness_tampering"  # a harness or torch function was replaced at run time
    NO_TRITON_LAUNCH = "no_triton_launch"  # a forward launched no kernel defined in the candidate's source
    OUTPUT_NOT_FROM_KERNEL = "output_not_from_kernel"  # an output's storage was never a candidate kernel argument
    PYTORCH_FALLBACK = "pytorch_fallback"  # the forward ran every compute op the reference runs
    INPUT_MUTATION = "input_mutation"  # the forward changed an input tensor
    OUTPUT_ALIASES_INPUT = "output_aliases_input"  # an output shares storage with an input or a parameter
    OUTPUT_NOT_PLAIN_TENSOR = "output_not_plain_tensor"  # an output is a Tensor subclass or carries instance attributes
    TRIVIAL_OUTPUT = "trivial_output"  # the output is no closer to the reference than zeros, a constant or an input
    PRECISION_DOWNGRADE = "precision_downgrade"  # far less accurate than float32 against a float64 truth
    BACKGROUND_THREAD = "background_thread"  # the forward left a new thread running
    TIMED_OUTPUT_MISMATCH = "timed_output_mismatch"  # an output of a timed call did not match the reference
    IMPLAUSIBLE_TIMING = "implausible_timing"  # reported times are not positive, or disagree with the parent's clock
    IMPLAUSIBLE_SPEEDUP = "implausible_speedup"  # faster than the bytes it must move allow (physics floor)
    HOST_COMPUTE = "host_compute"  # input-derived values were read on the host beyond the scalar budget
    PYTHON_IN_KERNEL = "python_in_kernel"  # a kernel body or argument is plain Python, not Triton
    EVIDENCE_MISMATCH = "evidence_mismatch"  # the clean room's replay of the forward's log did not give its outputs
    UNREPLAYABLE = "unreplayable"  # the forward did something its log cannot describe for the clean room


class NoticeCode(_StrEnum):
    """Non-blocking findings: reported, never a reason for a zero reward on their own."""

    TIMING_UNAVAILABLE = "timing_unavailable"  # no GPU: timing is not measured (not meaningful on a CPU)
    TIMING_NOT_MEANINGFUL = "timing_not_meaningful"  # timed on a CPU for testing the protocol only
    SANDBOX_DISABLED = "sandbox_disabled"  # the candidate ran without the OS sandbox
    LIMITS_WEAKENED = "limits_weakened"  # no cgroup: process/memory caps rest on rlimits alone
    CHECK_DISABLED = "check_disabled"  # a violation was found by a check the caller turned off
    AUDIT_TOLERANCE = "audit_tolerance"  # the task audit flagged the problem; its stricter tolerance applies
    SPEEDUP_CLAMPED = "speedup_clamped"  # the measured speedup exceeded max_speedup and was clamped
    STATIC_FINDING = "static_finding"  # a pre-check noticed something worth knowing (not a violation)
    FAMILY_SKIPPED = "family_skipped"  # an input family was not used: the reference is not finite on it
    PRECISION_UNCHECKED = "precision_unchecked"  # the model could not run in float64; no precision check
    AUTOTUNE_PARTIAL = "autotune_partial"  # an autotuned kernel has more configs than the trials checked
    INTERPRETER_LIMIT = "interpreter_limit"  # the CPU interpreter cannot run a construct (status unsupported)
    # -- GPU measurement (evaluator/measurement.py, device.py) --
    GPU_SHARED = "gpu_shared"  # other processes hold a context on the GPU, or its compute mode is exclusive
    REFERENCE_IEEE_FP32 = "reference_ieee_fp32"  # the reference ran with TF32 off (IEEE float32 matmul and cuDNN)
    BASELINE_UNAVAILABLE = "baseline_unavailable"  # the torch.compile baseline was asked for but not measured
    TIMING_TAIL_CHARGED = "timing_tail_charged"  # work ran on after the end event (side streams); it was charged
    FLOP_FLOOR_BEATEN = "flop_floor_beaten"  # below the nominal matmul FLOP floor, confirmed by the parent clock
    # the clean room's replay of the logged work took longer than the candidate worker reported; it was charged
    TIMING_FROM_REPLAY = "timing_from_replay"


@dataclass(frozen=True)
class Violation:
    """One integrity finding: `code` names the defect, `message` says what was observed."""

    code: str
    message: str


@dataclass(frozen=True)
class Notice:
    """A non-blocking finding (a warning)."""

    code: str
    message: str


@dataclass(frozen=True)
class TrialReport:
    """The comparison of one correctness trial against the reference.

    Errors are computed in float64 over all output tensors of the trial:
    ``max_abs_error = max |out − expected|`` over finite elements, ``max_rel_error = max
    |out − expected| / |expected|`` over finite elements with expected ≠ 0, and
    ``mismatch_fraction`` = elements failing ``|out − expected| ≤ atol + rtol·|expected|``
    (or whose NaN/±Inf position differs) divided by the number of elements.
    """

    index: int
    family: str
    passed: bool
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    mismatch_fraction: float | None = None
    message: str | None = None


@dataclass(frozen=True)
class TimingReport:
    """Side-by-side timing of the reference and the candidate, measured in one run.

    Times are medians over repetitions, in milliseconds. ``method`` says how they were taken.
    """

    method: str
    device_name: str
    reference_median_ms: float
    candidate_median_ms: float
    reference_reps: int
    candidate_reps: int
    reference_host_median_ms: float | None = None
    candidate_host_median_ms: float | None = None
    wall_clock_estimate_ms: float | None = None
    floor_ms: float | None = None
    bandwidth_gbps: float | None = None
    meaningful: bool = True
    # -- GPU measurement additions (issue 13, issue 9 item 7) --
    baseline: str = "eager"  # what reference_median_ms times: the eager Model, or torch.compile(Model)
    compile_reference_median_ms: float | None = None  # torch.compile(Model), when baseline is compile or both
    flop_floor_ms: float | None = None  # nominal dense-matmul FLOPs at the measured half-precision GEMM rate
    charged_reps: int = 0  # candidate repetitions whose tail after the end event was charged (side streams)
    # -- the clean room's timing (issue 20): `candidate_median_ms` is max(reported, replay) --
    reported_median_ms: float | None = None  # the candidate worker's own median per forward (host overhead included)
    replay_median_ms: float | None = None  # the clean room's median replay of the logged launches and ops
    replay_reps: int = 0


@dataclass(frozen=True)
class KernelLaunches:
    """Triton kernels the candidate's forwards launched, summed over the correctness trials."""

    kernel: str
    defined_in_candidate: bool
    launches: int
    last_grid: str


@dataclass(frozen=True)
class KernelProfile:
    """One device kernel of the profiled forwards: GPU time in µs, launches, whose it is."""

    kernel: str
    device_us: float
    count: int
    candidate: bool


@dataclass
class EvalResult:
    """The verdict of one evaluation. `to_dict()` is the ``tritongym eval --json`` object."""

    status: Status
    reward: float = 0.0
    violations: list[Violation] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    error: str | None = None
    torch_compute_ops: list[str] = field(default_factory=list)
    reference_compute_ops: list[str] = field(default_factory=list)
    speedup: float | None = None
    speedup_vs_compile: float | None = None  # against torch.compile(Model); baseline compile or both, GPU only
    timing: TimingReport | None = None
    coverage: float | None = None
    trials: list[TrialReport] = field(default_factory=list)
    triton_launches: list[KernelLaunches] = field(default_factory=list)
    kernel_profile: list[KernelProfile] = field(default_factory=list)
    device: str = "cpu"
    sandbox: str = "none"
    problem_id: str | None = None
    problem_hash: str | None = None
    #: ``cpu`` when the problem is a CPU-size variant (`tritongym.tasks.sizing`), else ``original``.
    problem_size: str = "original"
    solution_hash: str | None = None
    duration_s: float = 0.0
    candidate_log: str = ""
    #: Wall-clock seconds per phase: ``queue`` (waiting for a pool slot), ``startup`` (until the
    #: candidate worker is ready to import), ``import``, ``build``, ``trials``, ``timing``, ``profile``.
    phase_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def correct(self) -> bool:
        """True only when the status is `ok`."""
        return self.status == Status.OK

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: every field, plus `correct`, with enums as their strings."""
        data = asdict(self)
        data["status"] = str(self.status)
        data["correct"] = self.correct
        return data

    def to_json(self, **kwargs: Any) -> str:
        """`to_dict()` as JSON text (NaN and Infinity are not produced: errors are finite or null)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        """Inverse of `to_dict()` (unknown keys are ignored, so newer producers stay readable)."""
        timing = data.get("timing")
        return cls(
            status=Status(data["status"]),
            reward=float(data.get("reward", 0.0)),
            violations=[Violation(**v) for v in data.get("violations", [])],
            notices=[Notice(**n) for n in data.get("notices", [])],
            error=data.get("error"),
            torch_compute_ops=list(data.get("torch_compute_ops", [])),
            reference_compute_ops=list(data.get("reference_compute_ops", [])),
            speedup=data.get("speedup"),
            speedup_vs_compile=data.get("speedup_vs_compile"),
            timing=TimingReport(**timing) if timing else None,
            coverage=data.get("coverage"),
            trials=[TrialReport(**t) for t in data.get("trials", [])],
            triton_launches=[KernelLaunches(**k) for k in data.get("triton_launches", [])],
            kernel_profile=[KernelProfile(**k) for k in data.get("kernel_profile", [])],
            device=data.get("device", "cpu"),
            sandbox=data.get("sandbox", "none"),
            problem_id=data.get("problem_id"),
            problem_hash=data.get("problem_hash"),
            problem_size=str(data.get("problem_size") or "original"),
            solution_hash=data.get("solution_hash"),
            duration_s=float(data.get("duration_s", 0.0)),
            candidate_log=data.get("candidate_log", ""),
            phase_seconds={str(k): float(v) for k, v in (data.get("phase_seconds") or {}).items()},
        )

    def summary(self) -> str:
        """A few readable lines for terminals (what ``tritongym eval`` prints without --json).

        Every text that can come from the candidate (errors, messages, kernel and op names) is
        passed through `printable`: escape sequences cannot draw a fake verdict on the terminal, and
        a lone surrogate cannot crash a strict UTF-8 stdout.
        """
        return printable(self._summary_text(), keep_newlines=True)

    def _summary_text(self) -> str:
        lines = [f"status: {self.status}   reward: {self.reward:.3f}   device: {self.device}   sandbox: {self.sandbox}"]
        if self.problem_id:
            size = " (CPU size)" if self.problem_size == "cpu" else ""
            lines.append(f"problem: {self.problem_id}{size}")
        if self.error:
            lines.append("error: " + self.error.strip().replace("\n", "\n       "))
        for violation in self.violations:
            lines.append(f"violation [{violation.code}]: {violation.message}")
        if self.trials:
            passed = sum(t.passed for t in self.trials)
            # A trial whose outputs could not be compared (shape or dtype mismatch) has no error value:
            # say so instead of printing 0.
            errors = [t.max_abs_error for t in self.trials if t.max_abs_error is not None]
            worst = f"{max(errors):.3g}" if errors else "n/a"
            uncompared = sum(t.max_abs_error is None and not t.passed for t in self.trials)
            note = f" ({uncompared} not comparable, see below)" if uncompared else ""
            lines.append(f"trials: {passed}/{len(self.trials)} passed, max abs error {worst}{note}")
        for trial in self.trials:
            if not trial.passed and trial.message:
                lines.append(f"  trial {trial.index} ({trial.family}): {trial.message}")
        if self.triton_launches:
            kernels = ", ".join(f"{k.kernel}×{k.launches}" for k in self.triton_launches)
            lines.append(f"triton launches: {kernels}")
        if self.torch_compute_ops:
            lines.append("torch compute ops in forward: " + ", ".join(self.torch_compute_ops))
        if self.timing:
            t = self.timing
            lines.append(
                f"timing ({t.method}): reference {t.reference_median_ms:.4g} ms, "
                f"candidate {t.candidate_median_ms:.4g} ms, speedup {self.speedup:.3g}x"
            )
        if self.coverage is not None:
            lines.append(f"coverage: {self.coverage:.1%} of GPU time in the candidate's own kernels")
        for notice in self.notices:
            lines.append(f"note [{notice.code}]: {notice.message}")
        lines.append(f"took {self.duration_s:.1f} s")
        return "\n".join(lines)


def printable(text: str, keep_newlines: bool = False) -> str:
    """`text` with control characters and invalid code points escaped (``\\x1b``, ``\\ud800``).

    Candidate text is data: ANSI escapes, carriage returns and other controls are shown as escapes,
    and so are lone surrogates and other code points a UTF-8 encoder refuses.
    """
    out = []
    for char in text:
        code = ord(char)
        if (char == "\n" and keep_newlines) or (char == "\t"):
            out.append(char)
        elif code < 0x20 or 0x7F <= code < 0xA0 or 0xD800 <= code <= 0xDFFF or code in (0x2028, 0x2029):
            out.append(char.encode("unicode_escape", "backslashreplace").decode("ascii")
                       if code < 0xD800 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


# Statuses in order of precedence when several apply: the first wins.
STATUS_PRECEDENCE = (
    Status.CRASHED,
    Status.TIMEOUT,
    Status.COMPILE_ERROR,
    Status.UNSUPPORTED,
    Status.RUNTIME_ERROR,
    Status.INTEGRITY_VIOLATION,
    Status.INCORRECT,
    Status.OK,
)
