"""The agent runner: drives an OpenAI-compatible chat endpoint through `KernelEnv` episodes.

For every (problem, sample) it runs one trajectory: generate a reply, evaluate it, feed the
verdict back, for the turn budget; then it re-checks the selected winner (the best turn) with a
fresh evaluation (new worker processes, new secret seeds, re-timed on a GPU) and records both
the selection-time and the fresh figures. Trajectories run concurrently (`concurrency`); the
evaluations share one `PoolEvaluator`. Everything is journaled per turn (`store`), so re-running
the same command resumes. ``tritongym agent`` is the command-line face of `run_agent`.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from tritongym.env.client import ChatClient, ChatError, ContextLengthError
from tritongym.env.core import KernelEnv, Turn
from tritongym.env.evaluators import Evaluator, PoolEvaluator
from tritongym.env.records import run_provenance, trajectory_record, turn_record
from tritongym.env.store import TrajectoryStore, trajectory_key
from tritongym.errors import TritongymError

if TYPE_CHECKING:
    from tritongym.evaluator import EvalOptions
    from tritongym.tasks import Problem

TTS_MODES = ("sequential", "parallel")


@dataclass
class AgentConfig:
    """Settings of one agent run (the flags of ``tritongym agent``)."""

    base_url: str
    model: str
    out: str
    problems: str = "builtin"
    levels: list[int] | None = None
    only: list[str] | None = None
    samples: int = 1
    turns: int = 3
    iterations: int = 1
    keep_best: int = 0
    tts: str = "sequential"
    concurrency: int = 4
    temperature: float | None = 1.0
    top_p: float | None = None
    max_tokens: int | None = 8192
    feedback: str = "standard"
    feedback_chars: int | None = None
    history: str = "full"
    templates: str | None = None
    few_shot: bool = False
    stop_on: str = "never"
    recheck: bool = True
    api_key: str | None = field(default=None, repr=False)
    request_timeout: float = 600.0
    max_retries: int = 4
    backoff: float = 1.0
    eval_workers: int = 1
    #: ``original`` or ``cpu`` (each problem's CPU-size variant: `tritongym.tasks.sizing`).
    size: str = "original"

    def __post_init__(self) -> None:
        if self.size not in ("original", "cpu"):
            raise ValueError(f"size must be original or cpu, got {self.size!r}")
        if self.tts not in TTS_MODES:
            raise ValueError(f"tts must be one of {', '.join(TTS_MODES)}, got {self.tts!r}")
        for name in ("samples", "turns", "iterations", "concurrency", "eval_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def evaluation_budget(self) -> int:
        """Evaluated turns per trajectory, equal in both TTS modes: ``T + (I − 1)·(T − K)``."""
        return self.turns + (self.iterations - 1) * (self.turns - self.keep_best)

    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}

    def settings(self) -> dict[str, Any]:
        """What must not change between a run and its resumption (no secrets, no concurrency, not the
        endpoint's address: a restarted server on another port serves the same model)."""
        data = asdict(self)
        for volatile in ("api_key", "base_url", "out", "concurrency", "request_timeout", "max_retries", "backoff",
                         "eval_workers"):
            data.pop(volatile)
        if data["size"] == "original":
            data.pop("size")  # runs journaled before sizes existed resume unchanged
        return data


def make_env(config: AgentConfig, problems: list[Problem], evaluator: Evaluator) -> KernelEnv:
    """The environment of one trajectory under `config` (parallel sampling: no history, one iteration)."""
    if config.tts == "parallel":
        return KernelEnv(problems, evaluator=evaluator, max_turns=config.evaluation_budget, history="none",
                         feedback=config.feedback, feedback_chars=config.feedback_chars, templates=config.templates,
                         few_shot=config.few_shot, success=config.stop_on)
    return KernelEnv(problems, evaluator=evaluator, max_turns=config.turns, iterations=config.iterations,
                     keep_best=config.keep_best, feedback=config.feedback, feedback_chars=config.feedback_chars,
                     history=config.history, templates=config.templates, few_shot=config.few_shot,
                     success=config.stop_on)


def provenance(config: AgentConfig, env: KernelEnv, evaluator: Evaluator) -> dict[str, Any]:
    """Versions, device, evaluator options, template hashes, model and sampling of a run."""
    return {
        **run_provenance(env, evaluator),
        "model": config.model, "base_url": config.base_url, "sampling": config.sampling(),
        "tts": {"mode": config.tts, "turns": config.turns, "iterations": config.iterations,
                "keep_best": config.keep_best, "evaluation_budget": config.evaluation_budget},
        "feedback": {"level": config.feedback, "max_chars": env.feedback.budget},
        "stop_on": config.stop_on, "recheck": config.recheck,
    }


def _turn_from_record(record: dict[str, Any]) -> Turn:
    from tritongym.evaluator import EvalResult

    result = EvalResult.from_dict(record["result"]) if record.get("result") else None
    return Turn(turn=record["turn"], iteration=record.get("iteration", 0), reply=record["reply"],
                code=record.get("code"), result=result, reward=float(record["reward"]),
                feedback=record.get("feedback", ""), message=record.get("feedback_message", ""),
                eval_s=float(record.get("eval_s", 0.0)))


class AgentRunner:
    """Runs every pending trajectory of `config`; `await runner.run()` returns a summary dict."""

    def __init__(self, config: AgentConfig, *, evaluator: Evaluator | None = None,
                 options: EvalOptions | None = None, progress: bool = True) -> None:
        from tritongym.tasks import load_problems, select_problems

        self.config = config
        self.problems = select_problems(load_problems(config.problems, levels=config.levels), config.only,
                                        config.problems)
        #: (problem id, why) for problems without a CPU size (left out when ``size`` is cpu).
        self.refused: list[tuple[str, str]] = []
        if config.size == "cpu":
            from tritongym.tasks.sizing import at_size

            sized = at_size(self.problems, "cpu")
            self.problems = sized.problems
            self.refused = [(p.problem_id, reason) for p, reason in sized.refused]
            if not self.problems:
                raise ValueError("none of the problems has a CPU size: "
                                 + "; ".join(f"{i}: {r}" for i, r in self.refused[:3]))
        self.evaluator = evaluator if evaluator is not None else PoolEvaluator(options, max_workers=config.eval_workers)
        self.store = TrajectoryStore(config.out)
        self.progress = progress
        self.errors: list[str] = []
        #: the best turn's status of each trajectory finished in this run ("void": no turn evaluated)
        self.outcomes: dict[str, int] = {}

    async def run(self) -> dict[str, Any]:
        config = self.config
        probe_env = make_env(config, self.problems, self.evaluator)
        self.provenance = provenance(config, probe_env, self.evaluator)
        self.store.check_settings({**config.settings(), "problem_ids": [p.problem_id for p in self.problems],
                                   "prompt_templates": self.provenance["prompt_templates"]})
        finished = self.store.finished_keys()
        journal = self.store.journaled_turns()
        jobs = [(p, s) for p in self.problems for s in range(config.samples)
                if trajectory_key(p.problem_id, s) not in finished]
        budget = probe_env.turn_budget
        total = len(self.problems) * config.samples * budget
        done = (len(self.problems) * config.samples - len(jobs)) * budget + sum(
            min(len(journal.get(trajectory_key(p.problem_id, s), [])), budget) for p, s in jobs)
        from tqdm import tqdm

        self._bar = tqdm(total=total, initial=done, unit="turn", desc="agent", file=sys.stderr,
                         disable=not self.progress, dynamic_ncols=True)
        semaphore = asyncio.Semaphore(config.concurrency)
        started = time.monotonic()
        counts = {"skipped": len(self.problems) * config.samples - len(jobs), "finished": 0, "failed": 0}
        async with ChatClient(config.base_url, config.model, api_key=config.api_key, timeout=config.request_timeout,
                              max_retries=config.max_retries, backoff=config.backoff) as client:
            async def guarded(problem: Problem, sample: int) -> None:
                async with semaphore:
                    key = trajectory_key(problem.problem_id, sample)
                    try:
                        await self._trajectory(client, problem, sample, journal.get(key, []))
                        counts["finished"] += 1
                    except (ChatError, TritongymError) as exc:  # this trajectory only; the others go on
                        counts["failed"] += 1
                        self.errors.append(f"{key}: {exc}")
                        self._bar.write(f"tritongym agent: {key} left unfinished (re-run to resume): {exc}",
                                        file=sys.stderr)

            await asyncio.gather(*(guarded(p, s) for p, s in jobs))
        self._bar.close()
        return {**counts, "trajectories": len(self.problems) * config.samples, "wall_s": time.monotonic() - started,
                "refused": len(self.refused), "outcomes": dict(sorted(self.outcomes.items())),
                "errors": list(self.errors)}

    async def _trajectory(self, client: ChatClient, problem: Problem, sample: int,
                          journaled: list[dict[str, Any]]) -> None:
        config = self.config
        key = trajectory_key(problem.problem_id, sample)
        env = make_env(config, [problem], self.evaluator)
        records = list(journaled[: env.turn_budget])
        turns = [_turn_from_record(r) for r in records]
        last = turns[-1] if turns else None
        ended = bool(turns) and (len(turns) >= env.turn_budget or (
            last.result is not None and env.success is not None and env.success(last.result)))
        stop_reason = "success" if ended and len(turns) < env.turn_budget else "budget"
        if not ended:
            observation, _ = env.reset(options={"problem": problem, "turns": turns})
            while True:
                turn_started = time.monotonic()
                try:
                    reply = await client.complete(observation, **config.sampling())
                except ContextLengthError:
                    # The conversation no longer fits the model: the trajectory ends here (Dr.Kernel's
                    # LENGTH finish); a re-run would fail the same way.
                    stop_reason = "context_length"
                    self._bar.update(env.turn_budget - len(records))
                    break
                generation_s = time.monotonic() - turn_started
                next_observation, _, terminated, truncated, info = await env.astep(reply.content)
                record = turn_record(env.turns[-1], observation, info, generation_s=generation_s,
                                     wall_s=time.monotonic() - turn_started, usage=reply.usage,
                                     finish_reason=reply.finish_reason, reasoning=reply.reasoning,
                                     request_attempts=reply.attempts)
                self.store.append_turn(key, record)
                records.append(record)
                self._bar.update(1)
                observation = next_observation
                if terminated or truncated:
                    stop_reason = "success" if terminated else "budget"
                    self._bar.update(env.turn_budget - len(records))
                    break
            turns = env.turns
        else:
            env.reset(options={"problem": problem, "turns": []})
            env.turns = turns
        best = env.best_turn()
        recheck = None
        if config.recheck and best is not None and best.result is not None and best.result.correct:
            fresh = await self.evaluator.aevaluate(problem, best.code)
            recheck = {"turn": best.turn, "status": str(fresh.status), "correct": fresh.correct,
                       "reward": fresh.reward, "speedup": fresh.speedup,
                       "speedup_vs_compile": getattr(fresh, "speedup_vs_compile", None), "result": fresh.to_dict(),
                       "selection": {"status": str(best.result.status), "reward": best.reward,
                                     "speedup": best.result.speedup,
                                     "speedup_vs_compile": getattr(best.result, "speedup_vs_compile", None)}}
        outcome = "void" if best is None or best.result is None else str(best.result.status)
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self.store.append_trajectory(trajectory_record(
            problem, env, sample=sample, mode=config.tts, stop_reason=stop_reason, turns=records,
            provenance=self.provenance, recheck=recheck, resumed_from_turn=len(journaled) if journaled else None))


def run_agent(config: AgentConfig, *, evaluator: Evaluator | None = None, options: EvalOptions | None = None,
              progress: bool = True) -> dict[str, Any]:
    """Run (or resume) an agent run to completion; returns counts, wall time and unfinished keys."""
    runner = AgentRunner(config, evaluator=evaluator, options=options, progress=progress)
    try:
        return asyncio.run(runner.run())
    finally:
        close = getattr(runner.evaluator, "close", None)
        if evaluator is None and close is not None:
            close()
