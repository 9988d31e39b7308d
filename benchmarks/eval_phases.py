"""Where one ``tritongym eval`` goes: a built-in problem and its honest solution, phase by phase.

What a user iterating on one kernel waits for (issue 46: 7.9 s for ``07_softmax`` on a quiet 2-core
machine, target <= 3 s). Each repeat runs, interleaved so that a change in the machine's load falls
on every route alike:

1. ``tritongym eval --problem builtin/<name> --solution examples/builtin/<name>.py --device cpu
   --json`` as a user types it, on three routes:

   * ``fresh, first time``: ``--local`` (fresh workers in this process) with an empty cache, so the
     pre-flight probes the problem's sizes (what the first eval of a problem pays);
   * ``fresh``: ``--local`` with the size estimate cached (every later eval of that problem);
   * ``local server``: no flag, with a ``tritongym serve`` running on loopback (started here, in a
     private data directory, and warmed by one evaluation): eval finds it and its warm pool
     answers (service/local.py). Needs the service extra; skipped with a line otherwise.

   Each is timed from the outside (``wall``); for the fresh routes the result's ``duration_s``
   (inside `evaluate`) and ``phase_seconds``: ``startup`` (the jailed candidate worker started and
   the reference worker acquired), ``import`` and ``build`` (the candidate's module and model),
   ``trials`` (every trial: reference and candidate forwards, the checks), ``clean_room`` (its
   replays; the room itself starts with the candidate). ``outside evaluate`` is the CLI process's
   own start, imports, pre-flight and output (wall - duration_s); ``unattributed`` what `evaluate`
   spent outside the named phases (mostly waiting for the workers' first answers).
2. Fresh interpreters importing what the CLI imports (``tritongym.cli``, then the evaluator its
   ``eval`` path needs) and what each worker process imports before its first request
   (``tritongym.evaluator.worker.candidate``; three workers per evaluation: reference, candidate,
   clean room), unjailed.

Usage: ``python benchmarks/eval_phases.py [--problem 07_softmax] [--repeats 3]``. Prints a Markdown
table of medians, with the machine's load average before and after (a shared machine inflates
every figure; say the load with the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
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


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, done.stdout


def one_eval(problem: str, env: dict[str, str], *extra: str) -> dict[str, float]:
    solution = ROOT / "examples" / "builtin" / f"{problem}.py"
    if not solution.is_file():
        raise SystemExit(f"no honest solution for {problem!r}: {solution} does not exist "
                         "(names: the files in examples/builtin)")
    wall, out = timed([sys.executable, "-m", "tritongym.cli", "eval", "--problem", f"builtin/{problem}",
                       "--solution", str(solution), "--device", "cpu", "--json", *extra], env)
    result = json.loads(out)
    if result["status"] != "ok":
        raise SystemExit(f"{problem}: {result['status']}: {result.get('error')}")
    phases = {name: float(result["phase_seconds"].get(name, 0.0)) for name in PHASES}
    inside = float(result["duration_s"])
    return {"wall": wall, "outside evaluate": wall - inside, "evaluate (duration_s)": inside, **phases,
            "unattributed": inside - sum(phases.values())}


def start_server(env: dict[str, str]) -> subprocess.Popen | None:
    """A ``tritongym serve`` on a free loopback port, recorded in `env`'s data directory; None
    without the service extra."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        return None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "tritongym.cli", "serve", "--port", str(port), "--device", "cpu",
                               "--db", str(Path(env["XDG_DATA_HOME"]) / "jobs.db"), "--log-level", "warning"],
                              cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = Path(env["XDG_DATA_HOME"]) / "tritongym" / "local-server.json"
    deadline = time.monotonic() + 120
    while not record.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise SystemExit("tritongym serve did not come up in 120 s")
        time.sleep(0.2)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="07_softmax", help="a built-in problem's name (default 07_softmax)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each measurement (default 3)")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    scratch = Path(tempfile.mkdtemp(prefix="eval-phases-"))
    env = {**os.environ, "XDG_DATA_HOME": str(scratch / "data"), "TRITONGYM_CACHE_DIR": str(scratch / "cache")}
    server = start_server(env)
    try:
        one_eval(args.problem, env, "--local")  # fills the size cache the "fresh" route reads
        if server is not None:
            one_eval(args.problem, env)  # the server's pool starts its fork servers on the first job
        load_before = os.getloadavg()
        routes: dict[str, dict[str, list[float]]] = {}
        for repeat in range(args.repeats):
            first = {**env, "TRITONGYM_CACHE_DIR": str(scratch / f"empty-cache-{repeat}")}
            measured = [("fresh, first time", one_eval(args.problem, first, "--local")),
                        ("fresh", one_eval(args.problem, env, "--local"))]
            if server is not None:
                measured.append(("local server", one_eval(args.problem, env)))
            for route, values in measured:
                for name, value in values.items():
                    routes.setdefault(route, {}).setdefault(name, []).append(value)
            for label, statement in IMPORTS:
                routes.setdefault("imports", {}).setdefault(label, []).append(
                    timed([sys.executable, "-c", statement])[0])
        load_after = os.getloadavg()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"`tritongym eval` of builtin/{args.problem} with its honest solution, --device cpu; "
          f"{args.repeats} runs per route, interleaved; load average {load_before[0]:.1f} before, "
          f"{load_after[0]:.1f} after; {os.cpu_count()} CPUs\n")
    if server is None:
        print("(no local-server route: the service extra is not installed, pip install -e '.[service]')\n")
    print("| route | wall median (s) | runs (s) |\n|---|---:|---|")
    for route, values in routes.items():
        if "wall" in values:
            print(f"| {route} | {statistics.median(values['wall']):.2f} | "
                  f"{', '.join(f'{v:.2f}' for v in values['wall'])} |")
    for route in ("fresh, first time", "fresh"):
        print(f"\n{route}:\n\n| phase | median (s) | runs (s) |\n|---|---:|---|")
        for name, values in routes[route].items():
            if name in PHASES[5:] and not any(values):
                continue  # timing and profiling: not done on a CPU
            print(f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")
    print("\nimports (fresh interpreters):\n\n| import | median (s) | runs (s) |\n|---|---:|---|")
    for label, values in routes["imports"].items():
        print(f"| {label} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
