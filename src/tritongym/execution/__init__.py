"""Execution at scale: a warm local pool (default), fork-server workers, and Ray for clusters.

    from tritongym.execution import EvalRequest, LocalPool, evaluate_many
    results = evaluate_many([EvalRequest(problem, code) for code in candidates])

See docs/architecture.md ("Execution") for the pool, the fork server and the trust boundaries.
Ray is an optional extra (``pip install -e '.[ray]'``), imported only by ``backend="ray"``.
"""

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

__all__ = [
    "Completed", "EvalRequest", "LocalPool", "PoolClosed", "PoolStats", "QueueFull", "aevaluate",
    "aevaluate_many", "close_shared_pools", "default_pool", "default_workers", "evaluate_many", "make_pool",
    "shared_pool",
]
