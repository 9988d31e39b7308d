"""Benchmark-level tools over problem sets: the task audit (`tritongym audit`)."""

from tritongym.bench.audit import (
    AuditFlag,
    AuditStats,
    AuditStatus,
    ProblemAudit,
    SizeEstimate,
    ToleranceOverride,
    audit_problem,
    audit_problems,
    estimate_sizes,
    read_flags_json,
    recommend_tolerance,
    render_markdown,
    write_flags_json,
)

__all__ = [
    "AuditFlag",
    "AuditStats",
    "AuditStatus",
    "ProblemAudit",
    "SizeEstimate",
    "ToleranceOverride",
    "audit_problem",
    "audit_problems",
    "estimate_sizes",
    "read_flags_json",
    "recommend_tolerance",
    "render_markdown",
    "write_flags_json",
]
