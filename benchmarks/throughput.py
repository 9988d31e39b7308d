"""Evaluation throughput: tritongym's pool against two naive harnesses, in one run, same parallelism.

The batch is the built-in suite (problem + its honest solution in examples/builtin), repeated to at
least ``--evals`` evaluations. Three harnesses, each ``--workers`` at a time:

(a) ``naive-fresh``: one fresh, unisolated ``python`` per evaluation that imports torch and triton,
    loads the problem and the candidate, and runs as many trials as tritongym's default (the
    5 task trials + 3 perturbed families = 8), comparing with ``torch.allclose`` at 1e-2;
(b) ``naive-warm``: the same checks in ``--workers`` long-lived processes;
(c) ``tritongym``: `evaluate_many` with default options (every check on, default trials).

Printed as Markdown: evaluations/min and the ratios, tritongym's per-phase latency (medians of
`EvalResult.phase_seconds`), the steady-state candidate start-up (job sent → child ready to
import; from the fork server's jobs after the first), and the memory per idle slot (fork server
resident set; pages shared with its children are copy-on-write).

tritongym's workers install five speed fixes to Triton's interpreter that change no result
(`interpreter_fixes.install_speedups`: the discarded integer-overflow checks skipped, ``tl`` patched
once per namespace and launch, numpy dtypes from a table, builtins called directly, and type
objects' shape fields from a table with broadcasts and same-type operands checked as ints), which
the naive harnesses, running the stock interpreter, lack; ``--like-for-like`` gives the naive
harnesses the same fixes, so the ratios then compare the harnesses' own work.

Usage: ``python benchmarks/throughput.py [--workers 2] [--evals 51] [--like-for-like]`` (CPU:
TRITON_INTERPRET=1).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_NAIVE = r"""
import importlib.util, json, os, sys, torch
import triton  # noqa: F401

if os.environ.get("NAIVE_INTERPRETER_SPEEDUPS") == "1":  # --like-for-like: tritongym's interpreter speed fixes
    from tritongym.evaluator.worker.interpreter_fixes import install_speedups
    install_speedups()

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module

def evaluate(problem_path, solution_path, trials):
    problem, solution = load(problem_path, "problem"), load(solution_path, "solution")
    torch.manual_seed(0)
    init = problem.get_init_inputs()
    torch.manual_seed(0)
    reference = problem.Model(*init)
    torch.manual_seed(0)
    candidate = solution.ModelNew(*init)
    ok = True
    for trial in range(trials):
        torch.manual_seed(trial)
        inputs = problem.get_inputs()
        if trial >= 5:  # the perturbed families: negated, scaled, offset
            inputs = [(-x, x * 1000, x + 3)[trial - 5] if torch.is_tensor(x) and x.is_floating_point() else x
                      for x in inputs]
        expected = reference(*inputs)
        got = candidate(*[x.clone() if torch.is_tensor(x) else x for x in inputs])
        ok = ok and torch.allclose(got, expected, atol=1e-2, rtol=1e-2)
    return ok

if sys.argv[1] == "once":
    print(json.dumps(evaluate(sys.argv[2], sys.argv[3], 8)))
else:
    for line in sys.stdin:
        problem_path, solution_path = json.loads(line)
        print(json.dumps(evaluate(problem_path, solution_path, 8)), flush=True)
"""


def batch(evals: int) -> list[tuple[str, str]]:
    from tritongym.tasks import builtin_suite

    pairs = []
    for problem in builtin_suite():
        name = problem.problem_id.split("/")[-1]
        solution = ROOT / "examples" / "builtin" / f"{name}.py"
        path = ROOT / "src" / "tritongym" / "tasks" / "builtin" / f"{name}.py"
        if solution.is_file() and path.is_file():
            pairs.append((str(path), str(solution)))
    out = []
    while len(out) < evals:
        out.extend(pairs)
    return out[:max(evals, len(pairs))]


THREADS = {"n": 1}
#: ``--like-for-like``: the naive harnesses get the interpreter's speed fixes tritongym's workers
#: have (`interpreter_fixes.install_speedups`).
LIKE_FOR_LIKE = {"on": False}


def env() -> dict[str, str]:
    """The naive processes get the same CPU threads per slot as tritongym's workers (cores //
    workers): with torch's default of one thread per core, parallel slots oversubscribe the cores
    and the naive harnesses would be measured slower than they need to be."""
    threads = str(THREADS["n"])
    skip = {"NAIVE_INTERPRETER_SPEEDUPS": "1"} if LIKE_FOR_LIKE["on"] else {}
    return {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, **skip}


def naive_fresh(jobs: list[tuple[str, str]], workers: int) -> float:
    def one(job: tuple[str, str]) -> bool:
        out = subprocess.run([sys.executable, "-c", _NAIVE, "once", *job], capture_output=True, text=True,
                             env=env(), check=True).stdout
        return json.loads(out)

    started = time.monotonic()
    with ThreadPoolExecutor(workers) as executor:
        results = list(executor.map(one, jobs))
    assert all(results), "the naive harness rejected an honest solution"
    return time.monotonic() - started


def naive_warm(jobs: list[tuple[str, str]], workers: int) -> float:
    processes = [subprocess.Popen([sys.executable, "-c", _NAIVE, "serve"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env()) for _ in range(workers)]
    for process in processes:  # warm: the imports are paid before the clock starts
        process.stdin.write(json.dumps(jobs[0]) + "\n")
        process.stdin.flush()
        process.stdout.readline()
    started = time.monotonic()
    shares = [jobs[i::workers] for i in range(workers)]

    def drive(index: int) -> list[bool]:
        process, results = processes[index], []
        for job in shares[index]:
            process.stdin.write(json.dumps(job) + "\n")
            process.stdin.flush()
            results.append(json.loads(process.stdout.readline()))
        return results

    with ThreadPoolExecutor(workers) as executor:
        results = [r for rs in executor.map(drive, range(workers)) for r in rs]
    elapsed = time.monotonic() - started
    for process in processes:
        process.stdin.close()
        process.wait()
    assert all(results)
    return elapsed


def tritongym_pool(jobs: list[tuple[str, str]], workers: int) -> tuple[float, list, dict]:
    from tritongym.evaluator.options import EvalOptions
    from tritongym.execution import EvalRequest, LocalPool

    options = EvalOptions(device="cpu")
    with LocalPool(workers, parent_threads=max(1, (os.cpu_count() or 1) // workers)) as pool:
        # Warm the slots (fork servers start on first use), as the warm naive harness is warmed.
        warm = [pool.submit(EvalRequest(jobs[i][0], Path(jobs[i][1]), options)) for i in range(workers)]
        [f.result() for f in warm]
        started = time.monotonic()
        futures = [pool.submit(EvalRequest(problem, Path(solution), options)) for problem, solution in jobs]
        results = [f.result() for f in futures]
        elapsed = time.monotonic() - started
        memory = {}
        for slot in pool._slots:
            for launcher in slot.launchers.values():
                process = getattr(launcher, "process", None)
                if process is not None:
                    from tritongym.execution.references import _resident_bytes

                    memory[f"slot {slot.index}"] = _resident_bytes(process.popen.pid)
        stats = pool.stats()
    failed = [(r.problem_id, r.status, r.error) for r in results if r.status != "ok"]
    assert not failed, failed
    return elapsed, results, {"memory": memory, "launcher": stats.launcher}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--evals", type=int, default=51)
    parser.add_argument("--like-for-like", action="store_true",
                        help="the naive harnesses get tritongym's interpreter speed fixes (the discarded overflow "
                             "checks skipped, tl patched once per launch, a dtype table, builtins called directly, "
                             "type tables): the same interpreter work on both sides")
    args = parser.parse_args()
    LIKE_FOR_LIKE["on"] = args.like_for_like
    jobs = batch(args.evals)
    n = len(jobs)
    THREADS["n"] = max(1, (os.cpu_count() or 1) // args.workers)
    print(f"{n} evaluations, {args.workers} at a time, {THREADS['n']} CPU thread(s) per slot, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f}"
          + (", naive harnesses like for like (interpreter speed fixes installed)" if args.like_for_like else ""))
    fresh = naive_fresh(jobs, args.workers)
    warm = naive_warm(jobs, args.workers)
    ours, results, info = tritongym_pool(jobs, args.workers)
    rate = {name: 60 * n / seconds for name, seconds in (("naive-fresh", fresh), ("naive-warm", warm),
                                                           ("tritongym", ours))}
    print("\n| harness | wall s | evaluations/min | tritongym ÷ this |")
    print("|---|---:|---:|---:|")
    for name, seconds in (("naive-fresh", fresh), ("naive-warm", warm), ("tritongym", ours)):
        print(f"| {name} | {seconds:.1f} | {rate[name]:.1f} | {rate['tritongym'] / rate[name]:.2f}× |")
    phases = sorted({k for r in results for k in r.phase_seconds})
    print("\n| phase (tritongym) | median s | mean s |")
    print("|---|---:|---:|")
    for phase in phases:
        values = [r.phase_seconds[phase] for r in results if phase in r.phase_seconds]
        print(f"| {phase} | {statistics.median(values):.3f} | {statistics.mean(values):.3f} |")
    durations = [r.duration_s for r in results]
    print(f"\nper evaluation: median {statistics.median(durations):.2f} s; candidates started by "
          f"{info['launcher']}")
    for slot, rss in info["memory"].items():
        print(f"fork server resident set, {slot}: {rss / 2**20:.0f} MiB")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
