"""Where one ``tritongym eval`` goes: a built-in problem and its honest solution, phase by phase.

What a user iterating on one kernel waits for (issue 46: 7.9 s for ``07_softmax`` on a quiet 2-core
machine, target <= 3 s). Each repeat runs, in fresh processes:

1. ``tritongym eval --problem builtin/<name> --solution examples/builtin/<name>.py --device cpu
   --json`` as a user types it, timed from the outside (``wall``), with the result's own
   ``duration_s`` (inside `evaluate`) and ``phase_seconds``: ``startup`` (the jailed candidate
   worker started and the reference worker acquired: both jails, both workers' imports, the
   reference's set-up), ``import`` and ``build`` (the candidate's module and model), ``trials``
   (every trial: reference and candidate forwards, the checks), ``clean_room`` (the clean room's
   start and its replays). ``outside evaluate`` is the CLI process's own start, imports and
   output (wall - duration_s); ``unattributed`` what `evaluate` spent outside the named phases.
2. Fresh interpreters importing what the CLI imports (``tritongym.cli``, then the evaluator its
   ``eval`` path needs) and what each worker process imports before its first request
   (``tritongym.evaluator.worker.candidate``; three workers per evaluation: reference, candidate,
   clean room), unjailed. The workers' start-ups run beside one another and are waited for inside
   the named phases or, where the parent waits for a worker's first answer, in ``unattributed``.

Usage: ``python benchmarks/eval_phases.py [--problem 07_softmax] [--repeats 3]``. Prints a Markdown
table of medians, with the machine's load average before and after (a shared machine inflates
every figure; say the load with the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHASES = ("startup", "import", "build", "trials", "clean_room", "timing", "profile")
#: Fresh interpreters: the CLI's own imports, what its eval path adds, what each worker imports.
IMPORTS = (("import tritongym.cli", "import tritongym.cli"),
           ("+ from tritongym.evaluator import evaluate (the CLI's eval path)",
            "import tritongym.cli; from tritongym.evaluator import evaluate"),
           ("import tritongym.evaluator.worker.candidate (each worker)",
            "import tritongym.evaluator.worker.candidate"))


def timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, done.stdout


def one_eval(problem: str) -> dict[str, float]:
    solution = ROOT / "examples" / "builtin" / f"{problem}.py"
    if not solution.is_file():
        raise SystemExit(f"no honest solution for {problem!r}: {solution} does not exist "
                         "(names: the files in examples/builtin)")
    wall, out = timed([sys.executable, "-m", "tritongym.cli", "eval", "--problem", f"builtin/{problem}",
                       "--solution", str(solution), "--device", "cpu", "--json"])
    result = json.loads(out)
    if result["status"] != "ok":
        raise SystemExit(f"{problem}: {result['status']}: {result.get('error')}")
    phases = {name: float(result["phase_seconds"].get(name, 0.0)) for name in PHASES}
    inside = float(result["duration_s"])
    return {"wall": wall, "outside evaluate": wall - inside, "evaluate (duration_s)": inside, **phases,
            "unattributed": inside - sum(phases.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="07_softmax", help="a built-in problem's name (default 07_softmax)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement (default 3)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    load_before = os.getloadavg()
    rows: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, value in one_eval(args.problem).items():
            rows.setdefault(name, []).append(value)
        for label, statement in IMPORTS:
            rows.setdefault(label, []).append(timed([sys.executable, "-c", statement])[0])
    load_after = os.getloadavg()
    print(f"`tritongym eval` of builtin/{args.problem} with its honest solution, --device cpu; "
          f"{args.repeats} runs; load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
          f"{os.cpu_count()} CPUs\n")
    print("| phase | median (s) | runs (s) |\n|---|---:|---|")
    for name, values in rows.items():
        if name in PHASES[5:] and not any(values):
            continue  # timing and profiling: not done on a CPU
        print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
