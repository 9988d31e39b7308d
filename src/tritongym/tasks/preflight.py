"""The pre-flight estimate: will a problem's reference fit this machine, before anything runs?

On a CPU, KernelBench's original sizes do not fit (level1/19_ReLU allocates a 6.4 GB input and
dies with "can't allocate memory"). Before evaluating, each problem is built on the ``meta``
device (the task audit's probe, nothing allocated) and its memory and expected time are compared
with the evaluation's limits; a problem that cannot fit is refused with the fix named, instead of
failing mid-run. CPU-size variants carry their estimate in the sizing record already.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritongym.tasks.problem import Problem

if TYPE_CHECKING:
    from tritongym.bench.audit.model import SizeEstimate

GiB = 1 << 30
MiB = 1 << 20

#: Address space of a reference worker besides the problem's tensors: the interpreter, torch and its
#: libraries mapped, thread stacks and allocator arenas. The worker's address-space cap
#: (``RLIMIT_AS`` = the memory limit) counts it. Measured (benchmarks/reference_footprint.py,
#: docs/kernelbench-cpu.md): 0.93-0.95 GiB peak VM for every level-1 problem at CPU size, and
#: 0.74-0.90 GiB beyond the tensors below for those measured at their original size; half a GiB more
#: for what a busier allocator reserves.
REFERENCE_BASE_BYTES = 3 * GiB // 2
#: How many times a trial holds each kind of tensor at once (`worker.reference.ReferenceWorker.trial`):
#: the inputs drawn and the model's own copy of them, the float64 copies for the truth (twice the
#: bytes); the parameters and their float64 copy; the forward's peak, then the float64 forward's.
INPUT_COPIES = 4
PARAM_COPIES = 3
FORWARD_COPIES = 3
#: A convolution's im2col buffer (`SizeEstimate.workspace_bytes`, at float32) in the float64 forward,
#: where no oneDNN path exists: twice its bytes (level1/50: 4.4 GiB measured against 3.4 GiB estimated
#: without it).
WORKSPACE_COPIES = 2
#: Candidate forwards an evaluation runs within ``--timeout`` (5 trials and 3 input families, the
#: defaults); each in Triton's CPU interpreter.
EVAL_FORWARDS = 8
#: What Triton's CPU interpreter does per second in an honest candidate, measured (not a generous
#: guess: an original-size matmul passed a 50 GFLOP/s estimate, then timed out at 180 s): FLOPs of
#: examples/kernelbench's level1/1 matmul (tl.dot over 64x64x32 blocks, N = 1024: 0.094 GFLOP/s) and
#: bytes read and written by its level1/19 ReLU (BLOCK 4096, 128 MiB: 8.4 MB/s), one trial each in a
#: real evaluation on the 2-core development machine under load (`benchmarks/reference_footprint.py
#: --interpreter-rates`, docs/kernelbench-cpu.md). A quieter machine is faster: the pre-flight then
#: refuses what it might finish, and a larger ``--timeout`` lets such a problem through.
INTERPRETER_FLOPS = 0.094e9
INTERPRETER_BYTES = 8.4e6


@dataclass(frozen=True)
class Preflight:
    """The estimate for one problem and, when it cannot run here, why and what to do.

    `total_bytes` is the meta device's figure (inputs + parameters + the forward's peak);
    `reference_bytes` what the pre-flight makes of it for a reference worker (compared with the
    memory limit); `expected_s` the evaluation's candidate forwards in the interpreter."""

    problem_id: str
    total_bytes: int | None
    flops: int | None
    expected_s: float | None
    refusal: str | None = None
    reference_bytes: int | None = None


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 else f"{n / MiB:.0f} MiB"


def reference_bytes(input_bytes: int, param_bytes: int, forward_bytes: int, workspace_bytes: int = 0) -> int:
    """The address space a reference worker needs for one trial with its float64 truth."""
    return (REFERENCE_BASE_BYTES + INPUT_COPIES * input_bytes + PARAM_COPIES * param_bytes
            + FORWARD_COPIES * forward_bytes + WORKSPACE_COPIES * workspace_bytes)


def expected_seconds(flops: int | None, moved_bytes: int | None) -> float | None:
    """Seconds for an evaluation's candidate forwards in Triton's CPU interpreter (None: unknown)."""
    if flops is None and moved_bytes is None:
        return None
    return EVAL_FORWARDS * ((flops or 0) / INTERPRETER_FLOPS + (moved_bytes or 0) / INTERPRETER_BYTES)


def check(problem: Problem, total_bytes: int | None, flops: int | None, *, memory_limit_gb: float,
          timeout: float, size: str, needed_bytes: int | None = None, moved_bytes: int | None = None) -> Preflight:
    """Compare one estimate with the limits (see `preflight`).

    `needed_bytes` is the reference worker's estimate (`reference_bytes`); without it, every byte of
    `total_bytes` is taken to be copied as often as the inputs are (the most). `moved_bytes` is
    what one forward reads and writes (inputs and outputs)."""
    if needed_bytes is None and total_bytes is not None:
        needed_bytes = REFERENCE_BASE_BYTES + INPUT_COPIES * total_bytes
    expected = expected_seconds(flops, moved_bytes)
    fix = ("run it at CPU size (--size cpu), or on a GPU" if size == "original"
           else "evaluate it at its original size on a GPU (--device cuda --size original)")
    refusal = None
    if needed_bytes is not None and needed_bytes > memory_limit_gb * GiB:
        shown = f" ({_gib(total_bytes)} of inputs, parameters and forward peak on the meta device)" \
            if total_bytes is not None else ""
        refusal = (f"{problem.problem_id} ({problem.name}) needs about {_gib(needed_bytes)} for its reference "
                   f"worker at {size} size{shown}, with the copies and the float64 check a trial makes and the "
                   f"worker's own {_gib(REFERENCE_BASE_BYTES)}; over the {memory_limit_gb:g} GiB memory limit "
                   f"(--memory-limit-gb) that caps every evaluator process; {fix}")
    elif expected is not None and expected > timeout:
        work = [f"{flops / 1e9:.1f} GFLOP" if flops else "", f"{_gib(moved_bytes)} read and written"
                if moved_bytes else ""]
        refusal = (f"{problem.problem_id} ({problem.name}) needs {' and '.join(w for w in work if w)} per forward "
                   f"at {size} size: about {expected:.0f} s for the {EVAL_FORWARDS} forwards of an evaluation in "
                   f"Triton's CPU interpreter (measured: {INTERPRETER_FLOPS / 1e9:g} GFLOP/s, "
                   f"{INTERPRETER_BYTES / 1e6:g} MB/s), over the {timeout:g} s timeout (--timeout); {fix}")
    return Preflight(problem.problem_id, total_bytes, flops, expected, refusal, needed_bytes)


def check_estimate(problem: Problem, estimate: SizeEstimate, *, memory_limit_gb: float, timeout: float,
                   size: str) -> Preflight:
    """`check` for a meta-device estimate. A forward the probe could not follow (too slow on the
    meta device, or an op it does not support) is taken to produce as much as its inputs and
    parameters together: the pre-flight errs towards refusing."""
    inputs, params = estimate.input_bytes or 0, estimate.param_bytes or 0
    if estimate.forward_error:
        forward = inputs + params
        outputs = forward
    else:
        outputs = estimate.output_bytes or 0
        forward = max(outputs, estimate.forward_peak_bytes or 0)
    return check(problem, estimate.total_bytes, estimate.flops, memory_limit_gb=memory_limit_gb, timeout=timeout,
                 size=size, needed_bytes=reference_bytes(inputs, params, forward, estimate.workspace_bytes or 0),
                 moved_bytes=inputs + outputs)


def preflight(problems: Sequence[Problem], *, memory_limit_gb: float, timeout: float, size: str = "original"
              ) -> dict[str, Preflight]:
    """The estimate of each problem's reference on a CPU, by problem id (`Preflight.refusal` set
    when it cannot run within `memory_limit_gb` and `timeout`).

    CPU-size variants are within the CPU budget by construction and are not probed again. A problem
    that does not build on the meta device has no estimate and is not refused here; the memory cap
    still holds for its workers (a reference over it ends as a `ProblemError` naming the cap).
    """
    from tritongym.bench.audit.probe import estimate_sizes

    to_probe = [p for p in problems if p.size != "cpu"]
    estimates = estimate_sizes(to_probe) if to_probe else {}
    results = {}
    for problem in problems:
        estimate = estimates.get(problem.content_hash)
        if estimate is None or estimate.error:
            results[problem.problem_id] = Preflight(problem.problem_id, None, None, None)
            continue
        # The reference worker holds the most (the candidate holds inputs, its parameters and
        # outputs; the reference also its copies and the float64 check): its need is what is
        # compared with the limit that caps both.
        results[problem.problem_id] = check_estimate(problem, estimate, memory_limit_gb=memory_limit_gb,
                                                     timeout=timeout, size=size)
    return results
