"""KernelBench at CPU size: choose every problem's CPU size, then audit each variant's reference.

Writes ``src/tritongym/tasks/cpu_sizes.json`` (the shipped table `tritongym.tasks.sizing` reads),
merges the audit's flags for the CPU variants into ``src/tritongym/tasks/audit_flags.json`` (so the
evaluator gives a degenerate variant the stricter tolerance) and prints the figures quoted in
docs/kernelbench-cpu.md. Only references run (no candidate); run it under ``nice``:

    nice -n 10 python benchmarks/kernelbench_cpu.py ../shared/datasets/kernelbench/kernelbench_l1-l3.jsonl \
        --audit-json kernelbench_cpu_audit.jsonl --workers 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tritongym.bench import audit
from tritongym.tasks import builtin_suite, load_problems
from tritongym.tasks.sizing import CpuBudget, SizingStatus, _fit, apply_record, write_table

TASKS = Path(__file__).resolve().parent.parent / "src" / "tritongym" / "tasks"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset")
    parser.add_argument("--audit-json", required=True, help="one JSON line per audited CPU variant (resumable)")
    parser.add_argument("--no-audit", action="store_true", help="only choose the sizes")
    parser.add_argument("--workers", type=int, default=1, help="problems audited at once")
    args = parser.parse_args()
    problems = load_problems(args.dataset) + builtin_suite()  # builtin: so the table knows them too
    from tritongym.bench.audit.probe import _Prober

    started = time.monotonic()
    prober = _Prober(int(4 << 30), 60.0, 10.0)
    try:
        records = {p.content_hash: _fit(p, CpuBudget(), prober) for p in problems}
    finally:
        prober.close()
    write_table(records, TASKS / "cpu_sizes.json")
    counts = {s.value: sum(r.status == s for r in records.values()) for s in SizingStatus}
    print(f"sizes chosen for {len(problems)} problems in {time.monotonic() - started:.0f} s: {counts}", flush=True)
    for r in records.values():
        if r.status == SizingStatus.CANNOT:
            print(f"  cannot: {r.problem_id} {r.name}: {r.reason}")
    if args.no_audit:
        return 0
    out = Path(args.audit_json)
    done = {json.loads(line)["problem_id"] for line in out.read_text().splitlines()} if out.exists() else set()
    variants = [apply_record(p, records[p.content_hash]) for p in problems
                if records[p.content_hash].status != SizingStatus.CANNOT and p.problem_id not in done]
    with out.open("a", encoding="utf-8") as handle:
        def write(result: audit.ProblemAudit) -> None:
            handle.write(json.dumps(result.to_dict()) + "\n")
            handle.flush()

        audit.audit_problems(variants, on_audit=write, workers=args.workers, device="cpu", memory_budget_gb=1.0,
                             time_budget_s=10.0)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    audited = [r for r in rows if r["status"] == "audited"]
    firsts = [r["stats"]["first_trial_s"] for r in audited]
    print(f"{len(audited)} audited, median first trial {statistics.median(firsts):.3f} s, "
          f"median audit {statistics.median(r['seconds'] for r in audited):.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
