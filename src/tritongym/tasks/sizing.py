"""CPU-size variants of KernelBench problems: the same code with its size constants scaled down.

KernelBench sizes its problems for a GPU (level1/19_ReLU's input is 6.4 GB); on a machine
without one the reference alone cannot run, and Triton's CPU interpreter is far slower than a GPU.
A *CPU-size variant* is the problem's own source with its module-level size constants
(``batch_size = 4096``, ``dim = 393216``, ``N = 2048 * 2``, ``depth, height, width = 24, 48, 48``)
divided by the same power of two, the smallest one that brings the reference within `CpuBudget`.

What is scaled and what is not (so the problem keeps its meaning):

* only integer constants ≥ `SCALABLE_MIN` (16) are scaled: kernel sizes, strides, small
  channel counts, reduction axes and flags are left as they are;
* names that are structure rather than size are never scaled (kernel, stride, padding,
  dilation, groups, heads, patch, block, stages ...: `STRUCTURAL`), since shapes must stay
  divisible by them;
* no constant goes below `floor_of` its name: 2 for a batch, 8 (`SIZE_FLOOR`, or its original
  value when smaller) for anything else, so no dimension collapses to 1;
* a problem still over the budget with every constant at its floor is accepted when it is within
  `CpuBudget.hard_bytes`/`hard_flops` (slower, and its record says so); beyond that it has no
  CPU size, and the record says why;
* every candidate scale is built on the ``meta`` device first (the task audit's probe, nothing
  allocated): a scale at which the problem's own shape checks fail is skipped;
* a problem the meta device cannot follow (an op without a meta kernel, ``bincount``,
  ``masked_select``; sizes read with ``.item()``) is measured by running it for real on the CPU in
  the probe, capped at `REAL_PROBE_ALLOWANCE` more address space and the probe's forward timeout,
  once its inputs and parameters (when the meta device can size them) are within
  `CpuBudget.hard_bytes`: one already small enough runs as given (its record says how it was
  measured), a larger one is scaled as usual, and one that fits nowhere has no CPU size, with why.

The variant's first line records what changed (``# tritongym-size: cpu (batch_size 4096->16,
...)``), so a `Problem` knows its size from its source wherever it travels (pool, service,
prompts), and results state it as ``problem_size``. Whether a variant still tests the same thing
is checked with the task audit (`tritongym audit --size cpu`); the figures for KernelBench's 250
problems are in docs/kernelbench-cpu.md.

Sizing a problem takes a probe subprocess; the decisions for the KernelBench problems shipped in
the dataset are precomputed in ``tasks/cpu_sizes.json`` (keyed by the original's content hash),
so `cpu_variant` is instant for them and the same everywhere.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

from tritongym import pyparse
from tritongym.errors import OptionsError, ProblemError
from tritongym.tasks.problem import SIZE_MARKER, Problem

MiB = 1 << 20

#: Integer constants below this are never scaled (kernel sizes, strides, axes, small counts).
SCALABLE_MIN = 16
#: No scaled size goes below this (a batch: 2), so no dimension collapses to 1 or to a trivial width.
SIZE_FLOOR = 8
#: Address space a probe may add to run a problem for real when the meta device cannot follow its
#: forward (8x the hard byte budget: copies, the allocator's slack); beyond it the scale is too large.
REAL_PROBE_ALLOWANCE = 256 * MiB
#: Names (matched anywhere, case-insensitive) that are structure, not size.
STRUCTURAL = re.compile(r"kernel|stride|pad|dilation|group|head|patch|block|window|stage|expan|ratio|"
                        r"seed|iter|step|cluster|axis|split|chunk|top", re.IGNORECASE)
_BATCH = re.compile(r"^(batch|batch_size|bs|b|n_batch|num_batches)$", re.IGNORECASE)


class ProblemSize(str, Enum):
    """Which size a problem is evaluated at."""

    ORIGINAL = "original"
    CPU = "cpu"

    def __str__(self) -> str:
        return self.value


class SizingStatus(str, Enum):
    """What `fit_cpu_size` decided for one problem."""

    UNCHANGED = "unchanged"  # within the budget at its original size
    SCALED = "scaled"
    CANNOT = "cannot"  # no scale of its constants fits the budget (see the reason)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class CpuBudget:
    """What a CPU-size reference may need: bytes (inputs + parameters + forward peak) and FLOPs.

    The defaults keep a reference forward well under a second on one core and leave the Triton
    interpreter's candidate a few seconds per trial (docs/kernelbench-cpu.md has the measurement).
    """

    max_bytes: int = 4 * MiB
    max_flops: float = 2.5e8
    #: accepted when the constants cannot go lower (at their floors): slower, but it runs
    hard_bytes: int = 32 * MiB
    hard_flops: float = 2e9
    max_halvings: int = 24

    def fits(self, estimate: Any, *, hard: bool = False) -> bool:
        total = estimate.total_bytes
        if total is None or total > (self.hard_bytes if hard else self.max_bytes):
            return False
        return not (estimate.flops or 0) > (self.hard_flops if hard else self.max_flops)


@dataclass(frozen=True)
class SizeChange:
    """One size constant: its name as written (``height`` or ``input_shape[0]``) and both values."""

    name: str
    original: int
    scaled: int


@dataclass(frozen=True)
class SizingRecord:
    """The CPU-size decision for one problem (what ``cpu_sizes.json`` holds per content hash)."""

    problem_id: str
    name: str
    status: SizingStatus
    changes: tuple[SizeChange, ...] = ()
    halvings: int = 0
    total_bytes: int | None = None
    flops: int | None = None
    reason: str | None = None
    #: ``meta`` (built on the meta device), or ``cpu``: run for real, the meta device could not follow it
    measured_on: str = "meta"

    def describe(self) -> str:
        if self.status == SizingStatus.UNCHANGED:
            return self.reason or "within the CPU budget at its original size"
        if self.status == SizingStatus.CANNOT:
            return f"no CPU size: {self.reason}"
        return ", ".join(f"{c.name} {c.original}->{c.scaled}" for c in self.changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["changes"] = [[c.name, c.original, c.scaled] for c in self.changes]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SizingRecord:
        return cls(problem_id=str(data["problem_id"]), name=str(data["name"]), status=SizingStatus(data["status"]),
                   changes=tuple(SizeChange(str(n), int(o), int(s)) for n, o, s in data.get("changes", [])),
                   halvings=int(data.get("halvings", 0)), total_bytes=data.get("total_bytes"),
                   flops=data.get("flops"), reason=data.get("reason"),
                   measured_on=str(data.get("measured_on", "meta")))


# --- finding and rewriting size constants -------------------------------------------------------------


@dataclass(frozen=True)
class _Slot:
    name: str
    value: int
    start: tuple[int, int]  # (line, byte column) of the literal expression
    end: tuple[int, int]


def _int_value(node: ast.expr) -> int | None:
    """The value of an integer literal or an arithmetic expression of them (``2048 * 2``)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _int_value(node.operand)
        return None if inner is None else (-inner if isinstance(node.op, ast.USub) else inner)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Pow)):
        left, right = _int_value(node.left), _int_value(node.right)
        if left is None or right is None:
            return None
        if isinstance(node.op, ast.Pow):
            return left ** right if 0 <= right <= 64 and abs(left) <= 1 << 20 else None
        if isinstance(node.op, ast.FloorDiv):
            return left // right if right else None
        return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
    return None


def _slots_of(name: str, value: ast.expr) -> list[_Slot]:
    number = _int_value(value)
    if number is not None:
        return [_Slot(name, number, (value.lineno, value.col_offset), (value.end_lineno or value.lineno,
                                                                        value.end_col_offset or 0))]
    if isinstance(value, (ast.Tuple, ast.List)):
        slots = []
        for index, element in enumerate(value.elts):
            slots += _slots_of(f"{name}[{index}]", element)
        return slots
    return []


def size_constants(source: str) -> list[_Slot]:
    """Every module-level integer constant (name, value, position); names are unique (``x#2``)."""
    try:
        tree = pyparse.parse(source)
    except SyntaxError as exc:
        raise ProblemError(f"not valid Python: {exc.msg} at line {exc.lineno}") from exc
    slots: list[_Slot] = []
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        if names:
            slots += _slots_of("=".join(names), node.value)
        for target in node.targets:
            if isinstance(target, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List)) \
                    and len(target.elts) == len(node.value.elts):
                for element, value in zip(target.elts, node.value.elts, strict=True):
                    if isinstance(element, ast.Name):
                        slots += _slots_of(element.id, value)
    seen: dict[str, int] = {}
    unique = []
    for slot in slots:
        seen[slot.name] = seen.get(slot.name, 0) + 1
        unique.append(slot if seen[slot.name] == 1 else replace(slot, name=f"{slot.name}#{seen[slot.name]}"))
    return unique


def is_scalable(slot: _Slot) -> bool:
    """A size, not structure: ≥ `SCALABLE_MIN` and not named like a kernel, stride, group ..."""
    return slot.value >= SCALABLE_MIN and not STRUCTURAL.search(slot.name.split("[")[0])


def floor_of(slot: _Slot) -> int:
    """The smallest value a constant may be scaled to: 2 for a batch, else min(original, 8)."""
    if _BATCH.match(slot.name.split("[")[0].split("=")[0]):
        return min(slot.value, 2)
    return min(slot.value, SIZE_FLOOR)


def scaled_value(slot: _Slot, halvings: int) -> int:
    """The constant divided by 2**halvings, rounded up, never below its floor.

    A size that is not a multiple of 16 (``dim2 = 4095``: KernelBench's way of testing a kernel's
    boundary masks) keeps its remainder modulo 16, so the variant still has a ragged edge.
    """
    value = -(-slot.value // (1 << halvings))
    remainder = slot.value % SCALABLE_MIN
    if remainder and value > SCALABLE_MIN:
        value = value // SCALABLE_MIN * SCALABLE_MIN + remainder
    return max(floor_of(slot), min(value, slot.value))


def rewrite(source: str, changes: Sequence[SizeChange]) -> str:
    """`source` with the named constants set to their scaled values and the marker line on top."""
    by_name = {slot.name: slot for slot in size_constants(source)}
    missing = [c.name for c in changes if c.name not in by_name or by_name[c.name].value != c.original]
    if missing:
        raise ProblemError(f"the size constants {missing} are not in this source as recorded; "
                           "it changed since its CPU size was chosen")
    data = source.encode("utf-8")
    line_starts = [0]
    for line in data.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def offset(position: tuple[int, int]) -> int:
        return line_starts[position[0] - 1] + position[1]

    edits = sorted(((offset(by_name[c.name].start), offset(by_name[c.name].end), str(c.scaled)) for c in changes),
                   reverse=True)
    for start, end, text in edits:
        data = data[:start] + text.encode() + data[end:]
    summary = ", ".join(f"{c.name} {c.original}->{c.scaled}" for c in changes)
    return f"{SIZE_MARKER} ({summary})\n" + data.decode("utf-8")


def changes_at(source: str, halvings: int) -> tuple[SizeChange, ...]:
    return tuple(SizeChange(s.name, s.value, scaled_value(s, halvings))
                 for s in size_constants(source) if is_scalable(s) and scaled_value(s, halvings) != s.value)


def apply_record(problem: Problem, record: SizingRecord) -> Problem:
    """The problem at the size `record` chose (itself when unchanged)."""
    if record.status != SizingStatus.SCALED:
        return problem
    return replace(problem, source=rewrite(problem.source, record.changes))


# --- choosing the scale -------------------------------------------------------------------------------


def fit_cpu_size(problem: Problem, budget: CpuBudget = CpuBudget(), *, prober: Any = None) -> SizingRecord:
    """Choose the smallest power-of-two scale that brings `problem` within `budget`.

    Each candidate scale is built on the meta device in the audit's probe subprocess (the problem's
    code never runs here). `prober` is a `tritongym.bench.audit.probe._Prober` to reuse across
    problems; a fresh one is made (and closed) when None.
    """
    from tritongym.bench.audit.probe import _Prober

    own = prober is None
    prober = prober or _Prober(int(4 << 30), 60.0, 10.0)
    try:
        return _fit(problem, budget, prober)
    finally:
        if own:
            prober.close()


def _record(problem: Problem, status: SizingStatus, **kwargs: Any) -> SizingRecord:
    return SizingRecord(problem_id=problem.problem_id, name=problem.name, status=status, **kwargs)


def _meta_blind(estimate: Any) -> bool:
    """The meta device could not follow the problem (no meta kernel, ``.item()``), as opposed to a
    forward or a build that was too slow: running it for real may measure it."""
    text = estimate.error or estimate.forward_error
    return bool(text) and "took more than" not in text and "did not finish within" not in text


def _measure(prober: Any, problem: Problem, budget: CpuBudget) -> Any:
    """`problem`'s size estimate: on the meta device, or run for real on the CPU when the meta device
    cannot follow it and its inputs and parameters (when known) are within the hard budget. When the
    real run fails too (over `REAL_PROBE_ALLOWANCE`, too slow), the meta estimate comes back with both
    reasons in its error."""
    from tritongym.bench.audit.probe import meta_estimate

    estimate = meta_estimate(prober, problem)
    if not _meta_blind(estimate):
        return estimate
    if estimate.input_bytes is not None and estimate.input_bytes + (estimate.param_bytes or 0) > budget.hard_bytes:
        return estimate  # too large to run for real here; a smaller scale may be measured
    real = prober.estimate(problem, device="cpu", allowance_bytes=REAL_PROBE_ALLOWANCE)
    if real.error is None and real.forward_error is None:
        return real
    both = (f"{_gist(estimate.error or estimate.forward_error or '')}; run on the CPU instead (at most "
            f"{_mib(REAL_PROBE_ALLOWANCE)} more): {_gist(real.error or real.forward_error or '')}")
    return replace(estimate, error=both) if estimate.error else replace(estimate, forward_error=both)


def _gist(error: str, limit: int = 180) -> str:
    """An error without torch's advice on compilation APIs that follows "no Meta kernel" (it is not ours to give)."""
    return error.split(" You may have run into", 1)[0].strip()[:limit]


def _measured_on(estimate: Any) -> dict[str, Any]:
    return {"measured_on": "cpu"} if estimate.measured_on == "cpu" else {}


def _fit(problem: Problem, budget: CpuBudget, prober: Any) -> SizingRecord:
    estimate = _measure(prober, problem, budget)
    if estimate.error and not _meta_blind(estimate):
        return _record(problem, SizingStatus.CANNOT, reason=f"it does not build on the meta device: {estimate.error}")
    if budget.fits(estimate) and not estimate.forward_error:
        if estimate.measured_on == "cpu":
            return _record(problem, SizingStatus.UNCHANGED, total_bytes=estimate.total_bytes, flops=estimate.flops,
                           measured_on="cpu", reason=f"within the CPU budget at its original size "
                           f"({_small(estimate.total_bytes or 0)}, {(estimate.flops or 0) / 1e9:.2f} GFLOP per "
                           "forward, measured by running it on the CPU: the meta device cannot follow it)")
        return _record(problem, SizingStatus.UNCHANGED, total_bytes=estimate.total_bytes, flops=estimate.flops)
    last = estimate
    measured = estimate.forward_error is None and estimate.error is None  # `last` has a forward peak and FLOPs
    blind = estimate if _meta_blind(estimate) else None  # the meta device's failure, for the reason
    first_blind = blind  # at the original size (the last one tried is `blind`)
    previous: tuple[SizeChange, ...] = ()
    errors: list[str] = []
    fallback: SizingRecord | None = None  # the smallest scale that ran, when it is within the hard limits
    if measured and budget.fits(estimate, hard=True):
        fallback = _record(problem, SizingStatus.UNCHANGED, total_bytes=estimate.total_bytes, flops=estimate.flops,
                           **_measured_on(estimate), reason=f"over the preferred CPU budget at its original size "
                                  f"({_mib(estimate.total_bytes or 0)}, "
                                  f"{(estimate.flops or 0) / 1e9:.2f} GFLOP per forward): slower than most")
    for halvings in range(1, budget.max_halvings + 1):
        changes = changes_at(problem.source, halvings)
        if not changes or changes == previous:
            break  # nothing scalable, or every constant is at its floor already
        previous = changes
        variant = replace(problem, source=rewrite(problem.source, changes))
        estimate = _measure(prober, variant, budget)
        if estimate.error or estimate.forward_error:
            errors.append(estimate.error or estimate.forward_error or "")
            blind = estimate if _meta_blind(estimate) else blind
            first_blind = first_blind or blind
            continue  # a shape check of the problem's own failed at this scale: try the next
        last, measured = estimate, True
        errors = []  # only failures below the smallest scale that ran explain a refusal
        if budget.fits(estimate):
            return _record(problem, SizingStatus.SCALED, changes=changes, halvings=halvings,
                           total_bytes=estimate.total_bytes, flops=estimate.flops, **_measured_on(estimate))
        if budget.fits(estimate, hard=True):
            fallback = _record(problem, SizingStatus.SCALED, changes=changes, halvings=halvings,
                               total_bytes=estimate.total_bytes, flops=estimate.flops, **_measured_on(estimate),
                               reason=f"over the preferred CPU budget with its sizes at their floors "
                                      f"({_mib(estimate.total_bytes or 0)}, {(estimate.flops or 0) / 1e9:.2f} "
                                      "GFLOP per forward): slower than most")
    if fallback is not None:
        return fallback
    if blind is not None and not measured:
        what = (blind.error or blind.forward_error or "")[:400]
        held = (blind.input_bytes or 0) + (blind.param_bytes or 0)
        if blind.input_bytes is not None and held > budget.hard_bytes:
            smallest = "at its smallest scale" if any(is_scalable(s) for s in size_constants(problem.source)) \
                else "(its sizes are not module-level constants that can be scaled)"
            reason = (f"the meta device cannot follow its forward ({_gist(what)}), and its inputs and parameters are "
                      f"{_mib(held)} {smallest}, over the {_mib(budget.hard_bytes)} a CPU run to measure it may hold")
        else:
            first = (first_blind.error or first_blind.forward_error or "") if first_blind is not None else what
            reason = f"the meta device cannot follow it, and running it on the CPU fit at no scale: {first[:400]}"
            smallest = what.rsplit(" more): ", 1)[-1]
            if first_blind is not blind and smallest not in first:
                reason += f"; at the smallest scale tried: {smallest[:200]}"
    elif not any(is_scalable(s) for s in size_constants(problem.source)):
        reason = "its sizes are not module-level constants that can be scaled"
    elif measured and last.total_bytes is not None and errors:
        reason = (f"{_mib(last.total_bytes)} and {(last.flops or 0) / 1e9:.2f} GFLOP per forward at the smallest "
                  f"scale that runs; smaller ones break its own shape rules ({errors[-1][:160]})")
    elif measured and last.total_bytes is not None:
        reason = (f"still over the CPU budget with its size constants at their floors "
                  f"({_mib(last.total_bytes)}, {(last.flops or 0) / 1e9:.2f} GFLOP per forward)")
    else:
        reason = f"its forward cannot be sized on the meta device: {(errors or [last.forward_error or ''])[-1][:200]}"
    return _record(problem, SizingStatus.CANNOT, reason=reason, total_bytes=last.total_bytes, flops=last.flops)


def _mib(n: int) -> str:
    return f"{n / MiB:.0f} MiB" if n < 1 << 30 else f"{n / (1 << 30):.1f} GiB"


def _small(n: int) -> str:
    """Bytes as KiB under a MiB (a problem of a few KB reads as such), else as `_mib`."""
    return f"{n / 1024:.1f} KiB" if n < MiB else _mib(n)


# --- the shipped table and the public entry points ----------------------------------------------------

TABLE_NAME = "cpu_sizes.json"


@functools.lru_cache(maxsize=1)
def shipped_sizes() -> dict[str, SizingRecord]:
    """The precomputed CPU sizes (``tasks/cpu_sizes.json``) by original content hash."""
    entry = resources.files("tritongym.tasks") / TABLE_NAME
    if not entry.is_file():
        return {}
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
        return {key: SizingRecord.from_dict(value) for key, value in data.get("problems", {}).items()}
    except (ValueError, KeyError, TypeError) as exc:
        raise ProblemError(f"tritongym's {TABLE_NAME} is malformed: {exc}") from exc


_computed: dict[str, SizingRecord] = {}


def sizing_records(problems: Iterable[Problem], budget: CpuBudget = CpuBudget()) -> dict[str, SizingRecord]:
    """The CPU-size decision of each problem by content hash (shipped table first, else measured)."""
    problems = list(problems)
    table = shipped_sizes() if budget == CpuBudget() else {}
    records: dict[str, SizingRecord] = {}
    todo = []
    for problem in problems:
        known = table.get(problem.content_hash) or (_computed.get(problem.content_hash)
                                                    if budget == CpuBudget() else None)
        if problem.size == ProblemSize.CPU:
            known = _record(problem, SizingStatus.UNCHANGED)  # already a CPU-size variant
        if known is not None:
            records[problem.content_hash] = replace(known, problem_id=problem.problem_id, name=problem.name)
        else:
            todo.append(problem)
    if todo:
        from tritongym.bench.audit.probe import _Prober

        prober = _Prober(int(4 << 30), 60.0, 10.0)
        try:
            for problem in todo:
                record = _fit(problem, budget, prober)
                records[problem.content_hash] = record
                if budget == CpuBudget():
                    _computed[problem.content_hash] = record
        finally:
            prober.close()
    return records


@dataclass
class SizedProblems:
    """Problems at the chosen size, the records behind them, and those without a CPU size."""

    size: ProblemSize
    problems: list[Problem] = field(default_factory=list)
    records: dict[str, SizingRecord] = field(default_factory=dict)  # by the *original* problem id
    refused: list[tuple[Problem, str]] = field(default_factory=list)


def parse_size(text: str | ProblemSize | None) -> ProblemSize | None:
    if text is None or isinstance(text, ProblemSize):
        return text
    try:
        return ProblemSize(text)
    except ValueError:
        raise OptionsError(f"size must be 'original' or 'cpu', got {text!r}") from None


def at_size(problems: Sequence[Problem], size: ProblemSize | str) -> SizedProblems:
    """`problems` at `size`: unchanged for ``original``; for ``cpu`` each one's CPU-size variant.

    A problem that has no CPU size is left out of `problems` and listed in `refused` with why.
    """
    size = parse_size(size) or ProblemSize.ORIGINAL
    result = SizedProblems(size=size)
    if size == ProblemSize.ORIGINAL:
        result.problems = list(problems)
        return result
    records = sizing_records(problems)
    for problem in problems:
        record = records[problem.content_hash]
        result.records[problem.problem_id] = record
        if record.status == SizingStatus.CANNOT:
            result.refused.append((problem, record.describe()))
        else:
            result.problems.append(apply_record(problem, record))
    return result


def cpu_variant(problem: Problem) -> Problem:
    """The CPU-size variant of one problem (itself when already small); ProblemError when none exists."""
    sized = at_size([problem], ProblemSize.CPU)
    if sized.refused:
        raise ProblemError(f"{problem.problem_id} has {sized.refused[0][1]}")
    return sized.problems[0]


def known_cpu_variant(problem: Problem) -> Problem | None:
    """The CPU-size variant of `problem` when it is known without running the problem's code.

    Known: a CPU-size variant is its own (its marker line), and the problems in the shipped
    table (KernelBench's 250 and the built-in suite, by content hash) have their recorded
    decision. Returns None for any other problem (sizing it needs the probe, which runs its code:
    `cpu_variant`), raises `ProblemError` with the reason for a problem known to have no CPU size.
    A service uses this for problems clients send: their code never runs outside the sandbox.
    """
    if problem.size == ProblemSize.CPU:
        return problem
    record = shipped_sizes().get(problem.content_hash)
    if record is None:
        return None
    if record.status == SizingStatus.CANNOT:
        raise ProblemError(f"{problem.problem_id} has {record.describe()}")
    return apply_record(problem, record)


def write_table(records: dict[str, SizingRecord], path: str | Path, budget: CpuBudget = CpuBudget(),
                extra: dict[str, dict[str, Any]] | None = None) -> None:
    """Write ``cpu_sizes.json`` (records by original content hash; `extra` adds per-hash fields)."""
    problems = {}
    for key, record in sorted(records.items(), key=lambda kv: kv[1].problem_id):
        problems[key] = {**record.to_dict(), **(extra or {}).get(key, {})}
    data = {"budget": {"max_bytes": budget.max_bytes, "max_flops": budget.max_flops}, "problems": problems}
    Path(path).write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
