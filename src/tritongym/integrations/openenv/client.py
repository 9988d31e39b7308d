"""`KernelEnvClient`: OpenEnv's WebSocket ``EnvClient`` typed for tritongym's server.

One client is one server session (one `KernelEnv`), so a multi-turn episode keeps its state::

    async with KernelEnvClient("http://127.0.0.1:8010") as env:
        result = await env.reset(problem="07_softmax")
        while not result.done:
            reply = my_model(result.observation.messages)
            result = await env.step(KernelAction(reply=reply))

``.sync()`` gives the blocking form; OpenEnv's untyped ``GenericEnvClient`` speaks the same
protocol with plain dicts (``{"reply": ...}``).
"""

from __future__ import annotations

from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from tritongym.integrations.openenv.models import KernelAction, KernelObservation, KernelState

#: Seconds a client waits for one answer: an evaluation can take minutes (the candidate's own
#: timeout, GPU timing, a queue behind other sessions), far past OpenEnv's 60 s default.
DEFAULT_MESSAGE_TIMEOUT_S = 900.0


class KernelEnvClient(EnvClient[KernelAction, KernelObservation, KernelState]):
    """A session on a ``tritongym openenv`` server; ``reset(problem=..., seed=...)``, ``step(KernelAction)``,
    ``state()``. Pass ``headers={"Authorization": "Bearer <token>"}`` when the server has a token."""

    def __init__(self, base_url: str | None = None, *, message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S,
                 **kwargs: Any) -> None:
        super().__init__(base_url, message_timeout_s=message_timeout_s, **kwargs)

    def _step_payload(self, action: KernelAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelObservation]:
        observation = KernelObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                                        done=payload.get("done", False))
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False),
                          metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> KernelState:
        return KernelState(**payload)
