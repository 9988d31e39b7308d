"""Auditing one problem, and a problem set, in the evaluator's reference worker."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import torch

from tritongym.bench.audit.model import (
    _CHUNK,
    HONEST_MARGIN,
    SIGNAL_THRESHOLD,
    AuditFlag,
    AuditStats,
    AuditStatus,
    GiB,
    ProblemAudit,
    SizeEstimate,
    ToleranceOverride,
)
from tritongym.bench.audit.probe import estimate_sizes
from tritongym.bench.audit.tolerance import (
    _combine,
    _leaves,
    _max_abs,
    max_excess,
    recommend_tolerance,
    tolerance_grid,
)
from tritongym.errors import OptionsError, ProblemError
from tritongym.evaluator.reference import ReferenceOverMemory, ReferenceRunner
from tritongym.tasks.problem import Problem


class _SkipProblem(Exception):
    """The problem is over a budget; the message is the reason."""


def _classify(exc: ProblemError) -> tuple[AuditStatus, str]:
    text = str(exc)
    if isinstance(exc.__cause__, TimeoutError):
        return AuditStatus.SKIPPED, text.splitlines()[0]
    memory = ("can't allocate memory", "MemoryError", "out of memory", "killed by SIGKILL", "std::bad_alloc",
              "exceeds the limit of")
    evidence = [line for line in text.splitlines() if any(marker in line for marker in memory)]
    if evidence:
        return AuditStatus.SKIPPED, f"over the memory budget when run: {evidence[0].strip()[:300]}"
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return AuditStatus.FAILED, " | ".join(lines[-3:])[:600]


class _Trials:
    """Collects one problem's outputs and scores the trivial predictors as the trials arrive."""

    def __init__(self, tolerance: tuple[float, float]) -> None:
        self.atol, self.rtol = tolerance
        self.atols, self.rtols = tolerance_grid(tolerance)
        self.outputs: list[list[torch.Tensor]] = []
        self.finite = True
        self.max_abs = 0.0
        self.abs_sum = 0.0
        self.abs_count = 0
        self.passes: dict[str, int] = {}
        self.excess: dict[str, list[list[float]]] = {}  # predictor → per seed (only where it passed)
        self.passthrough_seed: dict[int, int] = {}  # input index → a seed index where it passed

    def _score(self, name: str, excess: Callable[[Sequence[float]], list[float]]) -> bool:
        """Count a pass of predictor `name` at the tolerance; keep its excess over the grid if it passed."""
        self.passes.setdefault(name, 0)
        if excess([self.rtol])[0] > self.atol:
            return False  # fails here, so at every smaller tolerance too: the grid is not needed
        self.passes[name] += 1
        self.excess.setdefault(name, []).append(excess(self.rtols))
        return True

    def add(self, expected: Any, inputs: list[Any], finite: bool) -> None:
        leaves = [leaf.detach() for leaf in _leaves(expected)]
        self.finite &= finite
        peak = _max_abs(leaves)
        self.max_abs = max(self.max_abs, peak)
        for leaf in leaves:
            self.abs_sum += float(leaf.abs().sum(dtype=torch.float64))
            self.abs_count += leaf.numel()

        def zeros(rtols: Sequence[float]) -> list[float]:
            if math.isfinite(peak) and all(leaf.dtype.is_floating_point for leaf in leaves):
                # |0 − e| − r·|e| = (1 − r)·|e|: largest where |e| is.
                return [(1 - r) * peak for r in rtols]
            return _combine((max_excess(0.0, leaf, rtols) for leaf in leaves), len(rtols))

        self._score("zeros", zeros)
        if leaves and all(leaf.dtype.is_floating_point and leaf.numel() > 1 for leaf in leaves):
            means = [_finite_mean(leaf) for leaf in leaves]
            self._score("constant", lambda rtols: _combine(
                (max_excess(m, leaf, rtols) for m, leaf in zip(means, leaves, strict=True)), len(rtols)))
        if len(leaves) == 1:
            for index, tensor in enumerate(_leaves(inputs)):
                if tensor.shape == leaves[0].shape and tensor.dtype == leaves[0].dtype:
                    if self._score(f"input {index}", lambda rtols, t=tensor: max_excess(t, leaves[0], rtols)):
                        self.passthrough_seed.setdefault(index, len(self.outputs))
        self.outputs.append(leaves)

    def score_seed_means(self) -> None:
        """The per-element mean of the *other* seeds' outputs as a predictor of each seed."""
        n = len(self.outputs)
        if n < 2:
            return
        sums = [self._chunked_sum(k) for k in range(len(self.outputs[0]))]
        for outputs in self.outputs:
            def excess(rtols: Sequence[float], outputs: list[torch.Tensor] = outputs) -> list[float]:
                per_leaf = []
                for k, leaf in enumerate(outputs):
                    def others(start: int, stop: int, k: int = k, leaf: torch.Tensor = leaf) -> torch.Tensor:
                        own = leaf.reshape(-1)[start:stop].to(torch.float64)
                        return (sums[k].reshape(-1)[start:stop] - own) / (n - 1)

                    per_leaf.append(max_excess(others, leaf, rtols))
                return _combine(per_leaf, len(rtols))

            self._score("mean of other seeds", excess)

    def _chunked_sum(self, k: int) -> torch.Tensor:
        total = torch.zeros(self.outputs[0][k].shape, dtype=torch.float64)
        for outputs in self.outputs:
            flat = total.reshape(-1)
            source = outputs[k].reshape(-1)
            for start in range(0, flat.numel(), _CHUNK):
                flat[start:start + _CHUNK] += source[start:start + _CHUNK].to(torch.float64)
        return total

    def spread(self) -> tuple[float | None, float | None, float | None]:
        """(max, mean, fraction < SIGNAL_THRESHOLD) of the per-element std across seeds."""
        if len(self.outputs) < 2:
            return None, None, None
        worst, total, below, count = 0.0, 0.0, 0, 0
        for k in range(len(self.outputs[0])):
            flats = [o[k].reshape(-1) for o in self.outputs]
            for start in range(0, flats[0].numel(), _CHUNK):
                stack = torch.stack([f[start:start + _CHUNK].to(torch.float64) for f in flats])
                std = stack.std(dim=0)
                std = torch.where(torch.isnan(std), torch.full_like(std, math.inf), std)
                finite = std[torch.isfinite(std)]
                worst = max(worst, float(std.max()))
                total += float(finite.sum())
                below += int((std < SIGNAL_THRESHOLD).sum())
                count += std.numel()
        if count == 0:
            return None, None, None
        return worst, total / count, below / count

    def compare(self, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], scale: float = 1.0,
                ) -> tuple[float, bool]:
        """(max |a − b|, whether `a` passes against `b` at tolerance/scale)."""
        if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
            return math.inf, False
        rtols = [0.0, self.rtol / scale]
        diff, excess = _combine((max_excess(x, y, rtols) for x, y in zip(a, b, strict=True)), 2)
        return max(diff, 0.0), excess <= self.atol / scale


def _finite_mean(leaf: torch.Tensor) -> float:
    mean = float(leaf.mean(dtype=torch.float64))
    if math.isfinite(mean):
        return mean
    values = leaf.to(torch.float64)
    values = values[torch.isfinite(values)]
    return float(values.mean()) if values.numel() else 0.0


def _estimate_one(problem: Problem) -> SizeEstimate:
    return estimate_sizes([problem])[problem.content_hash]


def _cpu_gflops() -> float:
    """Best-of-3 float32 1024³ matmul rate of this process, a ceiling for any forward's FLOP rate."""
    a = torch.randn(1024, 1024)
    best = 0.0
    for _ in range(3):
        started = time.perf_counter()
        torch.mm(a, a)
        best = max(best, 2 * 1024 ** 3 / (time.perf_counter() - started) / 1e9)
    return best


def audit_problem(
    problem: Problem,
    *,
    device: str = "cpu",
    input_seeds: int = 5,
    weight_seeds: int = 3,
    tolerance: tuple[float, float] = (1e-2, 1e-2),
    memory_budget_gb: float = 1.5,
    time_budget_s: float = 5.0,
    worker_memory_gb: float | None = None,
    estimate: SizeEstimate | None = None,
    cpu_gflops: float | None = None,
    seed: int = 0,
) -> ProblemAudit:
    """Audit one problem (definitions in `AuditFlag`; module docstring for the sources).

    Args:
        problem: the problem; its code runs only in a `ReferenceRunner` worker.
        device: ``cpu`` or ``cuda`` (where the reference runs).
        input_seeds: input seeds (``get_inputs()`` draws) under the first weight seed; ≥ 2.
        weight_seeds: weight seeds (model builds) compared on the first input seed; ≥ 1.
        tolerance: ``(atol, rtol)`` of the evaluator's per-element check (default: the
            ``kernelbench`` preset, 1e-2 both).
        memory_budget_gb: skip when inputs + parameters + max(outputs, forward peak), measured on
            the meta device, exceed this many GiB.
        time_budget_s: skip when the first trial takes longer; on the CPU also when the FLOPs
            alone would need more than twice this at the machine's measured matmul rate.
        worker_memory_gb: address-space cap of the reference worker on the CPU (default
            3 + 6 × `memory_budget_gb`); running out counts as over budget.
        estimate: sizes from `estimate_sizes` (measured here when None).
        cpu_gflops: the matmul rate for the FLOP pre-check (measured when None).
        seed: shifts every seed; the audit is deterministic for a given value.

    Returns:
        The `ProblemAudit`. Never raises for a problem's own failure (status ``failed``).

    Raises:
        OptionsError: invalid arguments.
        EvaluatorError: a worker could not be started.
    """
    _check_options(device, input_seeds, weight_seeds, tolerance, memory_budget_gb, time_budget_s)
    started = time.monotonic()
    if estimate is None:
        estimate = _estimate_one(problem)

    def result(status: AuditStatus, reason: str | None = None, **kwargs: Any) -> ProblemAudit:
        return ProblemAudit(problem_id=problem.problem_id, name=problem.name, level=problem.level,
                            content_hash=problem.content_hash, status=status, reason=reason,
                            estimate=estimate, seconds=round(time.monotonic() - started, 2), **kwargs)

    total = estimate.total_bytes
    if total is not None and total > memory_budget_gb * GiB:
        return result(AuditStatus.SKIPPED, f"inputs + parameters + outputs/intermediates ≈ {_gib(total)} > "
                                           f"the {memory_budget_gb:g} GiB memory budget")
    if device == "cpu" and estimate.flops:
        rate = cpu_gflops if cpu_gflops is not None else _cpu_gflops()
        needed = estimate.flops / (rate * 1e9)
        if needed > 2 * time_budget_s:
            return result(AuditStatus.SKIPPED,
                          f"{estimate.flops / 1e9:.0f} GFLOP per forward needs ≥ {needed:.0f} s at this "
                          f"CPU's {rate:.0f} GFLOP/s (time budget {time_budget_s:g} s)")
    cap = None if device != "cpu" else int((worker_memory_gb or 3 + 6 * memory_budget_gb) * GiB)
    try:
        with ReferenceRunner(problem, device=device, timeout=max(60.0, 5 * time_budget_s),
                             memory_limit_bytes=cap) as runner:
            stats, flags, override, note = _run(runner, estimate, input_seeds=input_seeds,
                                                weight_seeds=weight_seeds, tolerance=tolerance,
                                                time_budget_s=time_budget_s, seed=seed)
    except _SkipProblem as exc:
        return result(AuditStatus.SKIPPED, str(exc))
    except ProblemError as exc:
        status, reason = _classify(exc)
        return result(status, reason)
    return result(AuditStatus.AUDITED, flags=flags, stats=stats, override=override, override_note=note)


def _run(runner: ReferenceRunner, estimate: SizeEstimate, *, input_seeds: int, weight_seeds: int,
         tolerance: tuple[float, float], time_budget_s: float, seed: int,
         ) -> tuple[AuditStats, tuple[AuditFlag, ...], ToleranceOverride | None, str | None]:
    seeds = [seed * 1000 + 1 + i for i in range(input_seeds)]
    weights = [seed * 1000 + 500 + j for j in range(weight_seeds)]
    runner.setup(weights[0])
    runner.timeout = time_budget_s
    first_started = time.monotonic()
    try:
        trial = runner.trial(seeds[0])
    except ProblemError as exc:
        if isinstance(exc.__cause__, TimeoutError):
            raise _SkipProblem(f"the first trial took longer than the {time_budget_s:g} s time budget"
                               ) from exc
        raise
    first_s = time.monotonic() - first_started
    runner.timeout = max(30.0, 10 * first_s + 10)
    trials = _Trials(tolerance)
    trials.add(trial.expected, trial.inputs, trial.finite)
    del trial
    for s in seeds[1:]:
        trial = runner.trial(s)
        trials.add(trial.expected, trial.inputs, trial.finite)
        del trial
    trials.score_seed_means()

    repeat = _leaves(runner.trial(seeds[0]).expected)
    repeat_diff, deterministic = trials.compare(repeat, trials.outputs[0], scale=HONEST_MARGIN)
    del repeat

    negated_passthrough = None
    if trials.passthrough_seed:
        index, seed_index = next(iter(sorted(trials.passthrough_seed.items())))
        negated = runner.trial(seeds[seed_index], family="negated")
        if negated.finite:
            output = _leaves(negated.expected)
            inputs = _leaves(negated.inputs)
            negated_passthrough = trials.compare([inputs[index]], output)[1]

    # Only a model with parameters can be insensitive to them; with an unknown count (the meta
    # build failed) the difference is measured but not flagged.
    weight_diff = None
    weight_insensitive = False
    if len(weights) > 1 and estimate.float_params != 0:
        weight_diff, weight_insensitive = 0.0, True
        for w in weights[1:]:
            runner.setup(w)
            other = runner.trial(seeds[0])
            leaves = _leaves(other.expected)
            trials.max_abs = max(trials.max_abs, _max_abs(leaves))
            diff, within = trials.compare(leaves, trials.outputs[0])
            weight_diff = max(weight_diff, diff)
            weight_insensitive &= within

    max_std, mean_std, below = trials.spread()
    across_inputs = [trials.compare(o, trials.outputs[0]) for o in trials.outputs[1:]]
    input_diff = max((diff for diff, _ in across_inputs), default=None)
    input_insensitive = all(within for _, within in across_inputs)

    flags: list[AuditFlag] = []
    if trials.max_abs < SIGNAL_THRESHOLD:
        flags.append(AuditFlag.NEAR_ZERO_OUTPUT)
    if max_std is not None and max_std < SIGNAL_THRESHOLD:
        flags.append(AuditFlag.NEAR_CONSTANT_OUTPUT)
    if len(trials.outputs) > 1 and input_insensitive:
        flags.append(AuditFlag.INPUT_INSENSITIVE)
    if weight_diff is not None and weight_insensitive and estimate.float_params:
        flags.append(AuditFlag.WEIGHT_INSENSITIVE)
    passed = {name for name, count in trials.passes.items() if count}
    for flag, names in ((AuditFlag.ZEROS_PASS, {"zeros"}), (AuditFlag.CONSTANT_PASS, {"constant"}),
                        (AuditFlag.MEAN_OUTPUT_PASS, {"mean of other seeds"})):
        if passed & names:
            flags.append(flag)
    if any(name.startswith("input ") for name in passed):
        flags.append(AuditFlag.PASSTHROUGH_PASS)
        if negated_passthrough is False:
            flags.append(AuditFlag.IDENTITY_ON_TASK_INPUTS)
    if not deterministic:
        flags.append(AuditFlag.NONDETERMINISTIC_REFERENCE)
    if not trials.finite:
        flags.append(AuditFlag.NON_FINITE_OUTPUT)

    override, note, reference_error = None, None, None
    if passed:
        reference_excess, reference_error = _reference_excess(runner, weights[0], seeds, trials)
        override, note = recommend_tolerance(trials.excess, reference_excess, tolerance=tolerance)
    elif flags:
        note = ("no trivial output passes the default tolerance; a tolerance change would not address "
                "these flags")

    stats = AuditStats(
        input_seeds=len(seeds), weight_seeds=len(weights),
        output_shapes=tuple(tuple(int(d) for d in leaf.shape) for leaf in trials.outputs[0]),
        first_trial_s=round(first_s, 3), max_abs_output=_finite_or_none(trials.max_abs),
        mean_abs_output=trials.abs_sum / trials.abs_count if trials.abs_count else 0.0,
        max_std_across_inputs=_finite_or_none(max_std), mean_std_across_inputs=_finite_or_none(mean_std),
        fraction_std_below=below, input_seed_max_diff=input_diff, weight_seed_max_diff=weight_diff,
        repeat_max_diff=repeat_diff, trivial_passes=dict(sorted(trials.passes.items())),
        negated_passthrough=negated_passthrough, reference_rel_error=reference_error,
    )
    return stats, tuple(flags), override, note


def _reference_excess(runner: ReferenceRunner, weight: int, seeds: Sequence[int], trials: _Trials,
                      ) -> tuple[list[list[float]] | None, float | None]:
    """The float32 reference against its float64 truth on every input seed (rebuilt at `weight`)."""
    runner.setup(weight)
    rtols = [r / HONEST_MARGIN for r in trials.rtols]
    excess, worst = [], 0.0
    for s in seeds:
        try:
            trial = runner.trial(s, truth=True)
        except ReferenceOverMemory:
            # The float64 run needs more than the audit's worker cap (an evaluation refuses such a
            # problem; the audit still reports what the float32 trials showed): no excess figure.
            return None, None
        if trial.truth is None:
            return None, None
        expected, truth = _leaves(trial.expected), _leaves(trial.truth)
        pairs = list(zip(expected, truth, strict=True))
        excess.append(_combine((max_excess(e, t, rtols) for e, t in pairs), len(rtols)))
        num = sum(float(((e.to(torch.float64) - t.to(torch.float64)) ** 2).nansum()) for e, t in pairs)
        den = sum(float((t.to(torch.float64) ** 2).nansum()) for t in truth)
        worst = max(worst, (num / den) ** 0.5 if den else (0.0 if num == 0 else math.inf))
    return excess, _finite_or_none(worst)


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 100 else f"{n / (1 << 20):.1f} MiB"


def _check_options(device: str, input_seeds: int, weight_seeds: int, tolerance: tuple[float, float],
                   memory_budget_gb: float, time_budget_s: float) -> None:
    if device not in ("cpu", "cuda"):
        raise OptionsError(f"device must be cpu or cuda, got {device!r}")
    if not isinstance(input_seeds, int) or input_seeds < 2:
        raise OptionsError(f"input_seeds must be an integer >= 2 (the std across seeds needs two), "
                           f"got {input_seeds!r}")
    if not isinstance(weight_seeds, int) or weight_seeds < 1:
        raise OptionsError(f"weight_seeds must be an integer >= 1, got {weight_seeds!r}")
    if len(tolerance) != 2 or not all(isinstance(t, (int, float)) and t > 0 for t in tolerance):
        raise OptionsError(f"tolerance must be (atol, rtol), both > 0, got {tolerance!r}")
    for name, value in (("memory_budget_gb", memory_budget_gb), ("time_budget_s", time_budget_s)):
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise OptionsError(f"{name} must be a positive number, got {value!r}")


def audit_problems(
    problems: Sequence[Problem],
    *,
    progress: TextIO | None = sys.stderr,
    on_audit: Callable[[ProblemAudit], None] | None = None,
    workers: int = 1,
    **options: Any,
) -> list[ProblemAudit]:
    """Audit every problem (keyword `options` as for `audit_problem`), one progress line each.

    Sizes are estimated first for all problems in one probe process, then each problem is
    audited in its own reference worker, `workers` of them at once (each a separate process, so
    threads here only wait on them). Results come back in the problems' order; `on_audit` is
    called as each audit completes.
    """
    _check_options(options.get("device", "cpu"), options.get("input_seeds", 5),
                   options.get("weight_seeds", 3), options.get("tolerance", (1e-2, 1e-2)),
                   options.get("memory_budget_gb", 1.5), options.get("time_budget_s", 5.0))
    if not isinstance(workers, int) or workers < 1:
        raise OptionsError(f"workers must be an integer >= 1, got {workers!r}")
    started = time.monotonic()
    if progress is not None:
        print(f"audit: estimating sizes of {len(problems)} problems on the meta device", file=progress,
              flush=True)
    estimates = estimate_sizes(problems)
    if options.get("device", "cpu") == "cpu" and "cpu_gflops" not in options:
        options["cpu_gflops"] = _cpu_gflops()
    done = 0
    lock = threading.Lock()

    def one(problem: Problem) -> ProblemAudit:
        nonlocal done
        audit = audit_problem(problem, estimate=estimates[problem.content_hash], **options)
        with lock:
            done += 1
            if on_audit is not None:
                on_audit(audit)
            if progress is not None:
                if audit.status == AuditStatus.AUDITED:
                    detail = ", ".join(f.value for f in audit.flags) or "no flags"
                else:
                    detail = audit.reason
                print(f"[{done}/{len(problems)} {time.monotonic() - started:5.0f}s] {problem.problem_id} "
                      f"{problem.name}: {audit.status.value} ({audit.seconds:.1f}s) {detail}", file=progress,
                      flush=True)
        return audit

    if workers == 1:
        return [one(problem) for problem in problems]
    with ThreadPoolExecutor(max_workers=workers) as executor:
        return list(executor.map(one, problems))
