"""`EvalOptions`: every knob of one evaluation, documented where it is declared."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tritongym.errors import OptionsError
from tritongym.evaluator.common.family_names import PERTURBATION_FAMILIES
from tritongym.evaluator.jail.sandbox import SANDBOX_MODES
from tritongym.evaluator.reward import RewardConfig

if TYPE_CHECKING:  # torch is not imported here: a client that only builds options (`eval --server`) never loads it
    import torch


@dataclass(frozen=True)
class Tolerance:
    """Per-element tolerance: an element passes when ``|out − expected| ≤ atol + rtol·|expected|``."""

    atol: float
    rtol: float


#: Named tolerance presets, by output dtype. ``kernelbench`` is KernelBench v0.1 / KernelGYM
#: (atol = rtol = 1e-2 for every dtype); ``strict`` follows KernelBench main's per-precision
#: values (1e-4 for float32, 1e-2 for half precision). Keyed by the dtype's name (``str(dtype)``
#: without ``torch.``).
TOLERANCE_PRESETS: dict[str, dict[str, Tolerance]] = {
    "kernelbench": {
        "float64": Tolerance(1e-2, 1e-2),
        "float32": Tolerance(1e-2, 1e-2),
        "float16": Tolerance(1e-2, 1e-2),
        "bfloat16": Tolerance(1e-2, 1e-2),
    },
    "strict": {
        "float64": Tolerance(1e-7, 1e-7),
        "float32": Tolerance(1e-4, 1e-4),
        "float16": Tolerance(1e-2, 1e-2),
        "bfloat16": Tolerance(1e-2, 1e-2),
    },
}

DEVICES = ("auto", "cpu", "cuda")  # and "cuda:N" (see `device.parse_device`)
#: What the reference is timed as: the eager `Model`, `torch.compile(Model)`, or both.
BASELINES = ("eager", "compile", "both")


@dataclass(frozen=True)
class EvalOptions:
    """Options of one evaluation. Defaults are the protective, KernelBench-compatible ones.

    Attributes:
        device: ``auto`` (CUDA when available, else CPU), ``cpu`` (Triton interpreter,
            ``TRITON_INTERPRET=1``; correctness only), ``cuda`` or ``cuda:N`` (device N of those
            ``CUDA_VISIBLE_DEVICES`` shows; the workers see only that device).
        timeout: seconds the candidate may take in all (import, build, trials, timing); on
            expiry it and everything it started are killed and the status is ``timeout``.
        num_trials: correctness trials, each on fresh inputs from a secret seed.
        tolerance: a preset name from `TOLERANCE_PRESETS` (``kernelbench`` or ``strict``).
        atol: overrides the preset's absolute tolerance for every dtype when set.
        rtol: overrides the preset's relative tolerance for every dtype when set.
        sandbox: ``auto`` (bubblewrap when it works here, else none, with a notice), ``bwrap``
            (required; an error if unavailable) or ``none``.
        memory_limit_gb: host-memory cap, in GiB, of every process an evaluation starts: the
            candidate and the clean room, and in CPU mode the reference worker (its cgroup where
            one can be made, and an address-space rlimit; a reference over it is a `ProblemError`
            naming the cap).
        disk_limit_mb: size of the candidate's job directory and ``/tmp`` inside the jail (each a
            tmpfs, with bubblewrap), in MiB; files written there also count against its memory.
        max_processes: process-count cap of the candidate (``RLIMIT_NPROC``).
        seed: a fixed master seed for reproducible debugging only. None (default) draws every
            seed from OS entropy; a fixed seed makes inputs predictable, never use it for training.
        reference_timeout: seconds the reference worker may take for its own work; exceeding it
            is a problem error (the task is too big for this device), not a candidate verdict.
        measure_speed: time the reference and the candidate on a GPU (ignored on a CPU).
        time_on_cpu: run the timing protocol on a CPU with a host clock. The figures say nothing
            about GPU speed; this exists to test the protocol without a GPU.
        timing_reps: timed repetitions each for the reference, the candidate and the clean
            room's replay of the candidate's logged work (the charged time is the larger median).
        timing_blocks: the repetitions are split into this many interleaved blocks
            (reference, candidate, reference, ...) to cancel drift.
        timing_rechecks: how many of the candidate's timed repetitions, chosen secretly after
            each has run, have their outputs compared with the reference.
        warmup_ms: time-based warm-up of each side before timing (and at least 3 calls).
        max_speedup: reported speedups are clamped to this (a notice says so); the reward caps
            its speed term separately (`RewardConfig.speedup_cap`).
        profile_calls: forward calls profiled on a GPU for the coverage of the candidate's own
            kernels (0 turns profiling off; coverage is then null).
        input_families: perturbed input families tried after the `num_trials` trials on the
            task's own inputs, one trial each (``negated``, ``scaled``, ``offset``; see
            `families`); a family is skipped when the reference output is not finite on it.
        trivial_margin: the candidate's relative L2 error must be at most this times that of
            every trivial output (zeros, constants, passthrough); see `trivial`.
        precision_policy: ``reject`` (a precision downgrade is a violation), ``report`` (a
            notice only) or ``off`` (no float64 evaluation).
        precision_factor: allowed ratio of the candidate's error to the float32 reference's
            error, both against the float64 truth.
        precision_floor: relative error always allowed on top (covers exact operations, whose
            float32 reference error is 0); outputs the reference rounds to a narrower float
            (bf16, fp16, fp8) get at least that format's epsilon.
        reward: weights of the reward terms.
        disabled_checks: violation codes reported as notices instead of failing the verdict.
        candidate_checks: run the candidate worker's own evidence checks (launches, op trace,
            host reads, tampering, kernel bodies) as early filters. ``False`` leaves the verdict
            to the clean room alone (docs/integrity.md, "The clean room"): a test knob that shows
            an attack is stopped by construction, not by a filter.
        use_audit_tolerance: give problems the task audit flagged as degenerate its stricter
            recommended tolerance (the smaller of it and the configured one), with a notice.
        baseline: what the candidate is timed against on a GPU: ``eager`` (the reference
            `Model`), ``compile`` (``torch.compile(Model)``: `speedup` and the reward are
            against it) or ``both`` (`speedup` against eager, `speedup_vs_compile` as well). The
            compiled reference is built and timed by the reference worker in the same
            interleaved pass; on a CPU it is not measured (a ``baseline_unavailable`` notice).
        candidate_memory_fraction: share of the GPU's memory the candidate's CUDA allocator may
            take (the rest is the reference's); exceeding it is an out-of-memory error in the
            candidate, a verdict against it.
    """

    device: str = "auto"
    timeout: float = 180.0
    num_trials: int = 5
    tolerance: str = "kernelbench"
    atol: float | None = None
    rtol: float | None = None
    sandbox: str = "auto"
    memory_limit_gb: float = 8.0
    max_processes: int = 512
    seed: int | None = None
    reference_timeout: float = 600.0
    measure_speed: bool = True
    time_on_cpu: bool = False
    timing_reps: int = 30
    timing_blocks: int = 3
    timing_rechecks: int = 5
    warmup_ms: float = 25.0
    max_speedup: float = 100.0
    profile_calls: int = 3
    input_families: tuple[str, ...] = PERTURBATION_FAMILIES
    trivial_margin: float = 0.1
    precision_policy: str = "reject"
    precision_factor: float = 32.0
    precision_floor: float = 1e-5
    reward: RewardConfig = field(default_factory=RewardConfig)
    disabled_checks: frozenset[str] = frozenset()
    candidate_checks: bool = True
    use_audit_tolerance: bool = True
    baseline: str = "eager"
    candidate_memory_fraction: float = 0.5
    disk_limit_mb: int = 256

    def __post_init__(self) -> None:
        from tritongym.evaluator.common.device_names import parse_device

        parse_device(self.device)  # auto, cpu, cuda or cuda:N; OptionsError otherwise
        if self.baseline not in BASELINES:
            raise OptionsError(f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        fraction = self.candidate_memory_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.05 <= fraction <= 0.95:
            raise OptionsError(f"candidate_memory_fraction must be a number in [0.05, 0.95], got {fraction!r}")
        if isinstance(self.disk_limit_mb, bool) or not isinstance(self.disk_limit_mb, int) \
                or not 16 <= self.disk_limit_mb <= 1 << 20:
            raise OptionsError(f"disk_limit_mb must be an integer in [16, 1048576], got {self.disk_limit_mb!r}")
        if self.sandbox not in SANDBOX_MODES:
            raise OptionsError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, got {self.sandbox!r}")
        if self.tolerance not in TOLERANCE_PRESETS:
            raise OptionsError(
                f"tolerance must be one of {', '.join(TOLERANCE_PRESETS)}, got {self.tolerance!r}; "
                "set atol/rtol to override the preset's values"
            )
        positive = {"timeout": self.timeout, "reference_timeout": self.reference_timeout,
                    "memory_limit_gb": self.memory_limit_gb, "warmup_ms": self.warmup_ms,
                    "max_speedup": self.max_speedup}
        for name, value in positive.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise OptionsError(f"{name} must be a positive number, got {value!r}")
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, (int, float)) or not value >= 0):
                raise OptionsError(f"{name} must be a number >= 0, got {value!r}")
        for name, low in (("num_trials", 1), ("timing_reps", 1), ("timing_blocks", 1), ("max_processes", 8)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise OptionsError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.profile_calls, int) or self.profile_calls < 0:
            raise OptionsError(f"profile_calls must be an integer >= 0, got {self.profile_calls!r}")
        if not isinstance(self.timing_rechecks, int) or self.timing_rechecks < 0:
            raise OptionsError(f"timing_rechecks must be an integer >= 0, got {self.timing_rechecks!r}")
        if self.timing_blocks > self.timing_reps:
            raise OptionsError("timing_blocks cannot exceed timing_reps; lower timing_blocks")
        unknown = [f for f in self.input_families if f not in PERTURBATION_FAMILIES]
        if unknown:
            raise OptionsError(f"unknown input families {unknown}; choose from {', '.join(PERTURBATION_FAMILIES)}")
        object.__setattr__(self, "input_families", tuple(self.input_families))
        if self.precision_policy not in ("reject", "report", "off"):
            raise OptionsError(f"precision_policy must be reject, report or off, got {self.precision_policy!r}")
        for name in ("trivial_margin", "precision_factor", "precision_floor"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise OptionsError(f"{name} must be a finite number >= 0, got {value!r}")
        if not isinstance(self.reward, RewardConfig):
            raise OptionsError("reward must be a RewardConfig")
        from tritongym.evaluator.result import ViolationCode

        disabled = frozenset(str(c) for c in self.disabled_checks)
        unknown_checks = sorted(disabled - {code.value for code in ViolationCode})
        if unknown_checks:
            raise OptionsError(f"unknown disabled_checks {unknown_checks}; valid codes: "
                               f"{', '.join(code.value for code in ViolationCode)}")
        object.__setattr__(self, "disabled_checks", disabled)

    def tolerance_for(self, dtype: torch.dtype) -> Tolerance:
        """The tolerance applied to an output of `dtype` (preset, then atol/rtol overrides)."""
        preset = TOLERANCE_PRESETS[self.tolerance]
        base = preset.get(str(dtype).removeprefix("torch."), preset["float32"])
        return Tolerance(
            atol=base.atol if self.atol is None else float(self.atol),
            rtol=base.rtol if self.rtol is None else float(self.rtol),
        )
