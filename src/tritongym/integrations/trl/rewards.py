"""Reward functions for TRL's ``GRPOTrainer``: the evaluator's verdict as the reward.

Single turn (``reward_funcs=[KernelReward(...)]`` or its async twin ``AsyncKernelReward``): each
completion's candidate is extracted with the environment's extractor (the last fenced ```python
block by default), evaluated by the real evaluator on the warm pool (`PoolEvaluator`, one
sandboxed process per candidate, concurrently), and scored with the verdict's reward (0 unless
``ok``). The dataset needs a ``problem_id`` column naming each row's problem (`kernel_dataset`
builds one). Per completion, the columns ``status``, ``correct``, ``speedup`` and ``violations``
go to TRL's completions table through ``log_extra``, and the batch means ``tritongym/correct``,
``tritongym/void`` and ``tritongym/speedup`` through ``log_metric``.

Multi-turn (with `tritongym.integrations.trl.rollout.KernelRollout`): `TrajectoryReward` reads the
per-turn rewards the rollout forwarded and returns each trajectory's return (their sum), logging
per-turn means (``tritongym/turn_<k>/reward``, ``…/correct``, ``…/void``).

Nothing here imports TRL: TRL calls these objects with keyword arguments only.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tritongym.env.evaluators import Evaluator, PoolEvaluator
from tritongym.env.extract import CodeExtractor, resolve_extractor

if TYPE_CHECKING:
    from tritongym.evaluator import EvalOptions, EvalResult
    from tritongym.tasks import Problem

__all__ = ["AsyncKernelReward", "KernelReward", "TrajectoryReward", "completion_text"]

LogFn = Callable[..., None]


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or a conversational list of messages (the
    assistant messages' contents joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        parts = [completion_text(m) for m in completion if not isinstance(m, dict) or m.get("role", "assistant")
                 == "assistant"]
        return "\n".join(p for p in parts if p)
    raise TypeError(f"a completion is a string or a list of chat messages, got {type(completion).__name__}")


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


class _KernelRewardBase:
    """What the sync and async reward functions share: problem lookup, extraction, logging."""

    def __init__(self, problems: Sequence[Problem] | str, *, evaluator: Evaluator | None = None,
                 options: EvalOptions | None = None, workers: int = 1, extract: str | CodeExtractor = "last",
                 name: str = "tritongym_kernel") -> None:
        from tritongym.env.core import _load_problems

        loaded = _load_problems(problems)
        self.problems: dict[str, Problem] = {}
        for problem in loaded:
            self.problems[problem.problem_id] = problem
            self.problems.setdefault(problem.name, problem)
        self._owns_evaluator = evaluator is None
        self.evaluator: Evaluator = evaluator if evaluator is not None else PoolEvaluator(options, max_workers=workers)
        self.extract = resolve_extractor(extract)
        # TRL names a reward function by its ``__name__`` (metrics ``rewards/<name>/mean``).
        self.__name__ = name

    def _jobs(self, completions: Sequence[Any], problem_id: Sequence[str] | None
              ) -> list[tuple[Problem, str | None]]:
        if problem_id is None:
            raise ValueError("the dataset needs a 'problem_id' column naming each row's problem "
                             "(tritongym.integrations.trl.kernel_dataset builds one)")
        if len(problem_id) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(problem_id)} problem ids")
        jobs = []
        for pid, completion in zip(problem_id, completions, strict=True):
            problem = self.problems.get(pid)
            if problem is None:
                known = ", ".join(sorted({p.problem_id for p in self.problems.values()})[:5])
                raise KeyError(f"problem_id {pid!r} is not one of this reward's problems ({known}, ...)")
            jobs.append((problem, self.extract(completion_text(completion))))
        return jobs

    @staticmethod
    def _report(results: list[EvalResult | None], log_extra: LogFn | None, log_metric: LogFn | None
                ) -> list[float]:
        rewards = [0.0 if r is None else float(r.reward) for r in results]
        statuses = ["void" if r is None else str(r.status) for r in results]
        correct = [r is not None and bool(r.correct) for r in results]
        speedups = [None if r is None else _finite_or_none(r.speedup) for r in results]
        violations = [[] if r is None else [str(v.code) for v in r.violations] for r in results]
        if log_extra is not None:
            log_extra("status", statuses)
            log_extra("correct", correct)
            log_extra("speedup", speedups)
            log_extra("violations", [",".join(v) for v in violations])
        if log_metric is not None and results:
            log_metric("tritongym/correct", sum(correct) / len(results))
            log_metric("tritongym/void", statuses.count("void") / len(results))
            log_metric("tritongym/violation", sum(1 for v in violations if v) / len(results))
            measured = [s for s in speedups if s is not None]
            if measured:  # only on a GPU: CPU verdicts carry no timing
                log_metric("tritongym/speedup", sum(measured) / len(measured))
        return rewards

    def close(self) -> None:
        """Release the evaluator's pool when this reward made it."""
        close = getattr(self.evaluator, "close", None)
        if self._owns_evaluator and close is not None:
            close()


class KernelReward(_KernelRewardBase):
    """A synchronous GRPO reward: the verdict's reward of each completion's extracted kernel.

    Args:
        problems: the problems the dataset's ``problem_id`` column names (a spec such as
            ``"builtin"``, or `Problem`s).
        evaluator: an `Evaluator` to share (None: a `PoolEvaluator` with `options` and `workers`).
        options: `EvalOptions` of the default evaluator (device, timeout, tolerance, reward ...).
        workers: concurrent evaluations of the default evaluator (pool slots).
        extract: ``last`` (default), ``first``, ``whole`` or a callable ``reply -> code | None``.
        name: the name TRL logs this reward under.

    Called by TRL as ``reward(prompts=..., completions=..., problem_id=..., log_extra=...,
    log_metric=..., **other_columns)``; returns one float per completion (0.0 for a reply without a
    code block: a void turn, as in `KernelEnv`).
    """

    def __call__(self, *, completions: Sequence[Any], problem_id: Sequence[str] | None = None,
                 log_extra: LogFn | None = None, log_metric: LogFn | None = None, **_: Any) -> list[float]:
        jobs = self._jobs(completions, problem_id)
        pending = [(i, p, code) for i, (p, code) in enumerate(jobs) if code is not None]
        results: list[EvalResult | None] = [None] * len(jobs)
        verdicts = self.evaluator.evaluate_many([(p, c) for _, p, c in pending])
        for (i, _p, _c), result in zip(pending, verdicts, strict=True):
            results[i] = result
        return self._report(results, log_extra, log_metric)


class AsyncKernelReward(_KernelRewardBase):
    """`KernelReward` as a coroutine: TRL awaits async reward functions concurrently with the other
    async ones (``asyncio.gather`` on its own event loop), so evaluation overlaps other scoring."""

    async def __call__(self, *, completions: Sequence[Any], problem_id: Sequence[str] | None = None,
                       log_extra: LogFn | None = None, log_metric: LogFn | None = None, **_: Any) -> list[float]:
        jobs = self._jobs(completions, problem_id)

        async def one(problem: Problem, code: str | None) -> EvalResult | None:
            return None if code is None else await self.evaluator.aevaluate(problem, code)

        results = list(await asyncio.gather(*(one(p, c) for p, c in jobs)))
        return self._report(results, log_extra, log_metric)


class TrajectoryReward:
    """The multi-turn reward TRL sees: each trajectory's return Σ_k r_k from `KernelRollout`'s
    forwarded ``turn_rewards`` (equal to TRLOO's turn-0 return with γ = 1).

    With plain ``GRPOTrainer`` this return is the sequence reward TRL normalises per group; with
    `TRLOOGRPOTrainer` TRL's advantages are replaced by per-turn TRLOO ones and this value is what
    TRL logs as ``reward``. Per-turn means are logged as ``tritongym/turn_<k>/reward``,
    ``…/correct`` and ``…/void`` (k from 1), and the completions table gets ``turn_status`` and
    ``turn_rewards`` columns.
    """

    __name__ = "tritongym_trajectory"

    def __call__(self, *, completions: Sequence[Any], turn_rewards: Sequence[Sequence[float]] | None = None,
                 turn_status: Sequence[Sequence[str]] | None = None, log_extra: LogFn | None = None,
                 log_metric: LogFn | None = None, **_: Any) -> list[float]:
        if turn_rewards is None or turn_status is None:
            raise ValueError("TrajectoryReward reads 'turn_rewards' and 'turn_status' forwarded by a "
                             "tritongym KernelRollout; pass rollout_func=KernelRollout(...) to the trainer")
        if len(turn_rewards) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(turn_rewards)} rows of turn rewards")
        if log_extra is not None:
            log_extra("turn_status", [",".join(s) for s in turn_status])
            log_extra("turn_rewards", [",".join(f"{r:g}" for r in row) for row in turn_rewards])
        if log_metric is not None:
            most = max((len(row) for row in turn_rewards), default=0)
            for k in range(most):
                reached = [i for i, row in enumerate(turn_rewards) if len(row) > k]
                log_metric(f"tritongym/turn_{k + 1}/reward", sum(turn_rewards[i][k] for i in reached) / len(reached))
                log_metric(f"tritongym/turn_{k + 1}/correct",
                           sum(turn_status[i][k] == "ok" for i in reached) / len(reached))
                log_metric(f"tritongym/turn_{k + 1}/void", sum(turn_status[i][k] == "void" for i in reached)
                           / len(reached))
        return [float(sum(row)) for row in turn_rewards]
