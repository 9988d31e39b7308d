"""The wire models of the OpenEnv server: what a client sends (`KernelAction`), what each reset and
step answers (`KernelObservation`) and what ``state`` reports (`KernelState`).

They are OpenEnv's pydantic ``Action``/``Observation``/``State`` subclasses, so ``/schema``
publishes them and a malformed action is refused by validation before it reaches an environment.
"""

from __future__ import annotations

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

#: Longest reply or code accepted (characters): a long reasoning trace fits, a runaway one is refused.
MAX_ACTION_CHARS = 1_000_000


class KernelAction(Action):
    """One turn: the model's whole reply (the candidate is its last fenced ```python block, as
    `KernelEnv` extracts it) or, for a client that extracts itself, the candidate's source as `code`.
    Exactly one of the two."""

    reply: str | None = Field(default=None, max_length=MAX_ACTION_CHARS,
                              description="the model's whole reply; the candidate is extracted from it")
    code: str | None = Field(default=None, max_length=MAX_ACTION_CHARS,
                             description="the candidate module itself (defines ModelNew), evaluated as given")

    @model_validator(mode="after")
    def _exactly_one(self) -> KernelAction:
        if (self.reply is None) == (self.code is None):
            # Not a ValueError: OpenEnv 0.10 puts the exception object of a ValueError into its error
            # frame, fails to serialize it and drops the session; a PydanticCustomError carries text only.
            raise PydanticCustomError("reply_or_code", "give exactly one of 'reply' (the model's whole reply) or "
                                                       "'code' (the candidate module itself)")
        return self


class KernelObservation(Observation):
    """What a reset or step answers. ``reward`` and ``done`` are OpenEnv's own fields (``reward`` is
    None after a reset); ``metadata`` holds timings and provenance of the last evaluation."""

    problem_id: str = Field(description="the problem of this episode")
    messages: list[dict[str, str]] = Field(
        default_factory=list, description="the chat for the next reply (system, task, replayed attempts with "
                                          "feedback), as the server's history policy selects it")
    feedback: str = Field(default="", description="the newest user message: the task after a reset, the "
                                                  "verdict's feedback after a step")
    status: str | None = Field(default=None, description="the verdict of the last turn: 'void' (no code found), "
                                                         "'ok', 'incorrect', 'compile_error', ...; None after a "
                                                         "reset")
    correct: bool = Field(default=False, description="the last candidate passed every trial and integrity check")
    speedup: float | None = Field(default=None, description="reference time / candidate time (GPU only)")
    coverage: float | None = Field(default=None, description="share of the candidate's GPU time in its own "
                                                             "Triton kernels (GPU only)")
    violations: list[str] = Field(default_factory=list, description="integrity violation codes of the last turn")
    turn: int = Field(default=0, description="turns taken in this episode")
    max_turns: int = Field(description="the episode's turn budget")


class KernelState(State):
    """A session's episode: OpenEnv's ``episode_id`` and ``step_count`` plus the turn record."""

    problem_id: str | None = None
    max_turns: int = 0
    done: bool = True
    rewards: list[float] = Field(default_factory=list)
    statuses: list[str] = Field(default_factory=list)
    best_turn: int | None = None
    best_reward: float | None = None

