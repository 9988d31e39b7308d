"""The public batch API: `evaluate_many`, its async twins `aevaluate` / `aevaluate_many`, `make_pool`.

    results = tritongym.evaluate_many([EvalRequest(problem, code) for code in group], workers=2)

    async for done in tritongym.aevaluate_many(requests):   # as they finish
        print(done.index, done.result.status)

Results of `evaluate_many` come back in input order; a job whose problem is broken raises its
`ProblemError` (or, with ``return_exceptions=True``, the exception takes the result's place).
Without an explicit ``pool=``, the batch runs on a process-wide pool per (backend, workers) that
stays warm across calls (an RL loop pays the fork servers' start-up once), closed at exit.
"""

from __future__ import annotations

import asyncio
import atexit
import sys
import threading
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Protocol

from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.result import EvalResult
from tritongym.execution.requests import Completed, EvalRequest, PoolStats

BACKENDS = ("local", "ray")


class Pool(Protocol):
    """What every backend offers (`LocalPool`, `RayPool`)."""

    workers: int

    def submit(self, request: EvalRequest) -> Future[EvalResult]: ...

    def cancel(self, future: Future[EvalResult]) -> bool: ...

    def stats(self) -> PoolStats: ...

    def close(self, wait: bool = True) -> None: ...


def make_pool(backend: str = "local", workers: int | None = None, **kwargs: Any) -> Pool:
    """A pool of the named backend: ``local`` (`LocalPool`) or ``ray`` (`RayPool`, the ``ray`` extra)."""
    if backend == "local":
        from tritongym.execution.pool import LocalPool

        return LocalPool(workers, **kwargs)
    if backend == "ray":
        from tritongym.execution.ray_backend import RayPool

        return RayPool(workers, **kwargs)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")


def _as_requests(requests: Iterable[EvalRequest | tuple[Any, ...]]) -> list[EvalRequest]:
    out = []
    for item in requests:
        if isinstance(item, EvalRequest):
            out.append(item)
        elif isinstance(item, tuple) and 2 <= len(item) <= 3:
            out.append(EvalRequest(*item))
        else:
            raise TypeError(f"expected EvalRequest or (problem, solution[, options]), got {type(item).__name__}")
    return out


def _progress_bar(total: int, progress: bool | None) -> Any:
    """A tqdm bar on stderr when asked, or by default when stderr is a terminal (None otherwise)."""
    if progress is False or (progress is None and not sys.stderr.isatty()):
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="evaluating", unit="eval", file=sys.stderr, dynamic_ncols=True)


def evaluate_many(requests: Iterable[EvalRequest | tuple[Any, ...]], *, workers: int | None = None,
                  backend: str = "local", progress: bool | None = None, pool: Pool | None = None,
                  return_exceptions: bool = False) -> list[EvalResult]:
    """Evaluate many requests concurrently; results in input order.

    Args:
        requests: `EvalRequest`s (or ``(problem, solution[, options])`` tuples).
        workers: concurrent evaluations (default: one per GPU, else the core count).
        backend: ``local`` or ``ray``; ignored when `pool` is given.
        progress: a progress bar on stderr (None: only when stderr is a terminal).
        pool: an open pool to use; by default the process-wide pool for (backend, workers),
            kept warm across calls (`shared_pool`).
        return_exceptions: put a job's exception in its place instead of raising it.
    """
    batch = _as_requests(requests)
    pool = pool or shared_pool(backend, workers)
    bar = _progress_bar(len(batch), progress)
    try:
        futures = [pool.submit(request) for request in batch]
        if bar is not None:
            for future in futures:
                future.add_done_callback(lambda _f: bar.update(1))
        results: list[Any] = []
        for future in futures:
            try:
                results.append(future.result())
            except BaseException as exc:
                if not return_exceptions:
                    for other in futures:
                        pool.cancel(other)
                    raise
                results.append(exc)
        return results
    finally:
        if bar is not None:
            bar.close()


_shared: dict[tuple[str, int | None], Pool] = {}
_shared_lock = threading.Lock()


def shared_pool(backend: str = "local", workers: int | None = None) -> Pool:
    """The process-wide pool for (backend, workers), made on first use and kept warm across calls
    (its fork servers and reference workers survive between batches); closed at exit or by
    `close_shared_pools`."""
    key = (backend, workers)
    with _shared_lock:
        pool = _shared.get(key)
        if pool is None:
            pool = _shared[key] = make_pool(backend, workers)
            if len(_shared) == 1:
                atexit.register(close_shared_pools)
        return pool


def close_shared_pools() -> None:
    """Close every pool `evaluate_many`, `aevaluate` and `aevaluate_many` made for themselves."""
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        pool.close()


def default_pool() -> Pool:
    """The shared local pool with the default number of workers (behind `aevaluate`)."""
    return shared_pool("local", None)


async def aevaluate(problem: Any, solution: Any, options: EvalOptions | None = None, *, pool: Pool | None = None,
                    **overrides: Any) -> EvalResult:
    """`tritongym.evaluate` without blocking the event loop (runs on `pool`, default: the shared one)."""
    if overrides:
        options = replace(options or EvalOptions(), **overrides)
    future = (pool or default_pool()).submit(EvalRequest(problem, solution, options))
    return await asyncio.wrap_future(future)


async def aevaluate_many(requests: Iterable[EvalRequest | tuple[Any, ...]], *, workers: int | None = None,
                         backend: str = "local", pool: Pool | None = None) -> AsyncIterator[Completed]:
    """Yield a `Completed` per request as each finishes (not in input order).

    A job's exception is raised from the iteration when its turn comes; leaving the loop early
    cancels what has not finished.
    """
    batch = _as_requests(requests)
    pool = pool or shared_pool(backend, workers)
    pending: dict[asyncio.Future[EvalResult], tuple[int, Future[EvalResult]]] = {}
    try:
        for index, request in enumerate(batch):
            future = pool.submit(request)
            pending[asyncio.wrap_future(future)] = (index, future)
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for finished in sorted(done, key=lambda f: pending[f][0]):
                index, _ = pending.pop(finished)
                yield Completed(index=index, request=batch[index], result=finished.result())
    finally:
        for _, future in pending.values():
            pool.cancel(future)
