"""`KernelEnv`: a Gymnasium-shaped multi-turn environment for writing Triton kernels.

The observation is the chat so far (a list of ``{"role", "content"}`` messages, ready for a chat
template); the action is the model's whole reply. Each step extracts the candidate code, has the
evaluator judge it, and answers with the verdict's reward and a feedback message::

    env = KernelEnv("builtin", max_turns=3, feedback="standard", history="strip-think,last:2")
    messages, info = env.reset(seed=0, options={"problem": "07_softmax"})
    while True:
        reply = my_model(messages)
        messages, reward, terminated, truncated, info = env.step(reply)
        if terminated or truncated:
            break
    info["result"]          # the full EvalResult of the last turn (None for a void turn)

`terminated` is true when the success rule holds (the task is solved; by default never, as in
Dr.Kernel's loop, which always runs every turn); `truncated` when the turn budget is spent.

Sequential test-time scaling (Dr.Kernel's STTS) is built in: with ``iterations=I`` and
``keep_best=K`` the episode runs ``T + (I−1)·(T−K)`` turns; iteration 0 is an ordinary T-turn
episode, and each later iteration restarts the context from the task plus the K best earlier
attempts by reward (not necessarily consecutive), then adds T−K new turns.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tritongym.env.evaluators import Evaluator, as_evaluator
from tritongym.env.extract import CodeExtractor, resolve_extractor
from tritongym.env.feedback import FeedbackPolicy
from tritongym.env.history import Attempt, BestK, HistoryPolicy, parse_history, progress_of
from tritongym.env.templates import PromptTemplates

if TYPE_CHECKING:
    from tritongym.evaluator import EvalOptions, EvalResult
    from tritongym.tasks import Problem

Message = dict[str, str]
SuccessRule = Callable[["EvalResult"], bool]

VOID_REASON = "no fenced ```python block was found (reasoning inside <think>…</think> is not searched)."


class EpisodeError(RuntimeError):
    """`step` was called before `reset` or after the episode ended."""


def success_rule(spec: str | SuccessRule | None) -> SuccessRule | None:
    """``None``/``"never"``, ``"correct"``, ``"speedup:X"`` (correct and speedup ≥ X), or a callable."""
    if spec is None or spec == "never":
        return None
    if callable(spec):
        return spec
    if spec == "correct":
        return lambda result: result.correct
    name, _, value = str(spec).partition(":")
    if name == "speedup":
        try:
            threshold = float(value)
        except ValueError:
            threshold = None
        if threshold is not None:
            return lambda result: result.correct and result.speedup is not None and result.speedup >= threshold
    raise ValueError(f"success rule must be 'never', 'correct', 'speedup:X' or a callable, got {spec!r}")


@dataclass
class Turn:
    """One finished turn of the current episode."""

    turn: int
    iteration: int
    reply: str
    code: str | None
    result: EvalResult | None
    reward: float
    feedback: str
    message: str
    eval_s: float = 0.0

    @property
    def void(self) -> bool:
        return self.code is None

    @property
    def status(self) -> str:
        return "void" if self.result is None else str(self.result.status)

    def attempt(self) -> Attempt:
        return Attempt(turn=self.turn, reply=self.reply, feedback=self.message, reward=self.reward, void=self.void,
                       progress=progress_of(self.status))


def _load_problems(problems: Problem | Sequence[Problem] | str) -> list[Problem]:
    from tritongym.tasks import Problem, load_problems

    if isinstance(problems, Problem):
        return [problems]
    if isinstance(problems, str):
        return load_problems(problems)
    loaded = list(problems)
    if not loaded or not all(isinstance(p, Problem) for p in loaded):
        raise TypeError("problems must be a Problem, a non-empty sequence of Problems, or a problem-set spec")
    return loaded


def _tolerance_text(options: EvalOptions | None) -> str:
    if options is None:
        return "atol=rtol=1e-2"
    if options.atol is not None or options.rtol is not None:
        return f"atol={options.atol if options.atol is not None else 'preset'}, " \
               f"rtol={options.rtol if options.rtol is not None else 'preset'}"
    return "atol=rtol=1e-2" if options.tolerance == "kernelbench" else "atol=rtol=1e-4 for float32"


class KernelEnv:
    """A multi-turn kernel-writing environment over a set of problems.

    Args:
        problems: a `Problem`, a list of them, or a problem-set spec (``"builtin"``, a path).
        evaluator: an `Evaluator` (shared between environments), a function ``(problem, solution)
            -> EvalResult``, or None for a `PoolEvaluator` with `options`.
        options: `EvalOptions` for the default evaluator (and the tolerance the task prompt states).
        max_turns: turns per episode (per iteration with sequential scaling).
        iterations, keep_best: sequential test-time scaling (see the module docstring).
        feedback: a level name (``minimal``, ``standard``, ``full``) or a `FeedbackPolicy`.
        feedback_chars: the feedback's character budget (None: the level's default).
        history: a `HistoryPolicy` or its spelling (``full``, ``last:2``, ``strip-think,best:2``, ...).
        templates: a `PromptTemplates` or a folder overriding the packaged templates.
        few_shot: append the packaged (or overriding) few-shot example to the task.
        extract: ``last`` (default), ``first``, ``whole`` or a callable ``reply -> code | None``.
        success: when an episode terminates early: ``never`` (default), ``correct``, ``speedup:X``
            or a callable on the `EvalResult`.
    """

    metadata = {"render_modes": []}

    def __init__(self, problems: Problem | Sequence[Problem] | str, *,
                 evaluator: Evaluator | Callable[[Problem, str], EvalResult] | None = None,
                 options: EvalOptions | None = None, max_turns: int = 3, iterations: int = 1, keep_best: int = 0,
                 feedback: str | FeedbackPolicy = "standard", feedback_chars: int | None = None,
                 history: str | HistoryPolicy = "full", templates: PromptTemplates | str | None = None,
                 few_shot: bool = False, extract: str | CodeExtractor = "last",
                 success: str | SuccessRule | None = None) -> None:
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be an integer >= 1, got {max_turns!r}")
        if not isinstance(iterations, int) or iterations < 1:
            raise ValueError(f"iterations must be an integer >= 1, got {iterations!r}")
        if iterations > 1 and not 0 <= keep_best < max_turns:
            raise ValueError(f"keep_best must be in [0, max_turns) with iterations > 1, got {keep_best}")
        self.problems = _load_problems(problems)
        self.evaluator = as_evaluator(evaluator, options)
        self.options = options if options is not None else getattr(self.evaluator, "options", None)
        self.max_turns = max_turns
        self.iterations = iterations
        self.keep_best = keep_best if iterations > 1 else 0
        self.feedback = feedback if isinstance(feedback, FeedbackPolicy) else FeedbackPolicy(feedback, feedback_chars)
        self.history = parse_history(history)
        self.templates = templates if isinstance(templates, PromptTemplates) else PromptTemplates.load(templates)
        self.few_shot = few_shot
        self.extract = resolve_extractor(extract)
        self.success = success_rule(success)
        self._rng = random.Random()
        self.problem: Problem | None = None
        self.turns: list[Turn] = []
        self._prompt: list[Message] = []
        self._done = True

    # -- episode budget -------------------------------------------------------------------------

    @property
    def turn_budget(self) -> int:
        """Turns in one episode: ``T + (I − 1)·(T − K)``."""
        return self.max_turns + (self.iterations - 1) * (self.max_turns - self.keep_best)

    def iteration_of(self, turn: int) -> int:
        """The sequential-scaling iteration that turn index `turn` belongs to."""
        if turn < self.max_turns:
            return 0
        return 1 + (turn - self.max_turns) // (self.max_turns - self.keep_best)

    # -- Gymnasium API ----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[list[Message], dict[str, Any]]:
        """Start an episode. ``options``: ``problem`` (a `Problem`, id, name or index; random from the
        seeded generator otherwise) and ``turns`` (earlier `Turn`s to continue from, for resuming)."""
        if seed is not None:
            self._rng.seed(seed)
        options = options or {}
        self.problem = self._pick(options.get("problem"))
        self.turns = list(options.get("turns", []))
        if len(self.turns) >= self.turn_budget:
            raise EpisodeError(f"{len(self.turns)} turns given to resume from; the budget is {self.turn_budget}")
        task = self.templates.render(
            "task", problem_id=self.problem.problem_id, name=self.problem.name, source=self.problem.source.strip(),
            tolerance=_tolerance_text(self.options), few_shot=self.templates.few_shot if self.few_shot else "")
        self._prompt = [{"role": "system", "content": self.templates.system.strip()},
                        {"role": "user", "content": task.strip()}]
        self._done = False
        return self.observation(), {"problem_id": self.problem.problem_id, "turn": len(self.turns),
                                    "turn_budget": self.turn_budget}

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Evaluate the reply `action`; returns (observation, reward, terminated, truncated, info)."""
        started = time.perf_counter()
        code = self._begin(action)
        result, eval_s = None, 0.0
        if code is not None:
            before = time.perf_counter()
            result = self.evaluator.evaluate(self.problem, code)
            eval_s = time.perf_counter() - before
        return self._finish(action, code, result, eval_s, started)

    async def astep(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """`step` without blocking the event loop (the evaluator's `aevaluate`)."""
        started = time.perf_counter()
        code = self._begin(action)
        result, eval_s = None, 0.0
        if code is not None:
            before = time.perf_counter()
            result = await self.evaluator.aevaluate(self.problem, code)
            eval_s = time.perf_counter() - before
        return self._finish(action, code, result, eval_s, started)

    def close(self) -> None:
        """Nothing to release: the evaluator belongs to the caller (it may be shared)."""

    # -- observation ------------------------------------------------------------------------------

    def observation(self) -> list[Message]:
        """The messages for the next reply: system, task, then the replayed attempts."""
        messages = [dict(m) for m in self._prompt]
        for attempt in self.history.select(self._context_attempts()):
            messages.append({"role": "assistant", "content": attempt.reply})
            messages.append({"role": "user", "content": attempt.feedback})
        return messages

    def _context_attempts(self) -> list[Attempt]:
        """Attempts the history policy may choose from: with sequential scaling, the best K of the
        earlier iterations, then this iteration's own."""
        attempts = [t.attempt() for t in self.turns]
        # Once the episode is over there is no next iteration to open: the terminal observation is the
        # last turn's own context (its iteration's), not an empty new iteration's.
        iteration = self.iteration_of(len(self.turns) - 1 if self._done and self.turns else len(self.turns))
        if iteration == 0:
            return attempts
        start = self.max_turns + (iteration - 1) * (self.max_turns - self.keep_best)
        return BestK(self.keep_best).select(attempts[:start]) + attempts[start:]

    # -- internals --------------------------------------------------------------------------------

    def _pick(self, which: Any) -> Problem:
        from tritongym.tasks import Problem

        if which is None:
            return self._rng.choice(self.problems)
        if isinstance(which, Problem):
            return which
        if isinstance(which, int) and not isinstance(which, bool):
            return self.problems[which]
        for problem in self.problems:
            if which in (problem.problem_id, problem.name):
                return problem
        raise KeyError(f"no problem named {which!r} in this environment")

    def _begin(self, action: str) -> str | None:
        if self._done or self.problem is None:
            raise EpisodeError("call reset() before step(): the episode has not started or has ended")
        if not isinstance(action, str):
            raise TypeError(f"the action is the model's reply as a string, got {type(action).__name__}")
        return self.extract(action)

    def _finish(self, reply: str, code: str | None, result: EvalResult | None, eval_s: float, started: float
                ) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        turn_index = len(self.turns)
        values = {"attempt": turn_index + 1, "max_attempts": self.turn_budget}
        if result is None:
            feedback = VOID_REASON
            message = self.templates.render("void", reason=VOID_REASON, **values).strip()
            reward = 0.0
        else:
            feedback = self.feedback.render(result)
            message = self.templates.render("feedback", feedback=feedback, **values).strip()
            reward = float(result.reward)
        turn = Turn(turn=turn_index, iteration=self.iteration_of(turn_index), reply=reply, code=code, result=result,
                    reward=reward, feedback=feedback, message=message, eval_s=eval_s)
        self.turns.append(turn)
        terminated = result is not None and self.success is not None and bool(self.success(result))
        truncated = not terminated and len(self.turns) >= self.turn_budget
        self._done = terminated or truncated
        observation = self.observation()
        best = self.best_turn()
        info = {"result": result, "status": turn.status, "void": turn.void, "code": code, "turn": turn.turn,
                "iteration": turn.iteration, "feedback": feedback, "problem_id": self.problem.problem_id,
                "best_turn": best.turn if best else None, "best_reward": best.reward if best else None,
                "eval_s": eval_s}
        info["env_s"] = time.perf_counter() - started - eval_s
        return observation, reward, terminated, truncated, info

    def best_turn(self) -> Turn | None:
        """The evaluated turn with the highest reward; None if all were void.

        Reward ties go to the turn that got further (`progress_of`: ok > incorrect > runtime
        error/timeout > compile error > integrity violation), then to the earliest: with every
        turn at 0, the best is the wrong kernel that ran, not the first compile error."""
        evaluated = [t for t in self.turns if not t.void]
        if not evaluated:
            return None
        return max(evaluated, key=lambda t: (t.reward, progress_of(t.status), -t.turn))
