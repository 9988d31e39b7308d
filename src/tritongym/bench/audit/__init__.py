"""The task audit: find problems whose correctness check a trivial output can pass.

A KernelBench-format problem is *degenerate* when a kernel that does not compute the task still
passes the evaluator's per-element tolerance (``|out − expected| ≤ atol + rtol·|expected|``):
outputs that are ≈ 0 (zeros pass), that barely vary (a constant passes), that are the input
(the identity on ``torch.rand`` inputs), or that do not depend on the inputs or the weights.
`audit_problem` runs a problem's reference `Model` over several input and weight seeds in the
evaluator's `ReferenceRunner` worker (never in this process) and reports such defects as
`AuditFlag` values, with the statistics behind them and, where one exists, a stricter
tolerance that every trivial output fails while an honest float32 kernel still passes.

Filters and thresholds (reward-hacking.md §4 and B1–B5):

* robust-kbench (SakanaAI/robust-kbench @ 078f5ba, 10 seeds per task): drop tasks whose outputs
  all lie in (−0.01, 0.01) ("low signal-to-noise"), whose per-element std across seeds is
  < 0.01, or that show no "input impact" or "init impact";
* METR's KernelBenchFiltered: drop low signal-to-noise outputs, uniform tensors, constant
  functions and seed-independent computations;
* the trivial-output probe (zeros, a constant, the input) follows the evaluator's own
  beat-trivial rule (`tritongym.evaluator.trivial`), applied here per element.

Problems too large for the machine are *skipped*, not run: their inputs, parameters and forward
are first built on the ``meta`` device (no memory is allocated) in a short-lived subprocess,
and a problem over the memory budget, or whose first forward exceeds the time budget, is listed
with the reason. `write_flags_json` writes the flagged problems, keyed by `Problem.content_hash`,
for the evaluator to apply the recommended tolerance.

Modules: `model` (flags, statuses, sizes, results), `probe` (sizes on the meta device),
`tolerance` (float64 chunked arithmetic and the tolerance search), `run` (one problem, a problem
set), `report` (the flags file and the Markdown report).
"""

from tritongym.bench.audit.model import (
    TRIVIAL_PASS_FLAGS,
    AuditFlag,
    AuditStats,
    AuditStatus,
    ProblemAudit,
    SizeEstimate,
    ToleranceOverride,
)
from tritongym.bench.audit.probe import estimate_sizes
from tritongym.bench.audit.report import read_flags_json, render_markdown, run_context, write_flags_json
from tritongym.bench.audit.run import audit_problem, audit_problems
from tritongym.bench.audit.tolerance import max_excess, recommend_tolerance, tolerance_grid
from tritongym.errors import OptionsError, ProblemError

__all__ = [
    "TRIVIAL_PASS_FLAGS",
    "AuditFlag",
    "AuditStats",
    "AuditStatus",
    "OptionsError",
    "ProblemAudit",
    "ProblemError",
    "SizeEstimate",
    "ToleranceOverride",
    "audit_problem",
    "audit_problems",
    "estimate_sizes",
    "max_excess",
    "read_flags_json",
    "recommend_tolerance",
    "render_markdown",
    "run_context",
    "tolerance_grid",
    "write_flags_json",
]
