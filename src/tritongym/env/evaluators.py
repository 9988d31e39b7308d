"""How an environment gets verdicts: the `Evaluator` protocol and the pool evaluator.

An environment never calls `tritongym.evaluate` directly; it holds an `Evaluator`, so many
environments can share one execution pool and the pool can be swapped (the execution layer's
warm `LocalPool` by default, a function, a remote client) without touching the env.

By default evaluations run on a `tritongym.execution.LocalPool` (candidates forked from a warm,
jailed fork server; see docs/architecture.md); the calling side only waits.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tritongym.evaluator import EvalOptions, EvalResult
    from tritongym.tasks import Problem


@runtime_checkable
class Evaluator(Protocol):
    """Turns (problem, candidate source) into an `EvalResult`. Implementations must be thread-safe.

    `evaluate_many` and `aevaluate` are the shape the execution layer exposes; anything with these
    three methods can back any number of environments.
    """

    def evaluate(self, problem: Problem, solution: str) -> EvalResult:
        """Evaluate one candidate and block until the verdict."""
        ...

    def evaluate_many(self, pairs: Sequence[tuple[Problem, str]]) -> list[EvalResult]:
        """Evaluate several candidates concurrently; results in the order of `pairs`."""
        ...

    async def aevaluate(self, problem: Problem, solution: str) -> EvalResult:
        """Evaluate one candidate without blocking the event loop."""
        ...

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings of this evaluator, recorded in trajectory provenance."""
        ...


def options_to_dict(options: Any) -> dict[str, Any]:
    """`EvalOptions` (or any dataclass) as JSON-ready data: tuples and sets become sorted lists."""
    if options is None:
        return {}
    data = asdict(options) if is_dataclass(options) else dict(options)

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (frozenset, set)):
            return sorted(clean(v) for v in value)
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    return clean(data)


class PoolEvaluator:
    """Evaluations on the execution layer's warm `LocalPool` (or a function on a thread pool).

    Args:
        options: the `EvalOptions` of every evaluation (None: the defaults).
        max_workers: concurrent evaluations (pool slots); on a GPU the timing of concurrent
            candidates interferes, so keep it at the number of devices there.
        evaluate_fn: ``(problem, solution, options) -> EvalResult`` run on a thread pool instead
            (a test double, a remote client such as ``tritongym.service.Client.evaluate``);
            None: the execution pool.
        pool: an execution pool to evaluate on (a `LocalPool`, a `RayPool`: anything with
            ``submit(EvalRequest) -> Future``), shared and left open by `close`; None: a
            `LocalPool` of `max_workers` slots, started on first use and closed by `close`.
    """

    def __init__(self, options: EvalOptions | None = None, *, max_workers: int = 1,
                 evaluate_fn: Callable[..., EvalResult] | None = None, pool: Any = None) -> None:
        if not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers must be an integer >= 1, got {max_workers!r}")
        if pool is not None and evaluate_fn is not None:
            raise ValueError("give a PoolEvaluator either a pool or an evaluate_fn, not both")
        if options is None:
            from tritongym.evaluator import EvalOptions

            options = EvalOptions()
        self.options = options
        self.max_workers = max_workers
        self._evaluate_fn = evaluate_fn
        self._pool: ThreadPoolExecutor | None = None
        self._execution_pool: Any = pool
        self._owns_execution_pool = pool is None
        self._lock = threading.Lock()

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="tritongym-eval")
            return self._pool

    def _local_pool(self) -> Any:
        """The execution layer's warm `LocalPool` (fork-server workers), made on first use."""
        with self._lock:
            if self._execution_pool is None:
                from tritongym.execution import LocalPool

                self._execution_pool = LocalPool(self.max_workers)
            return self._execution_pool

    def _submit(self, problem: Problem, solution: str) -> Any:
        from tritongym.execution import EvalRequest

        return self._local_pool().submit(EvalRequest(problem, solution, self.options))

    def evaluate(self, problem: Problem, solution: str) -> EvalResult:
        fn = self._evaluate_fn
        if fn is None:
            return self._submit(problem, solution).result()
        return fn(problem, solution, self.options)

    def evaluate_many(self, pairs: Sequence[tuple[Problem, str]]) -> list[EvalResult]:
        if self._evaluate_fn is None:
            futures = [self._submit(problem, solution) for problem, solution in pairs]
        else:
            futures = [self._executor().submit(self.evaluate, problem, solution) for problem, solution in pairs]
        return [future.result() for future in futures]

    async def aevaluate(self, problem: Problem, solution: str) -> EvalResult:
        if self._evaluate_fn is None:
            return await asyncio.wrap_future(self._submit(problem, solution))
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor(), self.evaluate, problem, solution)

    def describe(self) -> dict[str, Any]:
        if self._evaluate_fn is not None:
            backend = "function"
        elif self._owns_execution_pool:
            backend = "local"
        else:
            backend = type(self._execution_pool).__name__
        workers = self.max_workers if self._owns_execution_pool else getattr(self._execution_pool, "workers", None)
        return {"kind": "pool", "max_workers": workers, "options": options_to_dict(self.options), "backend": backend}

    def close(self) -> None:
        """Wait for running evaluations and release the threads and workers."""
        with self._lock:
            pool, self._pool = self._pool, None
            execution_pool = None
            if self._owns_execution_pool:
                execution_pool, self._execution_pool = self._execution_pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        if execution_pool is not None:
            execution_pool.close()

    def __enter__(self) -> PoolEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CallableEvaluator(PoolEvaluator):
    """Adapts a plain function ``(problem, solution) -> EvalResult`` (a test double, a remote client)."""

    def __init__(self, fn: Callable[[Problem, str], EvalResult], *, max_workers: int = 4) -> None:
        super().__init__(options=None, max_workers=max_workers, evaluate_fn=lambda p, s, _o: fn(p, s))
        self._fn = fn

    def describe(self) -> dict[str, Any]:
        return {"kind": "callable", "function": getattr(self._fn, "__qualname__", repr(self._fn))}


def as_evaluator(spec: Evaluator | Callable[[Problem, str], EvalResult] | None,
                 options: EvalOptions | None = None) -> Evaluator:
    """An `Evaluator` from an evaluator, a plain function, or None (a one-thread `PoolEvaluator`)."""
    if spec is None:
        return PoolEvaluator(options)
    if all(callable(getattr(spec, name, None)) for name in ("evaluate", "evaluate_many", "aevaluate")):
        return spec  # type: ignore[return-value]
    if callable(spec):
        return CallableEvaluator(spec)  # type: ignore[arg-type]
    raise TypeError(f"expected an Evaluator or a callable (problem, solution) -> EvalResult, got {type(spec).__name__}")
