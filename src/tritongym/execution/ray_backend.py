"""`RayPool`: the same pool interface over Ray actors, for users who outgrow one machine.

    pool = make_pool("ray", workers=8)         # joins a running cluster (verl's own) or starts one

Each actor owns a one-slot `LocalPool` (a fork server, warm references) and evaluates one job at a
time; on GPUs an actor asks for one GPU (``num_gpus=1``; Ray sets ``CUDA_VISIBLE_DEVICES``), on
CPUs for one CPU. The driver keeps every job until its verdict arrives: when an actor dies (its
node, an OOM kill, ``ray.kill``), Ray restarts it (``max_restarts=-1``) and the driver sends the
job it was running to the next free actor. A job is answered exactly once (its future is set
once); a job that kills actors twice in a row ends in an `EvaluatorError`, not a loop.

Ray is an optional extra (``pip install -e '.[ray]'``); nothing else in tritongym imports it.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from typing import Any

from tritongym.errors import DependencyError, EvaluatorError
from tritongym.evaluator.result import EvalResult
from tritongym.execution.requests import EvalRequest, PoolStats

#: How many times a job may lose its actor before it fails.
MAX_ATTEMPTS = 2


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise DependencyError("backend='ray' needs Ray: pip install -e '.[ray]'") from exc
    return ray


class _Evaluator:
    """The actor: a one-slot local pool, kept warm between jobs."""

    def __init__(self) -> None:
        from tritongym.execution.pool import LocalPool

        self.pool = LocalPool(1)

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.pool.submit(request).result()

    def ping(self) -> bool:
        return True


class RayPool:
    """Evaluate on Ray actors with `LocalPool`'s interface (`submit`, `cancel`, `stats`, `close`).

    Args:
        workers: actors (default: the cluster's GPUs when `use_gpus`, else its CPUs, at most 64).
        address: ``auto`` joins a running cluster; None starts a local one if none is running.
        use_gpus: one GPU per actor (default: when the cluster has GPUs).
        ray_init: extra keyword arguments for ``ray.init`` when this pool starts Ray.
    """

    def __init__(self, workers: int | None = None, *, address: str | None = None, use_gpus: bool | None = None,
                 ray_init: dict[str, Any] | None = None) -> None:
        ray = _ray()
        self._ray = ray
        self._started_ray = False
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, **(ray_init or {}))
            self._started_ray = True
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        self.use_gpus = bool(gpus) if use_gpus is None else use_gpus
        if workers is None:
            workers = gpus if self.use_gpus else min(64, max(1, int(resources.get("CPU", 1))))
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.workers = workers
        actor = ray.remote(num_gpus=1 if self.use_gpus else 0, num_cpus=0 if self.use_gpus else 1,
                           max_restarts=-1, max_task_retries=0)(_Evaluator)
        self._actors = [actor.remote() for _ in range(workers)]
        self._queue: queue.Queue[tuple[EvalRequest, Future[EvalResult], int] | None] = queue.Queue()
        self._lock = threading.Lock()
        self._closed = False
        self._completed = self._failed = self._restarts = self._cancelled = self._busy = 0
        self._threads = [threading.Thread(target=self._drive, args=(a,), daemon=True, name=f"tritongym-ray-{i}")
                         for i, a in enumerate(self._actors)]
        for thread in self._threads:
            thread.start()

    def _drive(self, actor: Any) -> None:
        """One thread per actor: take a job, run it there, answer it or hand it on."""
        ray = self._ray
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, future, attempts = item
            if future.cancelled() or (attempts == 0 and not future.set_running_or_notify_cancel()):
                with self._lock:
                    self._cancelled += 1
                continue
            with self._lock:
                self._busy += 1
            try:
                result = ray.get(actor.evaluate.remote(request))
            except ray.exceptions.RayActorError as exc:
                with self._lock:
                    self._restarts += 1
                if getattr(future, "_tritongym_cancel", False):
                    future.set_exception(CancelledError())
                elif attempts + 1 >= MAX_ATTEMPTS:
                    with self._lock:
                        self._failed += 1
                    future.set_exception(EvaluatorError(f"the job's actor died {MAX_ATTEMPTS} times: {exc}"))
                else:
                    self._queue.put((request, future, attempts + 1))  # another actor takes it
                self._wait_restarted(actor)
            except ray.exceptions.RayTaskError as exc:
                with self._lock:
                    self._failed += 1
                cause = exc.as_instanceof_cause() if hasattr(exc, "as_instanceof_cause") else exc
                future.set_exception(cause)
            else:
                if getattr(future, "_tritongym_cancel", False):
                    with self._lock:
                        self._cancelled += 1
                    future.set_exception(CancelledError())
                else:
                    with self._lock:
                        self._completed += 1
                    future.set_result(result)
            finally:
                with self._lock:
                    self._busy -= 1

    def _wait_restarted(self, actor: Any, limit: float = 300.0) -> None:
        """Block this actor's thread until Ray has restarted the actor (it answers a ping)."""
        ray = self._ray
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and not self._closed:
            try:
                ray.get(actor.ping.remote(), timeout=30)
                return
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                time.sleep(0.5)

    def submit(self, request: EvalRequest) -> Future[EvalResult]:
        from tritongym.execution.pool import PoolClosed

        if self._closed:
            raise PoolClosed("the pool is closed")
        future: Future[EvalResult] = Future()
        self._queue.put((request, future, 0))
        return future

    def cancel(self, future: Future[EvalResult]) -> bool:
        """A queued job never runs; a running one is answered with `CancelledError` when its actor
        returns (Ray cannot interrupt an actor's running method without killing the actor)."""
        if future.cancel():
            return True
        if future.done():
            return False
        future._tritongym_cancel = True  # type: ignore[attr-defined]
        return True

    def actors(self) -> list[Any]:
        return list(self._actors)

    def stats(self) -> PoolStats:
        with self._lock:
            return PoolStats(slots=self.workers, busy=self._busy, queued=self._queue.qsize(),
                             completed=self._completed, failed=self._failed, restarts=self._restarts,
                             cancelled=self._cancelled, sandbox="per actor", launcher="ray",
                             extra={"gpus": self.use_gpus})

    def close(self, wait: bool = True) -> None:
        if self._closed:
            return
        self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
        for actor in self._actors:
            self._ray.kill(actor)
        if self._started_ray:
            self._ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
