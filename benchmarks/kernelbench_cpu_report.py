"""Figures for docs/kernelbench-cpu.md from `kernelbench_cpu.py`'s outputs (the shipped size table and
the audit's JSON lines), and the CPU variants' flags merged into ``tasks/audit_flags.json``.

    python benchmarks/kernelbench_cpu_report.py kernelbench_cpu_audit.jsonl [--write-flags]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from tritongym.bench.audit import AuditStatus, ProblemAudit, write_flags_json
from tritongym.tasks.flags import audit_flags
from tritongym.tasks.sizing import shipped_sizes

TASKS = Path(__file__).resolve().parent.parent / "src" / "tritongym" / "tasks"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("audit_json")
    parser.add_argument("--write-flags", action="store_true", help="merge the variants' flags into audit_flags.json")
    args = parser.parse_args()
    table = {h: r for h, r in shipped_sizes().items() if r.problem_id.startswith("kernelbench/")}
    audits = [ProblemAudit.from_dict(json.loads(line)) for line in Path(args.audit_json).read_text().splitlines()]
    audits = [a for a in audits if a.problem_id.startswith("kernelbench/")]
    by_level: dict[int, Counter] = {}
    for record in table.values():
        level = int(record.problem_id.split("/")[1][5:])
        by_level.setdefault(level, Counter())[record.status.value] += 1
    print("## sizes by level")
    for level, counts in sorted(by_level.items()):
        print(f"level {level}: {dict(counts)}")
    heavy = [r for r in table.values() if r.reason and r.status.value == "scaled"]
    print(f"scaled but over the preferred budget at their floors: {len(heavy)}: "
          + ", ".join(f"{r.problem_id} ({r.name})" for r in heavy))
    print("\n## no CPU size")
    for r in sorted(table.values(), key=lambda r: r.problem_id):
        if r.status.value == "cannot":
            print(f"| {r.problem_id} | {r.name} | {r.reason} |")
    statuses = Counter(a.status.value for a in audits)
    print(f"\n## audit of the CPU variants: {len(audits)} run: {dict(statuses)}")
    audited = [a for a in audits if a.status == AuditStatus.AUDITED]
    firsts = sorted(a.stats.first_trial_s for a in audited if a.stats)
    print(f"reference first trial (get_inputs + forward + transfer): median {statistics.median(firsts):.3f} s, "
          f"p90 {firsts[int(0.9 * len(firsts))]:.3f} s, max {firsts[-1]:.3f} s over {len(firsts)}")
    seconds = sorted(a.seconds for a in audited)
    print(f"whole audit per problem (worker start, 5 input + 3 weight seeds, probes): median "
          f"{statistics.median(seconds):.1f} s")
    for level in (1, 2, 3):
        lv = [a.stats.first_trial_s for a in audited if a.level == level and a.stats]
        if lv:
            print(f"  level {level}: median first trial {statistics.median(lv):.3f} s over {len(lv)}")
    for a in audits:
        if a.status != AuditStatus.AUDITED:
            print(f"not audited: {a.problem_id} {a.name}: {a.status.value}: {a.reason}")
    original = {f.problem_id: f for f in audit_flags().values()}
    flagged = [a for a in audited if a.flags]
    print(f"\n## flagged at CPU size: {len(flagged)}")
    new = []
    for a in flagged:
        before = original.get(a.problem_id)
        marker = "also flagged at original size" if before else "not flagged at original size"
        if before is None:
            new.append(a)
        print(f"| {a.problem_id} | {a.name} | {', '.join(f.value for f in a.flags)} | {marker} |")
    print(f"flagged only at CPU size (or not audited at original size): {len(new)}")
    lost = [pid for pid in original if pid.startswith("kernelbench/") and pid not in {a.problem_id for a in flagged}]
    print(f"flagged at original size but not at CPU size: {lost}")
    if args.write_flags:
        write_flags_json(audited, TASKS / "audit_flags.json")
        print("merged into", TASKS / "audit_flags.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
