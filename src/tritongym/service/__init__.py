"""tritongym as a service: a durable HTTP evaluation queue, KernelGYM-compatible, and its clients.

    tritongym serve --workers 4 --db jobs.db          # the server (the ``service`` extra)

    from tritongym.service import Client
    result = Client("http://127.0.0.1:8000").evaluate("builtin/07_softmax", solution_source)

The clients need only httpx; the server needs FastAPI, uvicorn and prometheus-client
(``pip install -e '.[service]'``). Names are loaded on first use (PEP 562), so importing
this package pulls in neither. See docs/service.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongym.lazy import lazy_exports

if TYPE_CHECKING:
    from tritongym.service.app import create_app  # noqa: F401
    from tritongym.service.client import AsyncClient, Client, ServiceHTTPError  # noqa: F401
    from tritongym.service.config import ServiceConfig  # noqa: F401
    from tritongym.service.core import EvaluationService  # noqa: F401

_EXPORTS = {
    "AsyncClient": "tritongym.service.client",
    "Client": "tritongym.service.client",
    "ServiceHTTPError": "tritongym.service.client",
    "ServiceConfig": "tritongym.service.config",
    "EvaluationService": "tritongym.service.core",
    "create_app": "tritongym.service.app",
}

__all__ = sorted(_EXPORTS)


def _missing_extra(name: str, exc: ImportError) -> Exception:
    from tritongym.errors import DependencyError

    return DependencyError(f"tritongym.service.{name} needs the service extra (pip install -e '.[service]'): {exc}")


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), on_import_error=_missing_extra)
