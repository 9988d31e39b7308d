"""`create_app`: tritongym's environment as an OpenEnv server (OpenEnv's own ``create_app``).

Concurrency: OpenEnv gives each WebSocket session its own environment (up to `max_sessions`);
all of them evaluate on one `PoolEvaluator` of `workers` sandboxed slots, so evaluations beyond
`workers` wait in the pool's queue rather than oversubscribing the machine (on a GPU, concurrent
timings interfere: keep `workers` at the number of devices there).
"""

from __future__ import annotations

import functools
import hmac
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from openenv.core.env_server.http_server import create_app as openenv_create_app
from openenv.core.env_server.types import ConcurrencyConfig

from tritongym.env.core import KernelEnv
from tritongym.env.evaluators import PoolEvaluator
from tritongym.integrations.openenv.environment import KernelRequestError, SessionSettings, TritonKernelEnvironment
from tritongym.integrations.openenv.models import KernelAction, KernelObservation, KernelState

if TYPE_CHECKING:
    from fastapi import FastAPI

    from tritongym.env.evaluators import Evaluator
    from tritongym.evaluator import EvalOptions
    from tritongym.tasks import Problem

#: Paths answered without the bearer token: liveness probes.
OPEN_PATHS = frozenset({"/health"})


def create_app(problems: Problem | Sequence[Problem] | str = "builtin", *, options: EvalOptions | None = None,
               evaluator: Evaluator | None = None, workers: int = 1, max_sessions: int = 8,
               session_timeout_s: float | None = None, token: str | None = None, max_turns: int = 3,
               extract: str = "last", **env_kwargs: Any) -> FastAPI:
    """An OpenEnv FastAPI app serving `KernelEnv` episodes over `problems`.

    Args:
        problems: a `Problem`, a list of them, or a problem-set spec (``"builtin"``, a path).
        options: `EvalOptions` of every evaluation (device, trials, sandbox, timeout, ...).
        evaluator: an `Evaluator` shared by all sessions and left open (the caller owns it); None: a
            `PoolEvaluator` of `workers` sandboxed slots with `options`, closed when the app shuts down.
        workers: evaluation slots of the default evaluator.
        max_sessions: concurrent WebSocket sessions (OpenEnv refuses more with CAPACITY_REACHED).
        session_timeout_s: idle sessions are closed after this long (None: never).
        token: when set, every request but ``/health`` must send ``Authorization: Bearer <token>``
            (OpenEnv's clients take ``headers=``); required off loopback by the CLI.
        max_turns, extract, env_kwargs: `KernelEnv`'s settings (``feedback``, ``history``, ``success``,
            ``iterations``, ``keep_best``, ``few_shot``, ``templates``, ``feedback_chars``).
    """
    if evaluator is not None and options is not None:
        raise ValueError("give create_app either an evaluator or EvalOptions for its own, not both")
    env_kwargs = {"max_turns": max_turns, **env_kwargs}
    owned = evaluator is None
    shared = PoolEvaluator(options, max_workers=workers) if owned else evaluator
    # Bad settings fail here, at start-up, not in every session's factory call; the problems are
    # loaded once and shared.
    probe = KernelEnv(problems, evaluator=shared, extract=extract, **env_kwargs)
    settings = SessionSettings(problems=probe.problems, evaluator=shared, env_kwargs=env_kwargs, extract=extract)
    app = openenv_create_app(
        functools.partial(TritonKernelEnvironment, settings), KernelAction, KernelObservation,
        env_name="tritongym", state_cls=KernelState,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout_s))

    async def refuse(request: Any, exc: KernelRequestError) -> Any:
        from fastapi.responses import JSONResponse

        return JSONResponse(status_code=exc.http_status, content={"detail": str(exc)})

    # Raised over plain HTTP (a stateless /step, an unknown problem): a 4xx naming the fix, not a 500.
    app.add_exception_handler(KernelRequestError, refuse)
    if owned:
        app.router.on_shutdown.append(shared.close)
    if token:
        app.add_middleware(BearerTokenGate, token=token)
    app.state.tritongym_settings = settings
    return app


class BearerTokenGate:
    """ASGI middleware: HTTP and WebSocket requests need ``Authorization: Bearer <token>`` (constant-time
    comparison), except the paths in `OPEN_PATHS`. Anyone who reaches the port could otherwise run code
    in the sandboxed workers."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        sent = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(sent, self.expected):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            # Closing before accepting: the handshake is refused with HTTP 403.
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
            return None
        body = json.dumps({"detail": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})
        return None
