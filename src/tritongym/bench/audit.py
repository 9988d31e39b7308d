"""The task audit: find problems whose correctness check a trivial output can pass.

A KernelBench-format problem is *degenerate* when a kernel that does not compute the task still
passes the evaluator's per-element tolerance (``|out − expected| ≤ atol + rtol·|expected|``):
outputs that are ≈ 0 (zeros pass), that barely vary (a constant passes), that are the input
(the identity on ``torch.rand`` inputs), or that do not depend on the inputs or the weights.
`audit_problem` runs a problem's reference `Model` over several input and weight seeds in the
evaluator's `ReferenceRunner` worker (never in this process) and reports such defects as
`AuditFlag` values, with the statistics behind them and, where one exists, a stricter
tolerance that every trivial output fails while an honest float32 kernel still passes.

Filters and thresholds (reward-hacking.md §4 and B1–B5):

* robust-kbench (SakanaAI/robust-kbench @ 078f5ba, 10 seeds per task): drop tasks whose outputs
  all lie in (−0.01, 0.01) ("low signal-to-noise"), whose per-element std across seeds is
  < 0.01, or that show no "input impact" or "init impact";
* METR's KernelBenchFiltered: drop low signal-to-noise outputs, uniform tensors, constant
  functions and seed-independent computations;
* the trivial-output probe (zeros, a constant, the input) follows the evaluator's own
  beat-trivial rule (`tritongym.evaluator.trivial`), applied here per element.

Problems too large for the machine are *skipped*, not run: their inputs, parameters and forward
are first built on the ``meta`` device (no memory is allocated) in a short-lived subprocess,
and a problem over the memory budget, or whose first forward exceeds the time budget, is listed
with the reason. `write_flags_json` writes the flagged problems, keyed by `Problem.content_hash`,
for the evaluator to apply the recommended tolerance.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TextIO

import torch

from tritongym.errors import OptionsError, ProblemError
from tritongym.evaluator.reference import ReferenceRunner
from tritongym.tasks.problem import Problem

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
    """

    input_bytes: int | None = None
    param_bytes: int | None = None
    output_bytes: int | None = None
    forward_peak_bytes: int | None = None
    flops: int | None = None
    float_params: int | None = None
    error: str | None = None
    forward_error: str | None = None

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


# --------------------------------------------------------------------------------------------
# Sizes without allocating: the problem built on the meta device in a short-lived subprocess.

_PROBE_SOURCE = r'''
import importlib.util, json, os, signal, sys, weakref
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # a problem's own prints go to stderr, never into the replies


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


def nbytes(value):
    return sum(t.numel() * t.element_size() for t in tensors(value))


class LiveBytes(TorchDispatchMode):
    """Peak bytes of tensors created by the forward and still referenced (views not counted)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0

    def release(self, n):
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not any(r.alias_info is not None for r in func._schema.returns):
            for t in tensors(out):
                n = t.numel() * t.element_size()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self.release, n)
        return out


class TooSlow(BaseException):
    pass


def on_alarm(signum, frame):
    raise TooSlow()


signal.signal(signal.SIGALRM, on_alarm)


def split(init):
    if isinstance(init, (list, tuple)) and len(init) == 2 and isinstance(init[0], (list, tuple)) \
            and isinstance(init[1], dict):
        return list(init[0]), dict(init[1])
    return list(init), {}


def probe(path, forward_timeout):
    report = {}
    with torch.device("meta"):
        spec = importlib.util.spec_from_file_location("audit_probe_problem", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["audit_probe_problem"] = module
        torch.manual_seed(0)
        spec.loader.exec_module(module)
        args, kwargs = split(module.get_init_inputs())
        model = module.Model(*args, **kwargs)
        inputs = module.get_inputs()
    params = list(model.parameters())
    report["input_bytes"] = nbytes(list(inputs))
    report["param_bytes"] = nbytes(params) + nbytes(list(model.buffers()))
    report["float_params"] = sum(p.numel() for p in params if p.is_floating_point())
    live, flops = LiveBytes(), FlopCounterMode(display=False)
    try:
        with torch.device("meta"), torch.no_grad(), flops, live:
            signal.setitimer(signal.ITIMER_REAL, forward_timeout)
            try:
                out = model(*inputs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        given = [id(t) for t in tensors(list(inputs)) + params]
        report["output_bytes"] = sum(t.numel() * t.element_size() for t in tensors(out) if id(t) not in given)
        report["forward_peak_bytes"] = max(live.peak, report["output_bytes"])
        report["flops"] = int(flops.get_total_flops())
    except TooSlow:
        report["forward_error"] = f"the forward on the meta device took more than {forward_timeout:g} s"
    except Exception as exc:
        report["forward_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return report


for line in sys.stdin:
    request = json.loads(line)
    try:
        report = probe(request["path"], request["forward_timeout"])
    except BaseException as exc:
        report = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    replies.write(json.dumps(report) + "\n")
    replies.flush()
'''


class _Prober:
    """One probe subprocess answering one problem at a time; restarted after a crash or hang."""

    def __init__(self, memory_limit_bytes: int, timeout: float, forward_timeout: float) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self.timeout = timeout
        self.forward_timeout = forward_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="tritongym-audit-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        self.count = 0

    def _start(self) -> subprocess.Popen[bytes]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.dir),
               "TMPDIR": str(self.dir), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (self.memory_limit_bytes, self.memory_limit_bytes))

        self.buffer = b""
        return subprocess.Popen([sys.executable, "-I", "-B", "-c", _PROBE_SOURCE], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(self.dir), env=env,
                                start_new_session=True, preexec_fn=limit)

    def _kill(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    stream.close()
            self.process = None

    def close(self) -> None:
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _read_line(self, deadline: float) -> bytes | None:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def estimate(self, problem: Problem) -> SizeEstimate:
        # A fresh file name each time: importlib's bytecode cache keys on (mtime, size), so two
        # same-sized problems written within a second under one name could share a stale module.
        self.count += 1
        path = self.dir / f"problem_{self.count}.py"
        path.write_text(problem.source, encoding="utf-8")
        if self.process is None or self.process.poll() is not None:
            self._kill()
            self.process = self._start()
        assert self.process.stdin is not None
        try:
            request = {"path": str(path), "forward_timeout": self.forward_timeout}
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            line = self._read_line(time.monotonic() + self.timeout)
        except (BrokenPipeError, OSError):
            line = None
        if line is None:
            self._kill()
            return SizeEstimate(error=f"building the problem on the meta device did not finish within "
                                      f"{self.timeout:g} s (or crashed the probe)")
        report = json.loads(line)
        return SizeEstimate(**{k: report.get(k) for k in SizeEstimate.__dataclass_fields__})


def estimate_sizes(problems: Iterable[Problem], *, timeout: float = 60.0, forward_timeout: float = 10.0,
                   memory_limit_gb: float = 4.0) -> dict[str, SizeEstimate]:
    """Sizes of each problem built under ``torch.device("meta")``, keyed by content hash.

    The problems' code runs only in a probe subprocess (address space capped at
    `memory_limit_gb`, so a problem that allocates real memory despite the meta device fails
    there); one that hangs or crashes is killed after `timeout` seconds and the probe restarts.
    A meta forward slower than `forward_timeout` (RNNs unroll step by step) is abandoned and
    only the input and parameter sizes are reported.
    """
    prober = _Prober(int(memory_limit_gb * GiB), timeout, forward_timeout)
    try:
        return {p.content_hash: prober.estimate(p) for p in problems}
    finally:
        prober.close()


# --------------------------------------------------------------------------------------------
# Element-wise arithmetic in float64 chunks.


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


# --------------------------------------------------------------------------------------------
# One problem.


class _SkipProblem(Exception):
    """The problem is over a budget; the message is the reason."""


def _classify(exc: ProblemError) -> tuple[AuditStatus, str]:
    text = str(exc)
    if isinstance(exc.__cause__, TimeoutError):
        return AuditStatus.SKIPPED, text.splitlines()[0]
    memory = ("can't allocate memory", "MemoryError", "out of memory", "killed by SIGKILL", "std::bad_alloc",
              "exceeds the limit of")
    evidence = [line for line in text.splitlines() if any(marker in line for marker in memory)]
    if evidence:
        return AuditStatus.SKIPPED, f"over the memory budget when run: {evidence[0].strip()[:300]}"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return AuditStatus.FAILED, " | ".join(lines[-3:])[:600]


class _Trials:
    """Collects one problem's outputs and scores the trivial predictors as the trials arrive."""

    def __init__(self, tolerance: tuple[float, float]) -> None:
        self.atol, self.rtol = tolerance
        self.atols, self.rtols = tolerance_grid(tolerance)
        self.outputs: list[list[torch.Tensor]] = []
        self.finite = True
        self.max_abs = 0.0
        self.abs_sum = 0.0
        self.abs_count = 0
        self.passes: dict[str, int] = {}
        self.excess: dict[str, list[list[float]]] = {}  # predictor → per seed (only where it passed)
        self.passthrough_seed: dict[int, int] = {}  # input index → a seed index where it passed

    def _score(self, name: str, excess: Callable[[Sequence[float]], list[float]]) -> bool:
        """Count a pass of predictor `name` at the tolerance; keep its excess over the grid if it passed."""
        self.passes.setdefault(name, 0)
        if excess([self.rtol])[0] > self.atol:
            return False  # fails here, so at every smaller tolerance too: the grid is not needed
        self.passes[name] += 1
        self.excess.setdefault(name, []).append(excess(self.rtols))
        return True

    def add(self, expected: Any, inputs: list[Any], finite: bool) -> None:
        leaves = [leaf.detach() for leaf in _leaves(expected)]
        self.finite &= finite
        peak = _max_abs(leaves)
        self.max_abs = max(self.max_abs, peak)
        for leaf in leaves:
            self.abs_sum += float(leaf.abs().sum(dtype=torch.float64))
            self.abs_count += leaf.numel()

        def zeros(rtols: Sequence[float]) -> list[float]:
            if math.isfinite(peak) and all(leaf.dtype.is_floating_point for leaf in leaves):
                # |0 − e| − r·|e| = (1 − r)·|e|: largest where |e| is.
                return [(1 - r) * peak for r in rtols]
            return _combine((max_excess(0.0, leaf, rtols) for leaf in leaves), len(rtols))

        self._score("zeros", zeros)
        if leaves and all(leaf.dtype.is_floating_point and leaf.numel() > 1 for leaf in leaves):
            means = [_finite_mean(leaf) for leaf in leaves]
            self._score("constant", lambda rtols: _combine(
                (max_excess(m, leaf, rtols) for m, leaf in zip(means, leaves, strict=True)), len(rtols)))
        if len(leaves) == 1:
            for index, tensor in enumerate(_leaves(inputs)):
                if tensor.shape == leaves[0].shape and tensor.dtype == leaves[0].dtype:
                    if self._score(f"input {index}", lambda rtols, t=tensor: max_excess(t, leaves[0], rtols)):
                        self.passthrough_seed.setdefault(index, len(self.outputs))
        self.outputs.append(leaves)

    def score_seed_means(self) -> None:
        """The per-element mean of the *other* seeds' outputs as a predictor of each seed."""
        n = len(self.outputs)
        if n < 2:
            return
        sums = [self._chunked_sum(k) for k in range(len(self.outputs[0]))]
        for outputs in self.outputs:
            def excess(rtols: Sequence[float], outputs: list[torch.Tensor] = outputs) -> list[float]:
                per_leaf = []
                for k, leaf in enumerate(outputs):
                    def others(start: int, stop: int, k: int = k, leaf: torch.Tensor = leaf) -> torch.Tensor:
                        own = leaf.reshape(-1)[start:stop].to(torch.float64)
                        return (sums[k].reshape(-1)[start:stop] - own) / (n - 1)

                    per_leaf.append(max_excess(others, leaf, rtols))
                return _combine(per_leaf, len(rtols))

            self._score("mean of other seeds", excess)

    def _chunked_sum(self, k: int) -> torch.Tensor:
        total = torch.zeros(self.outputs[0][k].shape, dtype=torch.float64)
        for outputs in self.outputs:
            flat = total.reshape(-1)
            source = outputs[k].reshape(-1)
            for start in range(0, flat.numel(), _CHUNK):
                flat[start:start + _CHUNK] += source[start:start + _CHUNK].to(torch.float64)
        return total

    def spread(self) -> tuple[float | None, float | None, float | None]:
        """(max, mean, fraction < SIGNAL_THRESHOLD) of the per-element std across seeds."""
        if len(self.outputs) < 2:
            return None, None, None
        worst, total, below, count = 0.0, 0.0, 0, 0
        for k in range(len(self.outputs[0])):
            flats = [o[k].reshape(-1) for o in self.outputs]
            for start in range(0, flats[0].numel(), _CHUNK):
                stack = torch.stack([f[start:start + _CHUNK].to(torch.float64) for f in flats])
                std = stack.std(dim=0)
                std = torch.where(torch.isnan(std), torch.full_like(std, math.inf), std)
                finite = std[torch.isfinite(std)]
                worst = max(worst, float(std.max()))
                total += float(finite.sum())
                below += int((std < SIGNAL_THRESHOLD).sum())
                count += std.numel()
        if count == 0:
            return None, None, None
        return worst, total / count, below / count

    def compare(self, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], scale: float = 1.0,
                ) -> tuple[float, bool]:
        """(max |a − b|, whether `a` passes against `b` at tolerance/scale)."""
        if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
            return math.inf, False
        rtols = [0.0, self.rtol / scale]
        diff, excess = _combine((max_excess(x, y, rtols) for x, y in zip(a, b, strict=True)), 2)
        return max(diff, 0.0), excess <= self.atol / scale


def _finite_mean(leaf: torch.Tensor) -> float:
    mean = float(leaf.mean(dtype=torch.float64))
    if math.isfinite(mean):
        return mean
    values = leaf.to(torch.float64)
    values = values[torch.isfinite(values)]
    return float(values.mean()) if values.numel() else 0.0


def _estimate_one(problem: Problem) -> SizeEstimate:
    return estimate_sizes([problem])[problem.content_hash]


def _cpu_gflops() -> float:
    """Best-of-3 float32 1024³ matmul rate of this process, a ceiling for any forward's FLOP rate."""
    a = torch.randn(1024, 1024)
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        torch.mm(a, a)
        best = max(best, 2 * 1024 ** 3 / (time.perf_counter() - started) / 1e9)
    return best


def audit_problem(
    problem: Problem,
    *,
    device: str = "cpu",
    input_seeds: int = 5,
    weight_seeds: int = 3,
    tolerance: tuple[float, float] = (1e-2, 1e-2),
    memory_budget_gb: float = 1.5,
    time_budget_s: float = 5.0,
    worker_memory_gb: float | None = None,
    estimate: SizeEstimate | None = None,
    cpu_gflops: float | None = None,
    seed: int = 0,
) -> ProblemAudit:
    """Audit one problem (definitions in `AuditFlag`; module docstring for the sources).

    Args:
        problem: the problem; its code runs only in a `ReferenceRunner` worker.
        device: ``cpu`` or ``cuda`` (where the reference runs).
        input_seeds: input seeds (``get_inputs()`` draws) under the first weight seed; ≥ 2.
        weight_seeds: weight seeds (model builds) compared on the first input seed; ≥ 1.
        tolerance: ``(atol, rtol)`` of the evaluator's per-element check (default: the
            ``kernelbench`` preset, 1e-2 both).
        memory_budget_gb: skip when inputs + parameters + max(outputs, forward peak), measured on
            the meta device, exceed this many GiB.
        time_budget_s: skip when the first trial takes longer; on the CPU also when the FLOPs
            alone would need more than twice this at the machine's measured matmul rate.
        worker_memory_gb: address-space cap of the reference worker on the CPU (default
            3 + 6 × `memory_budget_gb`); running out counts as over budget.
        estimate: sizes from `estimate_sizes` (measured here when None).
        cpu_gflops: the matmul rate for the FLOP pre-check (measured when None).
        seed: shifts every seed; the audit is deterministic for a given value.

    Returns:
        The `ProblemAudit`. Never raises for a problem's own failure (status ``failed``).

    Raises:
        OptionsError: invalid arguments.
        EvaluatorError: a worker could not be started.
    """
    _check_options(device, input_seeds, weight_seeds, tolerance, memory_budget_gb, time_budget_s)
    started = time.monotonic()
    if estimate is None:
        estimate = _estimate_one(problem)

    def result(status: AuditStatus, reason: str | None = None, **kwargs: Any) -> ProblemAudit:
        return ProblemAudit(problem_id=problem.problem_id, name=problem.name, level=problem.level,
                            content_hash=problem.content_hash, status=status, reason=reason,
                            estimate=estimate, seconds=round(time.monotonic() - started, 2), **kwargs)

    total = estimate.total_bytes
    if total is not None and total > memory_budget_gb * GiB:
        return result(AuditStatus.SKIPPED, f"inputs + parameters + outputs/intermediates ≈ {_gib(total)} > "
                                           f"the {memory_budget_gb:g} GiB memory budget")
    if device == "cpu" and estimate.flops:
        rate = cpu_gflops if cpu_gflops is not None else _cpu_gflops()
        needed = estimate.flops / (rate * 1e9)
        if needed > 2 * time_budget_s:
            return result(AuditStatus.SKIPPED,
                          f"{estimate.flops / 1e9:.0f} GFLOP per forward needs ≥ {needed:.0f} s at this "
                          f"CPU's {rate:.0f} GFLOP/s (time budget {time_budget_s:g} s)")
    cap = None if device != "cpu" else int((worker_memory_gb or 3 + 6 * memory_budget_gb) * GiB)
    try:
        with ReferenceRunner(problem, device=device, timeout=max(60.0, 5 * time_budget_s),
                             memory_limit_bytes=cap) as runner:
            # A trial's reply carries the inputs, the outputs and the float64 truth (twice the
            # outputs' bytes): within 3x the memory budget for any problem not skipped above.
            runner.channel.max_message_bytes = max(runner.channel.max_message_bytes,
                                                   int(3 * memory_budget_gb * GiB) + (64 << 20))
            stats, flags, override, note = _run(runner, estimate, input_seeds=input_seeds,
                                                weight_seeds=weight_seeds, tolerance=tolerance,
                                                time_budget_s=time_budget_s, seed=seed)
    except _SkipProblem as exc:
        return result(AuditStatus.SKIPPED, str(exc))
    except ProblemError as exc:
        status, reason = _classify(exc)
        return result(status, reason)
    return result(AuditStatus.AUDITED, flags=flags, stats=stats, override=override, override_note=note)


def _run(runner: ReferenceRunner, estimate: SizeEstimate, *, input_seeds: int, weight_seeds: int,
         tolerance: tuple[float, float], time_budget_s: float, seed: int,
         ) -> tuple[AuditStats, tuple[AuditFlag, ...], ToleranceOverride | None, str | None]:
    seeds = [seed * 1000 + 1 + i for i in range(input_seeds)]
    weights = [seed * 1000 + 500 + j for j in range(weight_seeds)]
    runner.setup(weights[0])
    runner.timeout = time_budget_s
    first_started = time.monotonic()
    try:
        trial = runner.trial(seeds[0])
    except ProblemError as exc:
        if isinstance(exc.__cause__, TimeoutError):
            raise _SkipProblem(f"the first trial took longer than the {time_budget_s:g} s time budget"
                               ) from exc
        raise
    first_s = time.monotonic() - first_started
    runner.timeout = max(30.0, 10 * first_s + 10)
    trials = _Trials(tolerance)
    trials.add(trial.expected, trial.inputs, trial.finite)
    del trial
    for s in seeds[1:]:
        trial = runner.trial(s)
        trials.add(trial.expected, trial.inputs, trial.finite)
        del trial
    trials.score_seed_means()

    repeat = _leaves(runner.trial(seeds[0]).expected)
    repeat_diff, deterministic = trials.compare(repeat, trials.outputs[0], scale=HONEST_MARGIN)
    del repeat

    negated_passthrough = None
    if trials.passthrough_seed:
        index, seed_index = next(iter(sorted(trials.passthrough_seed.items())))
        negated = runner.trial(seeds[seed_index], family="negated")
        if negated.finite:
            output = _leaves(negated.expected)
            inputs = _leaves(negated.inputs)
            negated_passthrough = trials.compare([inputs[index]], output)[1]

    # Only a model with parameters can be insensitive to them; with an unknown count (the meta
    # build failed) the difference is measured but not flagged.
    weight_diff = None
    weight_insensitive = False
    if len(weights) > 1 and estimate.float_params != 0:
        weight_diff, weight_insensitive = 0.0, True
        for w in weights[1:]:
            runner.setup(w)
            other = runner.trial(seeds[0])
            leaves = _leaves(other.expected)
            trials.max_abs = max(trials.max_abs, _max_abs(leaves))
            diff, within = trials.compare(leaves, trials.outputs[0])
            weight_diff = max(weight_diff, diff)
            weight_insensitive &= within

    max_std, mean_std, below = trials.spread()
    across_inputs = [trials.compare(o, trials.outputs[0]) for o in trials.outputs[1:]]
    input_diff = max((diff for diff, _ in across_inputs), default=None)
    input_insensitive = all(within for _, within in across_inputs)

    flags: list[AuditFlag] = []
    if trials.max_abs < SIGNAL_THRESHOLD:
        flags.append(AuditFlag.NEAR_ZERO_OUTPUT)
    if max_std is not None and max_std < SIGNAL_THRESHOLD:
        flags.append(AuditFlag.NEAR_CONSTANT_OUTPUT)
    if len(trials.outputs) > 1 and input_insensitive:
        flags.append(AuditFlag.INPUT_INSENSITIVE)
    if weight_diff is not None and weight_insensitive and estimate.float_params:
        flags.append(AuditFlag.WEIGHT_INSENSITIVE)
    passed = {name for name, count in trials.passes.items() if count}
    for flag, names in ((AuditFlag.ZEROS_PASS, {"zeros"}), (AuditFlag.CONSTANT_PASS, {"constant"}),
                        (AuditFlag.MEAN_OUTPUT_PASS, {"mean of other seeds"})):
        if passed & names:
            flags.append(flag)
    if any(name.startswith("input ") for name in passed):
        flags.append(AuditFlag.PASSTHROUGH_PASS)
        if negated_passthrough is False:
            flags.append(AuditFlag.IDENTITY_ON_TASK_INPUTS)
    if not deterministic:
        flags.append(AuditFlag.NONDETERMINISTIC_REFERENCE)
    if not trials.finite:
        flags.append(AuditFlag.NON_FINITE_OUTPUT)

    override, note, reference_error = None, None, None
    if passed:
        reference_excess, reference_error = _reference_excess(runner, weights[0], seeds, trials)
        override, note = recommend_tolerance(trials.excess, reference_excess, tolerance=tolerance)
    elif flags:
        note = ("no trivial output passes the default tolerance; a tolerance change would not address "
                "these flags")

    stats = AuditStats(
        input_seeds=len(seeds), weight_seeds=len(weights),
        output_shapes=tuple(tuple(int(d) for d in leaf.shape) for leaf in trials.outputs[0]),
        first_trial_s=round(first_s, 3), max_abs_output=_finite_or_none(trials.max_abs),
        mean_abs_output=trials.abs_sum / trials.abs_count if trials.abs_count else 0.0,
        max_std_across_inputs=_finite_or_none(max_std), mean_std_across_inputs=_finite_or_none(mean_std),
        fraction_std_below=below, input_seed_max_diff=input_diff, weight_seed_max_diff=weight_diff,
        repeat_max_diff=repeat_diff, trivial_passes=dict(sorted(trials.passes.items())),
        negated_passthrough=negated_passthrough, reference_rel_error=reference_error,
    )
    return stats, tuple(flags), override, note


def _reference_excess(runner: ReferenceRunner, weight: int, seeds: Sequence[int], trials: _Trials,
                      ) -> tuple[list[list[float]] | None, float | None]:
    """The float32 reference against its float64 truth on every input seed (rebuilt at `weight`)."""
    runner.setup(weight)
    rtols = [r / HONEST_MARGIN for r in trials.rtols]
    excess, worst = [], 0.0
    for s in seeds:
        trial = runner.trial(s, truth=True)
        if trial.truth is None:
            return None, None
        expected, truth = _leaves(trial.expected), _leaves(trial.truth)
        pairs = list(zip(expected, truth, strict=True))
        excess.append(_combine((max_excess(e, t, rtols) for e, t in pairs), len(rtols)))
        num = sum(float(((e.to(torch.float64) - t.to(torch.float64)) ** 2).nansum()) for e, t in pairs)
        den = sum(float((t.to(torch.float64) ** 2).nansum()) for t in truth)
        worst = max(worst, (num / den) ** 0.5 if den else (0.0 if num == 0 else math.inf))
    return excess, _finite_or_none(worst)


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 100 else f"{n / (1 << 20):.1f} MiB"


def _check_options(device: str, input_seeds: int, weight_seeds: int, tolerance: tuple[float, float],
                   memory_budget_gb: float, time_budget_s: float) -> None:
    if device not in ("cpu", "cuda"):
        raise OptionsError(f"device must be cpu or cuda, got {device!r}")
    if not isinstance(input_seeds, int) or input_seeds < 2:
        raise OptionsError(f"input_seeds must be an integer >= 2 (the std across seeds needs two), "
                           f"got {input_seeds!r}")
    if not isinstance(weight_seeds, int) or weight_seeds < 1:
        raise OptionsError(f"weight_seeds must be an integer >= 1, got {weight_seeds!r}")
    if len(tolerance) != 2 or not all(isinstance(t, (int, float)) and t > 0 for t in tolerance):
        raise OptionsError(f"tolerance must be (atol, rtol), both > 0, got {tolerance!r}")
    for name, value in (("memory_budget_gb", memory_budget_gb), ("time_budget_s", time_budget_s)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise OptionsError(f"{name} must be a positive number, got {value!r}")


def audit_problems(
    problems: Sequence[Problem],
    *,
    progress: TextIO | None = sys.stderr,
    on_audit: Callable[[ProblemAudit], None] | None = None,
    **options: Any,
) -> list[ProblemAudit]:
    """Audit every problem (keyword `options` as for `audit_problem`), one progress line each.

    Sizes are estimated first for all problems in one probe process, then each problem is
    audited in its own reference worker. `on_audit` is called as each audit completes.
    """
    _check_options(options.get("device", "cpu"), options.get("input_seeds", 5),
                   options.get("weight_seeds", 3), options.get("tolerance", (1e-2, 1e-2)),
                   options.get("memory_budget_gb", 1.5), options.get("time_budget_s", 5.0))
    started = time.monotonic()
    if progress is not None:
        print(f"audit: estimating sizes of {len(problems)} problems on the meta device", file=progress,
              flush=True)
    estimates = estimate_sizes(problems)
    if options.get("device", "cpu") == "cpu" and "cpu_gflops" not in options:
        options["cpu_gflops"] = _cpu_gflops()
    audits = []
    for index, problem in enumerate(problems, 1):
        audit = audit_problem(problem, estimate=estimates[problem.content_hash], **options)
        audits.append(audit)
        if on_audit is not None:
            on_audit(audit)
        if progress is not None:
            if audit.status == AuditStatus.AUDITED:
                detail = ", ".join(f.value for f in audit.flags) or "no flags"
            else:
                detail = audit.reason
            print(f"[{index}/{len(problems)} {time.monotonic() - started:5.0f}s] {problem.problem_id} "
                  f"{problem.name}: {audit.status.value} ({audit.seconds:.1f}s) {detail}", file=progress,
                  flush=True)
    return audits


# --------------------------------------------------------------------------------------------
# Outputs: the flags file the evaluator reads, and the Markdown report.

FLAGS_FILE_VERSION = 1


def write_flags_json(audits: Sequence[ProblemAudit], path: str | os.PathLike[str], *, merge: bool = True,
                     generated: str | None = None) -> dict[str, Any]:
    """Write the flagged problems to `path` (the format the evaluator reads) and return the document.

    Format: ``{"version": 1, "generated": "<date>", "tool": "tritongym audit", "problems":
    {"<content_hash>": {"problem_id", "flags", "atol", "rtol", "note"}}}`` with one entry per
    audited problem that has at least one flag. ``atol``/``rtol`` are the recommended tolerance
    (apply the stricter of it and the configured one); null when none is needed or none exists
    (`note` says which). With `merge`, entries already in the file are kept unless this run
    audited the same problem (then its new result replaces or removes them).
    """
    path = Path(path)
    problems: dict[str, Any] = {}
    if merge and path.is_file():
        problems = dict(read_flags_json(path)["problems"])
    for audit in audits:
        if audit.status != AuditStatus.AUDITED:
            continue
        problems.pop(audit.content_hash, None)
    for audit in audits:
        if audit.status != AuditStatus.AUDITED or not audit.flags:
            continue
        entry = {"problem_id": audit.problem_id, "flags": [f.value for f in audit.flags],
                 "atol": _tidy(audit.override.atol) if audit.override else None,
                 "rtol": _tidy(audit.override.rtol) if audit.override else None, "note": audit.override_note}
        previous = problems.get(audit.content_hash)
        if previous is not None:  # the same source under two ids: the union of flags, the stricter tolerance
            entry["flags"] = sorted(set(previous["flags"]) | set(entry["flags"]))
            for key in ("atol", "rtol"):
                values = [v for v in (previous[key], entry[key]) if v is not None]
                entry[key] = min(values) if values else None
        problems[audit.content_hash] = entry
    document = {"version": FLAGS_FILE_VERSION, "generated": generated or datetime.date.today().isoformat(),
                "tool": "tritongym audit", "problems": dict(sorted(problems.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return document


def read_flags_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a flags file written by `write_flags_json`."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(document, dict) or document.get("version") != FLAGS_FILE_VERSION:
        raise ProblemError(f"{path}: not a version-{FLAGS_FILE_VERSION} audit flags file")
    known = {flag.value for flag in AuditFlag}
    for key, entry in document.get("problems", {}).items():
        if not {"problem_id", "flags", "atol", "rtol"} <= set(entry) or not set(entry["flags"]) <= known:
            raise ProblemError(f"{path}: malformed entry {key}")
    return document


def run_context(argv: Sequence[str], **budgets: Any) -> dict[str, str]:
    """Machine, software, date and commit for a report header (nanochat's figures-name-their-run rule)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return {
        "command": " ".join(argv),
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {device}; {platform.platform()}",
        "software": f"Python {platform.python_version()}, torch {torch.__version__}",
        **{k: str(v) for k, v in budgets.items()},
    }


def _level_name(level: int | None) -> str:
    return f"level {level}" if level is not None else "other"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def render_markdown(audits: Sequence[ProblemAudit], context: Mapping[str, str] | None = None) -> str:
    """The audit as Markdown: run context, summary per level, flag counts, flagged/skipped/failed lists."""
    lines: list[str] = []
    if context:
        lines += [_row("run", ""), _row("---", "---"), *[_row(k, v) for k, v in context.items()], ""]
    groups: list[int | None] = sorted({a.level for a in audits}, key=lambda v: (v is None, v or 0))
    lines += ["### Summary", "", _row("set", "problems", "audited", "skipped", "failed", "flagged"),
              _row(*["---"] * 6)]
    for name, chosen in [*((_level_name(g), [a for a in audits if a.level == g]) for g in groups),
                         ("all", list(audits))]:
        count = {s: sum(a.status == s for a in chosen) for s in AuditStatus}
        lines.append(_row(name, len(chosen), count[AuditStatus.AUDITED], count[AuditStatus.SKIPPED],
                          count[AuditStatus.FAILED], sum(a.flagged for a in chosen)))
    lines += ["", "### Flags (audited problems carrying each flag)", "",
              _row("flag", *(_level_name(g) for g in groups), "all"), _row(*["---"] * (len(groups) + 2))]
    for flag in AuditFlag:
        per = [sum(flag in a.flags for a in audits if a.level == g) for g in groups]
        lines.append(_row(f"`{flag.value}`", *per, sum(per)))
    lines += ["", "### Flagged problems", "",
              _row("problem", "flags", "max abs out", "std across inputs: max / frac < 0.01",
                   "input diff", "weight diff", "trivial passes (seeds)", "override", "note"),
              _row(*["---"] * 9)]
    for a in (a for a in audits if a.flagged):
        s = a.stats
        assert s is not None
        passes = ", ".join(f"{k}: {v}/{s.input_seeds}" for k, v in s.trivial_passes.items() if v) or "–"
        override = f"atol={a.override.atol:g}, rtol={a.override.rtol:g}" if a.override else "none"
        lines.append(_row(f"{a.problem_id} `{a.name}`", ", ".join(f.value for f in a.flags),
                          _num(s.max_abs_output),
                          f"{_num(s.max_std_across_inputs)} / {_num(s.fraction_std_below)}",
                          _num(s.input_seed_max_diff), _num(s.weight_seed_max_diff), passes, override,
                          a.override_note or ""))
    for status, title in ((AuditStatus.SKIPPED, "Skipped problems"), (AuditStatus.FAILED, "Failed problems")):
        chosen = [a for a in audits if a.status == status]
        lines += ["", f"### {title} ({len(chosen)})", "", _row("problem", "reason"), _row("---", "---")]
        lines += [_row(f"{a.problem_id} `{a.name}`", a.reason or "") for a in chosen]
    return "\n".join(lines) + "\n"
