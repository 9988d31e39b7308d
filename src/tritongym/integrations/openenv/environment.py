"""`TritonKernelEnvironment`: one OpenEnv session's `KernelEnv`.

OpenEnv's server calls the environment factory once per WebSocket session (and once per stateless
HTTP request); each instance owns its own `KernelEnv` (problem, turns, history), while every
instance evaluates on the one `Evaluator` in `SessionSettings`, so concurrent sessions share the
sandboxed worker pool instead of starting one each. Steps are async (``step_async``): the server
awaits the pool's future on its event loop, so a session waiting for a verdict blocks no other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from tritongym.env.core import EpisodeError, KernelEnv
from tritongym.env.extract import resolve_extractor
from tritongym.integrations.openenv.models import KernelAction, KernelObservation, KernelState

if TYPE_CHECKING:
    from tritongym.env.evaluators import Evaluator
    from tritongym.evaluator import EvalResult
    from tritongym.tasks import Problem

RESET_ARGUMENTS = ("seed", "episode_id", "problem")

NO_EPISODE = ("no episode in progress: send 'reset' first, and a new 'reset' after 'done'. Over plain HTTP every "
              "/step gets a fresh environment, so multi-turn episodes need a WebSocket session (/ws, e.g. "
              "OpenEnv's EnvClient or tritongym's KernelEnvClient)")


class KernelRequestError(ValueError):
    """A request the environment cannot serve (unknown problem, unknown reset argument, no episode);
    the message says what to send instead. Over HTTP it is a 4xx answer, over WebSocket an error frame."""

    http_status = 400


class NoEpisodeError(KernelRequestError):
    """A step with no episode in progress (before a reset, after done, or a stateless HTTP /step)."""

    http_status = 409


@dataclass
class SessionSettings:
    """What every session shares: the problems, the evaluator, and `KernelEnv`'s keyword arguments
    (``max_turns``, ``feedback``, ``history``, ``success``, ...)."""

    problems: list[Problem]
    evaluator: Evaluator
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    extract: str = "last"


class TritonKernelEnvironment(Environment[KernelAction, KernelObservation, KernelState]):
    """A tritongym `KernelEnv` episode behind OpenEnv's ``reset``/``step``/``state``.

    ``reset(seed=None, episode_id=None, problem=None)``: `problem` is a problem id, name or index
    into the served set; without one the problem is drawn from the session's generator (seeded by
    `seed`). ``step(KernelAction)``: evaluates the reply (or code) and answers the verdict's reward
    and feedback; the episode is ``done`` when the turn budget is spent or the success rule holds.
    """

    # Sessions share only the evaluator, which is thread-safe and made for many environments.
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, settings: SessionSettings) -> None:
        super().__init__()
        self._settings = settings
        self._extract_reply = resolve_extractor(settings.extract)
        self._given_code: str | None = None  # a KernelAction.code being stepped: evaluated as given
        self._env = KernelEnv(settings.problems, evaluator=settings.evaluator, extract=self._extract,
                              **settings.env_kwargs)
        self._episode_id: str | None = None
        self._done = True

    # -- OpenEnv API ----------------------------------------------------------------------------

    def reset(self, seed: int | None = None, episode_id: str | None = None, problem: str | int | None = None,
              **kwargs: Any) -> KernelObservation:
        if kwargs:
            raise KernelRequestError(f"unknown reset argument(s) {', '.join(sorted(kwargs))}; accepted: "
                                     f"{', '.join(RESET_ARGUMENTS)}")
        try:
            messages, info = self._env.reset(seed=seed, options={"problem": problem})
        except (KeyError, IndexError):
            known = ", ".join(p.name for p in self._settings.problems[:8])
            more = f" and {len(self._settings.problems) - 8} more" if len(self._settings.problems) > 8 else ""
            raise KernelRequestError(f"no problem {problem!r} in the served set (by id, name or index): {known}"
                                     f"{more}") from None
        self._episode_id = episode_id or uuid.uuid4().hex
        self._done = False
        return KernelObservation(problem_id=info["problem_id"], messages=messages, feedback=messages[-1]["content"],
                                 turn=0, max_turns=self._env.turn_budget, reward=None, done=False,
                                 metadata={"episode_id": self._episode_id})

    def step(self, action: KernelAction, timeout_s: float | None = None, **kwargs: Any) -> KernelObservation:
        """Blocking step, for callers outside an event loop (the server uses `step_async`).
        `timeout_s` is not used: the evaluator's own candidate timeout bounds every evaluation."""
        reply = self._begin(action)
        try:
            return self._observe(*self._env.step(reply))
        except EpisodeError:
            raise NoEpisodeError(NO_EPISODE) from None
        finally:
            self._given_code = None

    async def step_async(self, action: KernelAction, timeout_s: float | None = None,
                         **kwargs: Any) -> KernelObservation:
        reply = self._begin(action)
        try:
            return self._observe(*await self._env.astep(reply))
        except EpisodeError:
            raise NoEpisodeError(NO_EPISODE) from None
        finally:
            self._given_code = None

    @property
    def state(self) -> KernelState:
        turns = self._env.turns if self._episode_id is not None else []
        best = self._env.best_turn() if turns else None
        problem = self._env.problem if self._episode_id is not None else None
        return KernelState(episode_id=self._episode_id, step_count=len(turns),
                           problem_id=problem.problem_id if problem is not None else None,
                           max_turns=self._env.turn_budget, done=self._done, rewards=[t.reward for t in turns],
                           statuses=[t.status for t in turns], best_turn=best.turn if best else None,
                           best_reward=best.reward if best else None)

    def get_metadata(self) -> EnvironmentMetadata:
        from tritongym import __version__

        return EnvironmentMetadata(
            name="tritongym", version=__version__,
            description=f"Write a Triton kernel (ModelNew) for a PyTorch reference; each turn is evaluated in a "
                        f"sandbox and answered with a reward and feedback. {len(self._settings.problems)} "
                        f"problems, {self._env.turn_budget} turns per episode.")

    def close(self) -> None:
        """Nothing to release: the evaluator is shared by every session and closed with the app."""

    # -- internals --------------------------------------------------------------------------------

    def _extract(self, reply: str) -> str | None:
        return self._given_code if self._given_code is not None else self._extract_reply(reply)

    def _begin(self, action: KernelAction) -> str:
        """The reply to step with; a `code` action becomes a fenced reply in the history, evaluated verbatim."""
        if not isinstance(action, KernelAction):
            raise KernelRequestError(f"the action is a KernelAction (reply or code), got {type(action).__name__}")
        if action.code is not None:
            self._given_code = action.code
            return f"```python\n{action.code}\n```"
        return action.reply

    def _observe(self, messages: list[dict[str, str]], reward: float, terminated: bool, truncated: bool,
                 info: dict[str, Any]) -> KernelObservation:
        self._done = terminated or truncated
        result: EvalResult | None = info["result"]
        metadata = {"episode_id": self._episode_id, "iteration": info["iteration"], "terminated": terminated,
                    "truncated": truncated, "best_turn": info["best_turn"], "best_reward": info["best_reward"],
                    "eval_s": info["eval_s"], "env_s": info["env_s"]}
        if result is not None:
            metadata.update(sandbox=result.sandbox, device=result.device, solution_hash=result.solution_hash,
                            problem_hash=result.problem_hash)
        return KernelObservation(
            problem_id=info["problem_id"], messages=messages, feedback=self._env.turns[-1].message,
            status=info["status"], correct=bool(result is not None and result.correct),
            speedup=result.speedup if result is not None else None,
            coverage=result.coverage if result is not None else None,
            violations=[str(v.code) for v in result.violations] if result is not None else [],
            turn=len(self._env.turns), max_turns=self._env.turn_budget, reward=reward, done=self._done,
            metadata=metadata)
