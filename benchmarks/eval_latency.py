"""Evaluation latency on this machine: the built-in suite, and the dispatch-trace start-up cost.

Two measurements, printed as Markdown tables:

1. ``suite``: every built-in problem evaluated with its honest solution (``examples/builtin``),
   ``--repeats`` times, reporting the median wall time of `tritongym.evaluate` per problem and the
   sum of the medians. On a CPU this is the Triton interpreter plus two worker start-ups.
2. ``dispatch``: the first entry into a `TorchDispatchMode`, measured in fresh interpreters, for a
   plain subclass (torch wraps its ``__torch_dispatch__`` in ``_disable_dynamo``, whose first call
   imports ``torch._dynamo``) and for tritongym's `OpTrace` (which opts out). Both run in every
   worker of every evaluation, so the difference is paid twice per evaluation.

Usage: ``python benchmarks/eval_latency.py [--device cpu] [--repeats 3] [--only suite|dispatch]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_DISPATCH = r"""
import sys, time, torch
from torch.utils._python_dispatch import TorchDispatchMode
if sys.argv[1] == "plain":
    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
else:
    from tritongym.evaluator.worker.optrace import OpTrace as Mode
x = torch.randn(4)
start = time.perf_counter()
with Mode():
    torch.relu(x)
print(time.perf_counter() - start)
"""


def bench_suite(device: str, repeats: int) -> None:
    import tritongym

    rows = []
    for problem in tritongym.builtin_suite():
        solution = ROOT / "examples" / "builtin" / f"{problem.name}.py"
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            result = tritongym.evaluate(problem, solution, device=device)
            times.append(time.perf_counter() - start)
            if not result.correct:
                raise SystemExit(f"{problem.problem_id}: {result.status}: {result.error}")
        rows.append((problem.problem_id, statistics.median(times), len(result.trials)))
    print(f"| problem | median wall (s) over {repeats} | trials |\n|---|---:|---:|")
    for name, median, trials in rows:
        print(f"| {name} | {median:.2f} | {trials} |")
    print(f"| **all {len(rows)}** | **{sum(r[1] for r in rows):.1f}** | |")


def bench_dispatch(repeats: int) -> None:
    print("| mode | median first entry (s) | runs |\n|---|---:|---:|")
    for variant in ("plain", "optrace"):
        samples = [
            float(subprocess.run([sys.executable, "-c", _DISPATCH, variant], capture_output=True, text=True,
                                 check=True).stdout)
            for _ in range(repeats)
        ]
        print(f"| {variant} | {statistics.median(samples):.3f} | {repeats} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("suite", "dispatch"))
    args = parser.parse_args()
    if args.only in (None, "dispatch"):
        bench_dispatch(max(args.repeats, 5))
    if args.only in (None, "suite"):
        bench_suite(args.device, args.repeats)


if __name__ == "__main__":
    main()
