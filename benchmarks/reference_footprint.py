"""The pre-flight estimate against reality: each problem's reference worker, measured.

For every problem of a KernelBench level, at CPU size and at its original size, this prints the
pre-flight's estimate (the meta-device probe: inputs, parameters, forward peak, FLOPs; and what the
pre-flight makes of it: the reference worker's address space and the evaluation's time) beside what
a real reference worker used when an evaluation's first trial ran in it (``setup`` then one
``trial`` with the float64 truth, as `evaluator.parent` drives it): its peak resident memory
(``VmHWM`` of its process tree), its peak address space (``VmPeak``, what the rlimit counts) and
the seconds each step took.

Safe to run on a shared machine: an original-size problem is measured only when the pre-flight's
own estimate of its reference is at most ``--safe-gb``, and every measured worker runs under the
evaluator's own memory cap (``--cap-gb``: its cgroup where one can be made, and an address-space
rlimit), started only when that cap plus ``--headroom-gb`` is available, so a wrong estimate ends as
an over-memory error in the table, never as the host's OOM killer at work. Requests slower than
``--timeout`` seconds are abandoned and shown as a lower bound.
One problem at a time; run it at low priority::

    nice -n 19 python benchmarks/reference_footprint.py ../shared/datasets/kernelbench/kernelbench_l1-l3.jsonl \\
        --level 1 --sizes cpu,original --out reference_footprint.json --markdown reference_footprint.md

``--markdown`` writes the table docs/kernelbench-cpu.md shows; ``--from-json`` redoes it from a
saved run without measuring again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

GiB = 1 << 30
MiB = 1 << 20


def _tree_status(root: int) -> dict[str, int]:
    """Sum of VmHWM and max of VmPeak (bytes) over `root` and its descendants, from /proc."""
    hwm = peak = 0
    stack, seen = [root], set()
    while stack and len(seen) < 64:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("VmHWM:"):
                        hwm += int(line.split()[1]) * 1024
                    elif line.startswith("VmPeak:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
                stack.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return {"peak_rss_bytes": hwm, "peak_vm_bytes": peak}


#: What `measure` records (the rest of a row is the estimate, made afresh on every run).
MEASURED_FIELDS = ("setup_s", "trial_s", "truth", "peak_rss_bytes", "peak_vm_bytes", "outcome", "wall_s")


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def wait_for_memory(needed: int, patience: float = 300.0) -> bool:
    """Wait (up to `patience` s) until the machine has `needed` bytes available; False if it never did."""
    deadline = time.monotonic() + patience
    while available_bytes() < needed:
        if time.monotonic() > deadline:
            return False
        time.sleep(5)
    return True


def measure(problem: Any, *, cap_bytes: int, timeout: float, threads: int | None) -> dict[str, Any]:
    """One reference worker, as an evaluation starts it, through setup and one trial with its truth."""
    from tritongym.errors import ProblemError
    from tritongym.evaluator.reference import ReferenceOverMemory, ReferenceRunner

    row: dict[str, Any] = {}
    started = time.monotonic()
    try:
        with ReferenceRunner(problem, device="cpu", timeout=timeout, memory_limit_bytes=cap_bytes,
                             threads=threads) as runner:
            try:
                clock = time.monotonic()
                runner.setup(weight_seed=1)
                row["setup_s"] = round(time.monotonic() - clock, 3)
                clock = time.monotonic()
                trial = runner.trial(seed=2, truth=True)
                row["trial_s"] = round(time.monotonic() - clock, 3)
                # The worker skips its float64 check when the float64 model fails, running out of
                # memory under the cap included: then the peak is not the whole trial's.
                row["truth"] = trial.truth is not None
                row.update(_tree_status(runner.process.pid))
            except ReferenceOverMemory:
                row["outcome"] = f"over the {cap_bytes / GiB:g} GiB cap"
            except ProblemError as exc:
                text = str(exc)
                row["outcome"] = (f"over {timeout:g} s" if "took longer than" in text
                                  else "error: " + text.splitlines()[-1][:160])
    except ProblemError as exc:  # could not even start
        row["outcome"] = "error: " + str(exc).splitlines()[-1][:160]
    row.setdefault("outcome", "measured")
    row["wall_s"] = round(time.monotonic() - started, 3)
    return row


def estimate_row(problem: Any, estimate: Any, *, memory_limit_gb: float, timeout: float, size: str) -> dict[str, Any]:
    from tritongym.tasks import preflight

    if estimate is None or estimate.error:
        return {"estimate_error": getattr(estimate, "error", "no estimate")}
    check = preflight.check_estimate(problem, estimate, memory_limit_gb=memory_limit_gb, timeout=timeout, size=size)
    return {"input_bytes": estimate.input_bytes, "param_bytes": estimate.param_bytes,
            "forward_peak_bytes": estimate.forward_peak_bytes, "output_bytes": estimate.output_bytes,
            "meta_total_bytes": estimate.total_bytes, "flops": estimate.flops,
            "estimated_reference_bytes": check.reference_bytes, "estimated_s": check.expected_s,
            "refused": check.refusal is not None}


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from tritongym.bench.audit.probe import estimate_sizes
    from tritongym.tasks.loaders import load_problems
    from tritongym.tasks.sizing import at_size

    problems = load_problems(args.problems, levels=[args.level])
    if args.only:
        wanted = set(args.only.split(","))
        problems = [p for p in problems if p.problem_id.rsplit("/", 1)[-1] in wanted]
    problems.sort(key=lambda p: int(p.problem_id.rsplit("/", 1)[-1]))
    rows: list[dict[str, Any]] = []
    reused: dict[tuple[str, str], dict[str, Any]] = {}
    if args.reuse:
        # Measurements from an earlier run, kept where the worker was measured with its float64
        # check (the estimates are always made afresh, with the pre-flight as it is now).
        for row in json.loads(Path(args.reuse).read_text())["rows"]:
            if row.get("outcome") == "measured" and row.get("truth", True):
                reused[(row["problem_id"], row["size"])] = {k: row[k] for k in MEASURED_FIELDS if k in row}
    for size in args.sizes.split(","):
        sized = at_size(problems, size).problems if size == "cpu" else problems
        estimates = estimate_sizes(sized)
        for problem in sized:
            row = {"problem_id": problem.problem_id, "name": problem.name, "size": size}
            row.update(estimate_row(problem, estimates.get(problem.content_hash), memory_limit_gb=args.memory_limit_gb,
                                    timeout=args.eval_timeout, size=size))
            needed = row.get("estimated_reference_bytes")
            if (problem.problem_id, size) in reused:
                row.update(reused[(problem.problem_id, size)])
            elif size == "original" and (needed is None or needed > args.safe_gb * GiB):
                row["outcome"] = (f"not run: estimate over the {args.safe_gb:g} GiB safe limit" if needed is not None
                                  else "not run: no estimate")
            elif size == "original" and not wait_for_memory(int((args.cap_gb + args.headroom_gb) * GiB)):
                # Others share this machine: a worker that may grow to its cap starts only when the
                # cap and a margin are free, so the measurement can never push anyone into swap or the OOM killer.
                row["outcome"] = "not run: the machine had too little memory available"
            else:
                row.update(measure(problem, cap_bytes=int(args.cap_gb * GiB), timeout=args.timeout,
                                   threads=args.threads))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _gib(n: int | None) -> str:
    if n is None:
        return "–"
    return f"{n / GiB:.2f} GiB" if n >= GiB else f"{n / MiB:.0f} MiB"


def _seconds(row: dict[str, Any]) -> str:
    if "trial_s" not in row:
        return "–"
    return f"{row['setup_s']:.1f} + {row['trial_s']:.2f}"


def _measured(row: dict[str, Any] | None) -> str:
    """Measured peak VM / peak RSS, or what happened instead."""
    if row is None:
        return "–"
    if row.get("outcome") == "measured":
        skipped = "" if row.get("truth", True) else " (float64 check skipped: over the cap)"
        return f"{_gib(row.get('peak_vm_bytes'))} / {_gib(row.get('peak_rss_bytes'))}{skipped}"
    return row.get("outcome", "–")


def _estimate(row: dict[str, Any] | None) -> str:
    if row is None or "estimated_reference_bytes" not in row:
        return "–" if row is None else f"no estimate ({row.get('estimate_error', '')[:60]})"
    verdict = "**refused**" if row.get("refused") else "runs"
    seconds = row.get("estimated_s")
    shown = "–" if seconds is None else (f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s")
    return f"{_gib(row.get('meta_total_bytes'))} → {_gib(row['estimated_reference_bytes'])}, {shown}: {verdict}"


def markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """One line per problem: each size's estimate (meta total → reference worker, the evaluation's
    seconds in the interpreter, the pre-flight's decision) beside the measured worker."""
    by_problem: dict[str, dict[str, dict[str, Any]]] = {}
    names: dict[str, str] = {}
    for row in rows:
        by_problem.setdefault(row["problem_id"], {})[row["size"]] = row
        names[row["problem_id"]] = row["name"]
    lines = [
        "| problem | CPU size: estimate | CPU size: measured VM / RSS | CPU size: measured s "
        "| original: estimate | original: measured VM / RSS | original: measured s |",
        "|---|---|---|---|---|---|---|",
    ]
    for problem_id in sorted(by_problem, key=lambda p: int(p.rsplit("/", 1)[-1])):
        sizes = by_problem[problem_id]
        cpu, original = sizes.get("cpu"), sizes.get("original")
        number = problem_id.rsplit("/", 1)[-1]
        lines.append("| " + " | ".join([
            f"{number} {names[problem_id][:44]}", _estimate(cpu), _measured(cpu), _seconds(cpu) if cpu else "–",
            _estimate(original), _measured(original), _seconds(original) if original else "–",
        ]) + " |")
    return "\n".join(lines) + "\n"


def summary(rows: list[dict[str, Any]]) -> str:
    """How far the estimate is from the measurement: the ratio of measured to estimated, per size."""
    out = []
    for size in sorted({r["size"] for r in rows}):
        measured = [r for r in rows if r["size"] == size and r.get("peak_vm_bytes") and r.get("truth", True)
                    and r.get("estimated_reference_bytes")]
        if not measured:
            continue
        vm = sorted(r["peak_vm_bytes"] / r["estimated_reference_bytes"] for r in measured)
        rss = sorted(r["peak_rss_bytes"] / r["estimated_reference_bytes"] for r in measured)
        under = [r["problem_id"] for r in measured if r["peak_vm_bytes"] > r["estimated_reference_bytes"]]
        out.append(f"{size}: {len(measured)} measured; measured peak VM / estimate: min {vm[0]:.2f}, median "
                   f"{vm[len(vm) // 2]:.2f}, max {vm[-1]:.2f}; peak RSS / estimate: max {rss[-1]:.2f}; "
                   f"estimate below the measured peak VM: {', '.join(under) or 'none'}")
    return "\n".join(out)


#: The honest examples whose interpreted speed sets the pre-flight's rates (`preflight.INTERPRETER_*`),
#: each at sizes well inside this machine's means: (problem number, the example, {constant: value}).
RATE_CASES = (
    (1, "examples/kernelbench/level1/1_Square_matrix_multiplication_.py", {"N = 2048 * 2": "N = 1024"}),
    (19, "examples/kernelbench/level1/19_ReLU.py", {"batch_size = 4096": "batch_size = 16",
                                                    "dim = 393216": "dim = 1 << 20"}),
)


def interpreter_rates(source: str) -> list[dict[str, Any]]:
    """An honest candidate's forward in Triton's CPU interpreter, timed in a real evaluation (one
    trial, no input families, in the sandbox): FLOP/s for the matmul, bytes read and written per
    second for the elementwise kernel. The trial's seconds include the reference's forward and
    the comparison, so the rates are, if anything, low (the pre-flight errs towards refusing)."""
    from dataclasses import replace

    import tritongym
    from tritongym.bench.audit.probe import estimate_sizes
    from tritongym.tasks.loaders import load_problems

    problems = {p.problem_id: p for p in load_problems(source, levels=[1])}
    rows = []
    for number, example, edits in RATE_CASES:
        problem = problems[f"kernelbench/level1/{number}"]
        text = problem.source
        for old, new in edits.items():
            if old not in text:
                raise SystemExit(f"level1/{number} no longer has {old!r}: update RATE_CASES")
            text = text.replace(old, new)
        problem = replace(problem, source=text)
        estimate = estimate_sizes([problem])[problem.content_hash]
        result = tritongym.evaluate(problem, Path(example), device="cpu", num_trials=1, input_families=(),
                                    timeout=900.0)
        seconds = result.phase_seconds.get("trials")
        moved = (estimate.input_bytes or 0) + (estimate.output_bytes or 0)
        row = {"problem": f"level1/{number}", "sizes": edits, "status": str(result.status), "trial_s": seconds,
               "flops": estimate.flops, "moved_bytes": moved, "clean_room_s": result.phase_seconds.get("clean_room")}
        if seconds:
            row["gflop_per_s"] = round((estimate.flops or 0) / seconds / 1e9, 3)
            row["gb_per_s"] = round(moved / seconds / 1e9, 4)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="?", help="a KernelBench JSONL/Parquet file or folder (tritongym's loaders)")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--sizes", default="cpu,original", help="comma-separated: cpu, original")
    parser.add_argument("--only", help="comma-separated problem numbers (default: all of the level)")
    parser.add_argument("--safe-gb", type=float, default=3.0,
                        help="run an original-size problem only when the pre-flight estimates its reference at "
                             "most this (default 3 GiB)")
    parser.add_argument("--cap-gb", type=float, default=6.0, help="memory cap of each measured worker (default 6)")
    parser.add_argument("--headroom-gb", type=float, default=4.0,
                        help="an original-size worker starts only when its cap plus this much memory is "
                             "available (default 4 GiB; waits up to 5 minutes, else skips)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per request before giving up")
    parser.add_argument("--threads", type=int, default=None, help="torch threads in the worker (default: all cores)")
    parser.add_argument("--memory-limit-gb", type=float, default=8.0, help="the pre-flight's limit (eval's default)")
    parser.add_argument("--eval-timeout", type=float, default=180.0, help="the pre-flight's timeout (eval's default)")
    parser.add_argument("--out", help="write the rows and the run's settings as JSON")
    parser.add_argument("--markdown", help="write the table as Markdown")
    parser.add_argument("--from-json", help="redo the table and summary from a saved --out file")
    parser.add_argument("--reuse", help="an earlier --out file: keep its complete measurements, estimate afresh, "
                                        "and measure only what it lacks")
    parser.add_argument("--interpreter-rates", action="store_true",
                        help="instead: time honest examples in Triton's CPU interpreter (the pre-flight's rates)")
    args = parser.parse_args()
    if args.interpreter_rates:
        if not args.problems:
            parser.error("--interpreter-rates needs the KernelBench problem source")
        interpreter_rates(args.problems)
        return
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        rows, meta = saved["rows"], saved["meta"]
    else:
        if not args.problems:
            parser.error("give a problem source, or --from-json")
        meta = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                f"Python {platform.python_version()}", "cap_gb": args.cap_gb, "safe_gb": args.safe_gb,
                "timeout": args.timeout, "command": " ".join(sys.argv)}
        rows = run(args)
        if args.out:
            Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(summary(rows))
    if args.markdown:
        Path(args.markdown).write_text(markdown(rows, meta))


if __name__ == "__main__":
    main()
