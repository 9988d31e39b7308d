"""Execution at scale: a warm local pool (default), fork-server workers, and Ray for clusters.

    from tritongym.execution import EvalRequest, LocalPool, evaluate_many
    results = evaluate_many([EvalRequest(problem, code) for code in candidates])

See docs/architecture.md ("Execution") for the pool, the fork server and the trust boundaries.
Ray is an optional extra (``pip install -e '.[ray]'``), imported only by ``backend="ray"``.

Names are loaded on first use (PEP 562): the fork server's process (`forkserver_main`, whose
children become jailed workers) runs this package's ``__init__`` too, and must not load the pool
and with it the evaluator's verdict logic (tests/unit/test_layout.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongym.lazy import lazy_exports

_EXPORTS = {
    "aevaluate": "tritongym.execution.api",
    "aevaluate_many": "tritongym.execution.api",
    "close_shared_pools": "tritongym.execution.api",
    "default_pool": "tritongym.execution.api",
    "evaluate_many": "tritongym.execution.api",
    "make_pool": "tritongym.execution.api",
    "shared_pool": "tritongym.execution.api",
    "LocalPool": "tritongym.execution.pool",
    "PoolClosed": "tritongym.execution.pool",
    "QueueFull": "tritongym.execution.pool",
    "default_workers": "tritongym.execution.pool",
    "Completed": "tritongym.execution.requests",
    "EvalRequest": "tritongym.execution.requests",
    "PoolStats": "tritongym.execution.requests",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from tritongym.execution.api import (
        aevaluate,
        aevaluate_many,
        close_shared_pools,
        default_pool,
        evaluate_many,
        make_pool,
        shared_pool,
    )
    from tritongym.execution.pool import LocalPool, PoolClosed, QueueFull, default_workers
    from tritongym.execution.requests import Completed, EvalRequest, PoolStats
