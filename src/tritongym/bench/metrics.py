"""Benchmark metrics over agent trajectories: definitions first, then the code.

The unit is a *task* (a problem). A task with several samples contributes the mean of its
samples' values, so every task weighs the same; confidence intervals resample tasks.

* **correctness rate**: the fraction of tasks whose final kernel is correct (status ``ok``).
* **fast_p** (KernelBench, ``scripts/score.py`` / PR #24): the fraction of **all** tasks whose
  final kernel is correct **and** has speedup **> p** (strict); incorrect kernels count as
  failures, never as speedup 0 in an average. Reported for p ∈ {0, 1, 1.2, 1.5, 2} against the
  eager PyTorch reference (``speedup``) and, when measured, against ``torch.compile``
  (``speedup_vs_compile``; or ``speedup`` itself when the run used ``baseline="compile"``).
  Dr.Kernel reports ``Fast@p`` with ≥ instead of >; see docs/environment.md.
* **geometric-mean speedup** over correct tasks: exp(mean(log speedup)) over the correct
  trajectories with a measured speedup (KernelBench's ``geometric_mean_speed_ratio_correct_only``).
* **95 % confidence intervals**: percentile bootstrap over tasks (2,000 resamples, fixed seed).
* **final kernel**: the best turn of a trajectory (highest reward, earliest on ties); when the
  run re-checked it, the fresh re-check's figures, with the selection-time figures kept beside.
* **per-turn** rates use the turns with that index; **best-by-turn k** uses the best of the first
  k + 1 turns of every trajectory (Dr.Kernel's ``best_by_turn``), so it never decreases.
* **void-turn rate** at turn t: replies without code / turns at t. **violation rate** at t:
  evaluated turns at t with status ``integrity_violation`` / evaluated turns at t.
* **per level** (KernelBench's per-level tables): correctness, fast_p and the geometric mean over
  the tasks of each level (a trajectory's ``level``; problems without one are grouped as None).

A ``tritongym run --run-dir`` folder holds single-turn trajectories (``mode`` ``run``: one
evaluation per sample, `tritongym.bench.run_folder`), so the same definitions apply to it.

Speedups are null on a CPU (the Triton interpreter says nothing about GPU speed); every
speed metric is then None and reports say the run measured correctness only.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

FAST_P_THRESHOLDS = (0.0, 1.0, 1.2, 1.5, 2.0)
BOOTSTRAP_RESAMPLES = 2000


def fast_p(correct: Sequence[bool], speedup: Sequence[float | None], p: float) -> float | None:
    """Fraction of all items that are correct with speedup > p; None when no speedup was measured."""
    if len(correct) != len(speedup):
        raise ValueError("correct and speedup must have the same length")
    if not correct or all(s is None for s in speedup):
        return None
    hits = sum(1 for c, s in zip(correct, speedup, strict=True) if c and s is not None and s > p)
    return hits / len(correct)


def geometric_mean(values: Iterable[float]) -> float | None:
    """exp(mean(log v)) over positive values; None when there are none."""
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def bootstrap_ci(groups: Sequence[Sequence[Any]], statistic: Callable[[list[Any]], float | None], *,
                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0, confidence: float = 0.95
                 ) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `statistic` over `groups` (one group per task, resampled whole).

    `statistic` receives the concatenated items of the resampled groups; resamples where it is
    None are skipped. Returns None when fewer than two groups exist or every resample was None.
    """
    if len(groups) < 2:
        return None
    rng = random.Random(seed)
    values = []
    for _ in range(resamples):
        items: list[Any] = []
        for _ in range(len(groups)):
            items.extend(groups[rng.randrange(len(groups))])
        value = statistic(items)
        if value is not None:
            values.append(value)
    if not values:
        return None
    values.sort()
    low = values[int(math.floor((1 - confidence) / 2 * (len(values) - 1)))]
    high = values[int(math.ceil((1 + confidence) / 2 * (len(values) - 1)))]
    return (low, high)


def task_mean(groups: Sequence[Sequence[float]]) -> float | None:
    """Mean over tasks of the mean over each task's samples."""
    means = [sum(g) / len(g) for g in groups if g]
    return sum(means) / len(means) if means else None


# -- per-trajectory figures ---------------------------------------------------------------------


def _result_figures(result: dict[str, Any] | None) -> dict[str, Any]:
    result = result or {}
    return {"correct": bool(result.get("correct", result.get("status") == "ok")),
            "speedup": result.get("speedup"), "speedup_vs_compile": result.get("speedup_vs_compile"),
            "status": result.get("status", "void")}


def final_figures(trajectory: dict[str, Any]) -> dict[str, Any]:
    """Correctness and speedups of a trajectory's final kernel (re-check figures when present)."""
    best = trajectory.get("best_turn")
    turns = {t["turn"]: t for t in trajectory["turns"]}
    if best is None or best not in turns:
        return {"correct": False, "speedup": None, "speedup_vs_compile": None, "status": "void", "source": "none"}
    recheck = trajectory.get("recheck")
    if recheck is not None:
        figures = _result_figures(recheck.get("result") or recheck)
        figures["source"] = "recheck"
        return figures
    figures = _result_figures(turns[best].get("result"))
    figures["source"] = "selection"
    return figures


def selection_figures(trajectory: dict[str, Any]) -> dict[str, Any]:
    """Figures of the best turn as measured when it was selected."""
    best = trajectory.get("best_turn")
    for turn in trajectory["turns"]:
        if turn["turn"] == best:
            return _result_figures(turn.get("result"))
    return {"correct": False, "speedup": None, "speedup_vs_compile": None, "status": "void"}


def _by_task(trajectories: Sequence[dict[str, Any]], value: Callable[[dict[str, Any]], Any]) -> list[list[Any]]:
    groups: dict[str, list[Any]] = defaultdict(list)
    for traj in trajectories:
        groups[traj["problem_id"]].append(value(traj))
    return [groups[k] for k in sorted(groups)]


def _rate_stat(items: list[Any]) -> float | None:
    return sum(items) / len(items) if items else None


def _speed_metrics(groups: list[list[dict[str, Any]]], key: str, bootstrap: bool) -> dict[str, Any] | None:
    """fast_p and geomean over per-task groups of final figures, with task-bootstrap CIs."""
    flat = [f for g in groups for f in g]
    if all(f[key] is None for f in flat):
        return None
    out: dict[str, Any] = {"fast_p": {}}
    for p in FAST_P_THRESHOLDS:
        values = [[1.0 if f["correct"] and f[key] is not None and f[key] > p else 0.0 for f in g] for g in groups]
        out["fast_p"][f"{p:g}"] = {"value": task_mean(values),
                                   "ci95": bootstrap_ci(values, _rate_stat) if bootstrap else None}

    def geo(items: list[dict[str, Any]]) -> float | None:
        return geometric_mean(f[key] for f in items if f["correct"] and f[key] is not None)

    out["geomean_speedup_correct"] = {"value": geo(flat), "ci95": bootstrap_ci(groups, geo) if bootstrap else None,
                                      "n": sum(1 for f in flat if f["correct"] and f[key] is not None)}
    return out


def speedup_baseline(trajectories: Sequence[dict[str, Any]]) -> str:
    """What ``speedup`` is measured against in a run: ``eager`` (default), or ``compile`` when the
    evaluator ran with ``baseline="compile"`` (read from the provenance's evaluator options)."""
    for traj in trajectories:
        options = (traj.get("provenance") or {}).get("evaluator_options") or {}
        if options.get("baseline"):
            return "compile" if options["baseline"] == "compile" else "eager"
    return "eager"


def summarize(trajectories: Sequence[dict[str, Any]], *, bootstrap: bool = True) -> dict[str, Any]:
    """Every metric of a run (see the module docstring), JSON-ready."""
    trajectories = list(trajectories)
    finals = _by_task(trajectories, final_figures)
    correct_groups = [[1.0 if f["correct"] else 0.0 for f in g] for g in finals]
    summary: dict[str, Any] = {
        "tasks": len(finals), "trajectories": len(trajectories),
        "samples_per_task": sorted({len(g) for g in finals}),
        "correctness": {"value": task_mean(correct_groups),
                        "ci95": bootstrap_ci(correct_groups, _rate_stat) if bootstrap else None},
        "speed_measured": any(f["speedup"] is not None for g in finals for f in g),
        "baseline": speedup_baseline(trajectories),
    }
    if summary["baseline"] == "compile":  # `speedup` itself is against torch.compile(Model)
        summary["vs_eager"] = None
        summary["vs_compile"] = _speed_metrics(finals, "speedup", bootstrap)
    else:
        summary["vs_eager"] = _speed_metrics(finals, "speedup", bootstrap)
        summary["vs_compile"] = _speed_metrics(finals, "speedup_vs_compile", bootstrap)
    summary["per_level"] = per_level(trajectories, summary["baseline"])
    summary["kind"] = run_kind(trajectories)
    summary["per_turn"] = per_turn(trajectories)
    summary["winners_curse"] = winners_curse(trajectories)
    summary["violation_codes"] = violation_codes(trajectories)
    summary["per_task"] = per_task(trajectories)
    return summary


def run_kind(trajectories: Sequence[dict[str, Any]]) -> str:
    """``run`` when every trajectory is one evaluation of a solution file (``tritongym run --run-dir``),
    else ``agent`` (a model's turns: the agent runner or a trainer)."""
    return "run" if trajectories and all(t.get("mode") == "run" for t in trajectories) else "agent"


def per_level(trajectories: Sequence[dict[str, Any]], baseline: str = "eager") -> list[dict[str, Any]]:
    """Per level, in level order: tasks, samples, correctness, and fast_p and the geomean speedup
    against eager and ``torch.compile`` where timed (no bootstrap: a level is a slice of the run)."""
    by_level: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for traj in trajectories:
        by_level[traj.get("level")].append(traj)
    rows = []
    for level in sorted(by_level, key=lambda v: (v is None, v if v is not None else 0)):
        finals = _by_task(by_level[level], final_figures)
        if baseline == "compile":
            vs_eager, vs_compile = None, _speed_metrics(finals, "speedup", False)
        else:
            vs_eager = _speed_metrics(finals, "speedup", False)
            vs_compile = _speed_metrics(finals, "speedup_vs_compile", False)
        rows.append({"level": level, "tasks": len(finals), "samples": sum(len(g) for g in finals),
                     "correctness": task_mean([[1.0 if f["correct"] else 0.0 for f in g] for g in finals]),
                     "vs_eager": vs_eager, "vs_compile": vs_compile})
    return rows


def violation_codes(trajectories: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many evaluated turns carried each violation code, most frequent first."""
    counts: dict[str, int] = defaultdict(int)
    for traj in trajectories:
        for turn in traj["turns"]:
            for code in {v["code"] for v in (turn.get("result") or {}).get("violations", [])}:
                counts[code] += 1
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def problem_names(trajectories: Sequence[dict[str, Any]]) -> dict[str, str | None]:
    """Each task's problem name (``19_ReLU`` for ``kernelbench/level1/19``) by problem id."""
    names: dict[str, str | None] = {}
    for traj in trajectories:
        if names.get(traj["problem_id"]) is None:
            names[traj["problem_id"]] = traj.get("problem")
    return names


def per_task(trajectories: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task: its name, samples, correct final kernels, and the best final speedup among them."""
    names = problem_names(trajectories)
    rows = []
    for key, groups in zip(*_keyed(trajectories), strict=True):
        speeds = [f["speedup"] for f in groups if f["correct"] and f["speedup"] is not None]
        rows.append({"problem_id": key, "name": names.get(key), "samples": len(groups),
                     "correct": sum(f["correct"] for f in groups),
                     "best_speedup": max(speeds) if speeds else None,
                     "rechecked": sum(1 for f in groups if f.get("source") == "recheck")})
    return rows


def per_turn(trajectories: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per turn index t: correctness, fast_1.2, void and violation rates and tokens at t, and the
    best-by-turn correctness and fast_1.2 over the first t + 1 turns (over all trajectories)."""
    trajectories = list(trajectories)
    if not trajectories:
        return []
    horizon = max(len(t["turns"]) for t in trajectories)
    rows = []
    for t in range(horizon):
        at_t = [traj["turns"][t] for traj in trajectories if len(traj["turns"]) > t]
        evaluated = [turn for turn in at_t if turn.get("code") is not None]
        figures = [_result_figures(turn.get("result")) for turn in at_t]
        # Best of the first t+1 turns; a trajectory that ended earlier keeps its best.
        best_groups: dict[str, list[tuple[bool, float | None]]] = defaultdict(list)
        for traj in trajectories:
            window = [_result_figures(turn.get("result")) for turn in traj["turns"][: t + 1]]
            correct = [f for f in window if f["correct"]]
            speed = max((f["speedup"] for f in correct if f["speedup"] is not None), default=None)
            best_groups[traj["problem_id"]].append((bool(correct), speed))
        groups = [best_groups[k] for k in sorted(best_groups)]
        speed_measured = any(s is not None for g in groups for _, s in g)
        prompt = [turn["usage"]["prompt_tokens"] for turn in at_t if (turn.get("usage") or {}).get("prompt_tokens")]
        completion = [turn["usage"]["completion_tokens"] for turn in at_t
                      if (turn.get("usage") or {}).get("completion_tokens")]
        rows.append({
            "turn": t, "n": len(at_t),
            "correct_rate": sum(f["correct"] for f in figures) / len(at_t),
            "fast_1.2": (sum(1 for f in figures if f["correct"] and f["speedup"] is not None and f["speedup"] > 1.2)
                         / len(at_t)) if any(f["speedup"] is not None for f in figures) else None,
            "void_rate": sum(1 for turn in at_t if turn.get("code") is None) / len(at_t),
            "violation_rate": (sum(1 for turn in evaluated if turn.get("status") == "integrity_violation")
                               / len(evaluated)) if evaluated else None,
            "best_correct_rate": task_mean([[1.0 if c else 0.0 for c, _ in g] for g in groups]),
            "best_fast_1.2": task_mean([[1.0 if c and s is not None and s > 1.2 else 0.0 for c, s in g]
                                        for g in groups]) if speed_measured else None,
            "mean_prompt_tokens": sum(prompt) / len(prompt) if prompt else None,
            "mean_completion_tokens": sum(completion) / len(completion) if completion else None,
        })
    return rows


def winners_curse(trajectories: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Selection-time against fresh re-check figures of the selected winners."""
    pairs = [(selection_figures(t), t["recheck"]) for t in trajectories if t.get("recheck")]
    both = [(s["speedup"], r.get("speedup")) for s, r in pairs if s["speedup"] and r.get("speedup")]
    selection_geo = geometric_mean(s for s, _ in both)
    recheck_geo = geometric_mean(r for _, r in both)
    return {
        "rechecked": len(pairs),
        "failed_recheck": sum(1 for _, r in pairs if r.get("status") != "ok"),
        "selection_geomean_speedup": selection_geo,
        "recheck_geomean_speedup": recheck_geo,
        "gap": (selection_geo / recheck_geo) if selection_geo and recheck_geo else None,
    }


def compare(current: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Run-to-run diff over the tasks both runs have: metric deltas (current − other) with a paired
    task bootstrap, and the tasks whose final correctness flipped."""
    mine = {k: v for k, v in zip(*_keyed(current), strict=True)}
    theirs = {k: v for k, v in zip(*_keyed(other), strict=True)}
    shared = sorted(set(mine) & set(theirs))

    def rate(group: list[dict[str, Any]]) -> float:
        return sum(f["correct"] for f in group) / len(group)

    pairs = [(rate(mine[k]), rate(theirs[k])) for k in shared]
    delta = (sum(a - b for a, b in pairs) / len(pairs)) if pairs else None
    out: dict[str, Any] = {
        "shared_tasks": len(shared), "only_current": sorted(set(mine) - set(theirs)),
        "only_other": sorted(set(theirs) - set(mine)),
        "correctness_delta": {"value": delta, "ci95": bootstrap_ci([[a - b] for a, b in pairs], _rate_stat)},
        "gained": [k for k, (a, b) in zip(shared, pairs, strict=True) if a > b],
        "lost": [k for k, (a, b) in zip(shared, pairs, strict=True) if a < b],
        "names": {k: v for k, v in {**problem_names(other), **problem_names(current)}.items() if v},
    }
    speed = [(mine[k], theirs[k]) for k in shared]
    for p in FAST_P_THRESHOLDS:
        def hit(group: list[dict[str, Any]], p: float = p) -> float:
            return sum(1 for f in group if f["correct"] and f["speedup"] is not None and f["speedup"] > p) / len(group)

        if any(f["speedup"] is not None for a, b in speed for f in a + b):
            diffs = [[hit(a) - hit(b)] for a, b in speed]
            out.setdefault("fast_p_delta", {})[f"{p:g}"] = {
                "value": sum(d[0] for d in diffs) / len(diffs) if diffs else None,
                "ci95": bootstrap_ci(diffs, _rate_stat)}
    return out


def _keyed(trajectories: Sequence[dict[str, Any]]) -> tuple[list[str], list[list[dict[str, Any]]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for traj in trajectories:
        groups[traj["problem_id"]].append(final_figures(traj))
    keys = sorted(groups)
    return keys, [groups[k] for k in keys]
