"""`LocalPool`: a warm, bounded pool of evaluation slots on this machine (no service to start).

    submit(request) ──▶ bounded queue ──▶ slot thread 1 ──▶ fork server 1 (jailed) ──fork──▶ candidate
                                      └─▶ slot thread 2 ──▶ fork server 2 (jailed) ──fork──▶ candidate
                                                 └──────────▶ warm reference workers (per problem, LRU)

A slot runs one evaluation at a time (on a GPU, one per visible device: concurrent timing phases
would disturb each other). The slot's thread is the trusted parent of `tritongym.evaluate`: it
holds the seeds, the expected outputs and the verdict; the candidate runs in a child of the
slot's fork server (`forkserver`), or in a fresh jailed process where no fork server can run.

Guarantees: results come back in a `concurrent.futures.Future` per job; a job is run once and
answered once; a fork server that dies is replaced and the job it was running is retried once on
the new one (a job that kills two fork servers in a row ends in an exception, not a loop); a
reference worker that dies is treated the same way (a new one, the job run once more, then an
`EvaluatorError`), never as the problem's error;
`cancel` drops a queued job or kills a running one's candidate; `close` waits or cancels.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import replace
from typing import Any

from tritongym.errors import EvaluatorError, TritongymError
from tritongym.evaluator.jail.sandbox import resolve_mode
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.parent import SpawnLauncher, run_evaluation
from tritongym.evaluator.reference import ReferenceWorkerLost
from tritongym.evaluator.result import EvalResult
from tritongym.execution.references import FreshJailedReferences, WarmReferences
from tritongym.execution.requests import EvalRequest, PoolStats


class PoolClosed(RuntimeError):
    """The pool was closed; it accepts no more jobs."""


class QueueFull(RuntimeError):
    """The pool's queue is full and the caller asked not to wait (backpressure)."""


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_workers(device: str = "auto") -> int:
    """One slot per visible GPU for CUDA work, the core count on the CPU."""
    import torch

    if device != "cpu" and torch.cuda.is_available():
        return max(1, torch.cuda.device_count())
    return _cores()


def slot_device(device: str, slot: int, gpus: int) -> str:
    """The device a slot runs on: an unindexed ``cuda`` spreads the slots over the visible GPUs
    (slot i on ``cuda:i mod gpus``); anything else is used as given."""
    if device == "cuda" and gpus > 1:
        return f"cuda:{slot % gpus}"
    return device


class _TrackedSpawn(SpawnLauncher):
    """Fresh processes, remembering the running one so that `cancel` can kill it."""

    def __init__(self) -> None:
        self.current: Any = None
        self.should_cancel: Any = lambda: False

    def start(self, module: str, source_path: str, **kwargs: Any) -> Any:
        self.current = super().start(module, source_path, **kwargs)
        if self.should_cancel():  # cancelled while the job was being prepared
            self.current.kill()
        return self.current

    def kill_current(self) -> None:
        if self.current is not None:
            self.current.kill()

    def lost(self) -> bool:
        return False

    def close(self) -> None:
        self.current = None


class _Job:
    __slots__ = ("request", "future", "enqueued", "attempts", "cancel_requested", "slot")

    def __init__(self, request: EvalRequest) -> None:
        self.request = request
        self.future: Future[EvalResult] = Future()
        self.enqueued = time.monotonic()
        self.attempts = 0
        self.cancel_requested = False
        self.slot: _Slot | None = None


class _Slot:
    """One evaluation at a time; owns the fork servers (one per device) its candidates start from."""

    def __init__(self, pool: LocalPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.job: _Job | None = None
        self.launchers: dict[tuple[str, str], Any] = {}
        self.thread = threading.Thread(target=self.loop, name=f"tritongym-slot-{index}", daemon=True)

    def launcher_for(self, options: EvalOptions) -> Any:
        """The fork server for this request's (sandbox, device), started on first use."""
        from tritongym.evaluator.parent import resolve_device

        mode = resolve_mode(options.sandbox)
        device = resolve_device(options.device)
        key = (mode, device)
        launcher = self.launchers.get(key)
        if launcher is not None:
            return launcher
        if self.pool.launcher_kind == "spawn" or mode != "bwrap":
            launcher = _TrackedSpawn()
        else:
            from tritongym.execution.forkserver import ForkServerLauncher, jailed_forkserver_problem

            problem = jailed_forkserver_problem(device)
            if problem is not None and self.pool.launcher_kind == "forkserver":
                raise EvaluatorError(f"the fork server cannot run here: {problem}")
            launcher = _TrackedSpawn() if problem is not None else ForkServerLauncher(
                device=device, slot=self.index, threads=self.pool.threads, roles=("candidate", "cleanroom"))
        self.launchers[key] = launcher
        return launcher

    def loop(self) -> None:
        while True:
            job = self.pool._queue.get()
            if job is None:
                return
            self.run(job)

    def run(self, job: _Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            with self.pool._lock:
                self.pool._cancelled += 1
            return
        self.job, job.slot = job, self
        with self.pool._lock:
            self.pool._busy += 1
        try:
            result = self.evaluate(job)
        except BaseException as exc:  # noqa: BLE001 - every job gets an answer
            with self.pool._lock:
                if job.cancel_requested:
                    self.pool._cancelled += 1
                else:
                    self.pool._failed += 1
            job.future.set_exception(CancelledError() if job.cancel_requested else exc)
        else:
            with self.pool._lock:
                if job.cancel_requested:
                    self.pool._cancelled += 1
                else:
                    self.pool._completed += 1
            if job.cancel_requested:
                job.future.set_exception(CancelledError())
            else:
                job.future.set_result(result)
        finally:
            self.job, job.slot = None, None
            with self.pool._lock:
                self.pool._busy -= 1

    def evaluate(self, job: _Job) -> EvalResult:
        request = job.request
        options = request.options or EvalOptions()
        if options.device in ("cuda", "auto"):
            import torch

            from tritongym.evaluator.parent import resolve_device

            gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
            device = slot_device(resolve_device(options.device), self.index, gpus)
            if device != options.device:
                options = replace(options, device=device)
        queued = time.monotonic() - job.enqueued
        references = self.pool.references_for(request, options)
        while True:
            job.attempts += 1
            launcher = self.launcher_for(options)
            try:
                launcher.should_cancel = lambda: job.cancel_requested
                result = run_evaluation(request.problem, request.solution, options, launcher=launcher,
                                        references=references, phase_seconds={"queue": round(queued, 4)})
            except ReferenceWorkerLost as exc:
                # The reference worker died instead of answering (killed, out of memory, its fork
                # server gone): the machine's fault until it happens twice. A new one is started
                # (the cache never hands out a dead worker; a dead server is replaced).
                if job.cancel_requested:
                    raise
                with self.pool._lock:
                    self.pool._restarts += 1
                if job.attempts >= 2:
                    raise EvaluatorError("the reference worker died twice while running this job; no verdict was "
                                         f"given (the problem may exhaust its memory or end its own process): {exc}"
                                         ) from exc
                continue
            except TritongymError:
                if job.cancel_requested or not launcher.lost():
                    raise
                self.replace_launcher(launcher)
                if job.attempts >= 2:
                    raise
                continue
            if job.cancel_requested or not launcher.lost():
                return result
            # The fork server died under the job: the candidate's crash verdict may be the server's
            # doing, not the candidate's. Replace the server and run the job once more from scratch;
            # a second loss is reported as an error, never as a verdict.
            self.replace_launcher(launcher)
            if job.attempts >= 2:
                raise EvaluatorError("the fork server died twice while running this job; no verdict was given")

    def replace_launcher(self, launcher: Any) -> None:
        for key, value in list(self.launchers.items()):
            if value is launcher:
                del self.launchers[key]
        launcher.close()
        with self.pool._lock:
            self.pool._restarts += 1

    def kill_running(self) -> None:
        """Kill the running candidate (cancellation): the evaluation then ends at once."""
        for launcher in list(self.launchers.values()):
            launcher.kill_current()

    def close(self) -> None:
        for launcher in self.launchers.values():
            launcher.close()
        self.launchers.clear()


class LocalPool:
    """Evaluate many candidates on this machine, `workers` at a time, with warm workers.

    Args:
        workers: concurrent evaluations (default: one per visible GPU, else the core count).
        queue_size: jobs that may wait for a slot; `submit` blocks (or raises `QueueFull` with
            ``block=False``) beyond it. Default: 64 per slot.
        launcher: ``auto`` (a fork server per slot where the sandbox is bwrap and the device a
            CPU, else fresh processes: `forkserver.jailed_forkserver_problem`), ``forkserver``
            (required), or ``spawn`` (always fresh processes).
        reference_cache: idle warm reference workers kept (0: none, every evaluation starts one).
        device: used only for the default number of workers.
        threads: torch CPU threads of each slot's workers (default: cores // workers, at least 1).
            Several slots each running torch's default of one thread per core oversubscribe the
            cores (measured on 2 busy cores: output comparisons 30x slower with 2 threads than 1).
        parent_threads: torch CPU threads of *this* process, where the slots compare outputs
            (None: leave them; torch's setting is process-wide, so a pool inside a trainer does
            not change it unasked). A process that only evaluates (``tritongym run``, the
            service) passes `threads`.

    Use as a context manager; `close()` waits for running jobs and cancels queued ones.
    """

    def __init__(self, workers: int | None = None, *, queue_size: int | None = None, launcher: str = "auto",
                 reference_cache: int = 32, device: str = "auto", threads: int | None = None,
                 parent_threads: int | None = None) -> None:
        if launcher not in ("auto", "forkserver", "spawn"):
            raise ValueError(f"launcher must be auto, forkserver or spawn, got {launcher!r}")
        if workers is None:
            workers = default_workers(device)
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self.launcher_kind = launcher
        self.threads = threads or max(1, _cores() // workers)
        if parent_threads is not None:
            import torch

            torch.set_num_threads(max(1, parent_threads))
        self.references = (WarmReferences(max_idle=reference_cache, threads=self.threads, slots=workers)
                           if reference_cache > 0 else None)
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=queue_size or 64 * workers)
        self._lock = threading.Lock()
        self._closed = False
        self._busy = self._completed = self._failed = self._restarts = self._cancelled = 0
        self._slots = [_Slot(self, index) for index in range(workers)]
        for slot in self._slots:
            slot.thread.start()

    def references_for(self, request: EvalRequest, options: EvalOptions) -> Any:
        """Where this job's reference runs: unjailed for problem code from this machine, in the
        candidate's jail for problem code a client sent (unless the sandbox mode is ``none``)."""
        if request.trusted_problem or resolve_mode(options.sandbox) != "bwrap":
            return self.references  # None: a fresh (trusted) worker per evaluation
        return self.references.jailed() if self.references is not None else FreshJailedReferences()

    # -- submitting ------------------------------------------------------------------------
    def submit(self, request: EvalRequest, *, block: bool = True, timeout: float | None = None) -> Future[EvalResult]:
        """Queue one job; its future resolves to the `EvalResult` (or the exception it raised)."""
        if not isinstance(request, EvalRequest):
            raise TypeError(f"submit takes an EvalRequest, got {type(request).__name__}")
        if self._closed:
            raise PoolClosed("the pool is closed")
        job = _Job(request)
        try:
            self._queue.put(job, block=block, timeout=timeout)
        except queue.Full as exc:
            raise QueueFull(f"{self._queue.maxsize} jobs are already waiting; retry later") from exc
        job.future._tritongym_job = job  # type: ignore[attr-defined]  # for cancel()
        return job.future

    def cancel(self, future: Future[EvalResult]) -> bool:
        """Cancel a job: a queued one never runs; a running one's candidate is killed.

        Returns False when the job had already finished. The future then raises `CancelledError`.
        """
        if future.cancel():
            return True
        job: _Job | None = getattr(future, "_tritongym_job", None)
        if job is None or future.done():
            return False
        job.cancel_requested = True
        slot = job.slot
        if slot is not None:
            slot.kill_running()
        return True

    def stats(self) -> PoolStats:
        kinds = {type(launcher).__name__ for slot in self._slots for launcher in slot.launchers.values()}
        with self._lock:
            return PoolStats(
                slots=self.workers, busy=self._busy, queued=self._queue.qsize(), completed=self._completed,
                failed=self._failed, restarts=self._restarts, cancelled=self._cancelled,
                sandbox=resolve_mode("auto"),
                launcher="forkserver" if "ForkServerLauncher" in kinds else ("spawn" if kinds or
                                                                             self.launcher_kind == "spawn"
                                                                             else self.launcher_kind),
                extra={"reference_hits": self.references.hits if self.references else 0,
                       "reference_misses": self.references.misses if self.references else 0},
            )

    # -- closing ---------------------------------------------------------------------------
    def close(self, wait: bool = True, cancel_queued: bool = True) -> None:
        """Stop accepting jobs; cancel the queued ones (or run them), wait for the running ones."""
        if self._closed:
            return
        self._closed = True
        if cancel_queued:
            while True:
                try:
                    job = self._queue.get_nowait()
                except queue.Empty:
                    break
                if job is not None and job.future.cancel():
                    with self._lock:
                        self._cancelled += 1
        for _ in self._slots:
            self._queue.put(None)
        if wait:
            for slot in self._slots:
                slot.thread.join()
        for slot in self._slots:
            slot.close()
        if self.references is not None:
            self.references.close()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
