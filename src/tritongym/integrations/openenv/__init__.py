"""tritongym's multi-turn `KernelEnv` served over OpenEnv's protocol (``pip install -e '.[openenv]' torch==2.13.0``).

* `create_app(problems=..., options=...)`: a FastAPI app built by OpenEnv's own ``create_app``:
  ``/ws`` (one `KernelEnv` per WebSocket session, many sessions at once), ``/reset``, ``/step``,
  ``/state``, ``/schema``, ``/health``, ``/metadata``, ``/mcp``; every session evaluates on one
  shared, sandboxed `PoolEvaluator` (candidates run in its forked workers, never in the server).
* `TritonKernelEnvironment`: the OpenEnv ``Environment`` one session holds.
* `KernelAction`, `KernelObservation`, `KernelState`: the wire models (``/schema`` publishes them).
* `KernelEnvClient`: OpenEnv's WebSocket ``EnvClient`` typed for these models.
* ``tritongym openenv``: the CLI that serves it (cli.py; importable without the extra).

Nothing here is imported by ``import tritongym``; the names below load OpenEnv on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

INSTALL_HINT = "pip install -e '.[openenv]' torch==2.13.0 (from the clone, your torch installed first)"

_LAZY = {
    "KernelAction": "models",
    "KernelObservation": "models",
    "KernelState": "models",
    "TritonKernelEnvironment": "environment",
    "SessionSettings": "environment",
    "KernelRequestError": "environment",
    "create_app": "app",
    "KernelEnvClient": "client",
}

__all__ = ["INSTALL_HINT", "require_openenv", *_LAZY]


def require_openenv() -> None:
    """Raise a `DependencyError` naming the extra when OpenEnv (or the server it needs) is missing."""
    import importlib.util

    from tritongym.errors import DependencyError

    # find_spec, not import: OpenEnv takes seconds to import, and a usage error should not wait for it.
    missing = [m for m in ("openenv", "fastapi", "uvicorn", "websockets") if importlib.util.find_spec(m) is None]
    if missing:
        raise DependencyError(f"the OpenEnv server needs {', '.join(missing)}: {INSTALL_HINT}")


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
