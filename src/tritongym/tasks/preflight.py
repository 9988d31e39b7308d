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

from tritongym.tasks.problem import Problem

GiB = 1 << 30
#: FLOP rate assumed for a reference forward on one CPU core (float32, eager): a deliberately
#: generous figure, so the time check refuses only what is hopeless (docs/kernelbench-cpu.md).
CPU_GFLOPS = 50.0


@dataclass(frozen=True)
class Preflight:
    """The estimate for one problem and, when it cannot run here, why and what to do."""

    problem_id: str
    total_bytes: int | None
    flops: int | None
    expected_s: float | None
    refusal: str | None = None


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 else f"{n / (1 << 20):.0f} MiB"


def check(problem: Problem, total_bytes: int | None, flops: int | None, *, memory_limit_gb: float,
          timeout: float, size: str) -> Preflight:
    """Compare one estimate with the limits (see `preflight`)."""
    expected = None if flops is None else flops / (CPU_GFLOPS * 1e9)
    fix = ("run it at CPU size (--size cpu), or on a GPU" if size == "original"
           else "evaluate it at its original size on a GPU (--device cuda --size original)")
    refusal = None
    if total_bytes is not None and total_bytes > memory_limit_gb * GiB:
        refusal = (f"{problem.problem_id} ({problem.name}) needs about {_gib(total_bytes)} for its reference at "
                   f"{size} size (inputs, parameters and outputs, measured on the meta device), over the "
                   f"{memory_limit_gb:g} GiB memory limit (--memory-limit-gb); {fix}")
    elif expected is not None and expected > timeout:
        refusal = (f"{problem.problem_id} ({problem.name}) needs about {flops / 1e9:.0f} GFLOP per forward at "
                   f"{size} size: ≥ {expected:.0f} s on a CPU, over the {timeout:g} s timeout (--timeout); {fix}")
    return Preflight(problem.problem_id, total_bytes, flops, expected, refusal)


def preflight(problems: Sequence[Problem], *, memory_limit_gb: float, timeout: float, size: str = "original"
              ) -> dict[str, Preflight]:
    """The estimate of each problem's reference on a CPU, by problem id (`Preflight.refusal` set
    when it cannot run within `memory_limit_gb` and `timeout`).

    CPU-size variants are within the CPU budget by construction and are not probed again.
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
        # The candidate process holds what the reference does (inputs, its parameters, outputs):
        # the same estimate is compared with its memory limit.
        results[problem.problem_id] = check(problem, estimate.total_bytes, estimate.flops,
                                            memory_limit_gb=memory_limit_gb, timeout=timeout, size=size)
    return results
