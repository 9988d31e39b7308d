"""`EvaluationService`'s seams with its pool, its clock and the machine, faked (no pool, no evaluation, no wait): the
pool each backend is made with, the device the default worker count is asked for, the cores counted where there is
no `os.sched_getaffinity` (macOS), the depth for a caller's pool that has no worker count, what `auto` means on a
machine with a GPU, the dispatcher's wake-up, back-off and prune periods on a fake clock, the 30 s re-check of a
waiter whose notice is lost, what `stop` waits for, and `_dispatch_now` where dispatching fails or where its own
thread already dispatches (a pool's future that is done when its callback is added).

tests/service/test_core_units.py runs the same paths with a real pool; these catch what a real pool on a CPU-only
machine cannot show (the `benchmarks/mutation.py` module `service_core_units` runs this file alone, in seconds).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.service.conftest import NO_TRITON

import tritongym.execution
import tritongym.service.core as core
from tritongym.service.config import ServiceConfig
from tritongym.service.core import EvaluationService, JobSpec, _on_cpu
from tritongym.service.store import JobState, NewJob


def config(tmp_path: Path, **overrides) -> ServiceConfig:
    return ServiceConfig(db_path=tmp_path / "jobs.db", **{"workers": 1, "device": "cpu", "sandbox": "bwrap",
                                                          **overrides})


class RecordingPool:
    """A pool that runs nothing: `submit` answers each request with a future already failed (or leaves it
    pending), `close` records how it was asked to close."""

    def __init__(self, workers: int = 1, *, answer: bool = True) -> None:
        self.workers = workers
        self.answer = answer
        self.requests: list = []
        self.closed: list[dict] = []

    def submit(self, request) -> Future:
        self.requests.append(request)
        future: Future = Future()
        if self.answer:
            future.set_exception(RuntimeError("no slot today"))
        return future

    def cancel(self, future: Future) -> bool:
        return future.cancel()

    def close(self, **kwargs) -> None:
        self.closed.append(kwargs)

    def stats(self):
        return SimpleNamespace(slots=self.workers, busy=0, queued=0, restarts=0, completed=0, failed=0,
                               cancelled=0, sandbox="bwrap", launcher="fake")


@pytest.fixture
def made(monkeypatch):
    """`make_pool` and `default_workers` as `start` finds them in tritongym.execution, recorded."""
    calls: dict[str, list] = {"make_pool": [], "default_workers": []}

    def make_pool(backend, workers=None, **kwargs):
        calls["make_pool"].append((backend, workers, kwargs))
        return RecordingPool(workers or 7)

    def default_workers(device="auto"):
        calls["default_workers"].append(device)
        return 3

    monkeypatch.setattr(tritongym.execution, "make_pool", make_pool)
    monkeypatch.setattr(tritongym.execution, "default_workers", default_workers)
    return calls


# -- the pool start() makes ----------------------------------------------------------------------


def test_a_ray_service_gets_a_ray_pool_of_the_configured_workers(tmp_path, made):
    service = EvaluationService(config(tmp_path, backend="ray", workers=5))
    service.start()
    try:
        # No local-only arguments (the Ray pool splits no torch threads of this process), no default count.
        assert made["make_pool"] == [("ray", 5, {})] and made["default_workers"] == []
        assert service.pool.workers == 5 and service._depth == 20
    finally:
        service.stop()
    assert len(service.pool.closed) == 1 and not service.pool.closed[0]["wait"]  # its own pool: closed


def test_a_ray_service_without_a_worker_count_leaves_it_to_the_ray_pool(tmp_path, made):
    service = EvaluationService(config(tmp_path, backend="ray", workers=None))
    service.start()
    try:
        assert made["make_pool"] == [("ray", None, {})] and made["default_workers"] == []
    finally:
        service.stop()


def test_a_local_service_without_a_worker_count_asks_for_the_default_of_its_device(tmp_path, made):
    # On a GPU machine default_workers("cuda:1") is the GPU count, default_workers(None) the core count.
    service = EvaluationService(config(tmp_path, workers=None, device="cuda:1"))
    service.start()
    try:
        assert made["default_workers"] == ["cuda:1"]
        [(backend, workers, kwargs)] = made["make_pool"]
        assert (backend, workers, set(kwargs)) == ("local", 3, {"parent_threads"})
    finally:
        service.stop()


def test_without_sched_getaffinity_the_torch_threads_split_the_machines_cores(tmp_path, made, monkeypatch):
    # macOS has no os.sched_getaffinity: the cores are the machine's count, 1 where even that is unknown.
    for cpu_count, workers, parent_threads in ((8, 2, 4), (None, 1, 1), (3, 4, 1)):
        monkeypatch.setattr(core, "os", SimpleNamespace(cpu_count=lambda n=cpu_count: n))
        made["make_pool"].clear()
        service = EvaluationService(config(tmp_path / f"{cpu_count}-{workers}", workers=workers))
        service.start()
        try:
            assert made["make_pool"] == [("local", workers, {"parent_threads": parent_threads})]
        finally:
            service.stop()


class PoolWithoutWorkerCount(RecordingPool):
    """A caller's pool that does not say how many jobs it runs at once (no `workers` attribute)."""

    def __init__(self) -> None:
        super().__init__()
        del self.workers

    def stats(self):
        return SimpleNamespace(slots=1, busy=0, queued=0, restarts=0, completed=0, failed=0, cancelled=0,
                               sandbox="bwrap", launcher="fake")


def test_a_callers_pool_without_a_worker_count_is_handed_four_jobs(tmp_path):
    service = EvaluationService(config(tmp_path), pool=PoolWithoutWorkerCount())
    service.start()
    try:
        assert service._depth == 4  # one slot assumed
    finally:
        service.stop()


def test_auto_is_a_gpu_where_this_process_sees_one(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _on_cpu("auto") is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _on_cpu("auto") is True


# -- stop ----------------------------------------------------------------------------------------


class RecordingThread:
    def __init__(self) -> None:
        self.joins: list[dict] = []

    def join(self, **kwargs) -> None:
        self.joins.append(kwargs)


def test_stop_waits_10_s_for_the_dispatcher_and_does_not_wait_for_its_pools_running_jobs(tmp_path):
    service = EvaluationService(config(tmp_path))
    service._pool = pool = RecordingPool()  # as start() would make it: the service's own
    service._dispatcher = dispatcher = RecordingThread()
    service.stop()
    # At most 10 s for a dispatcher stuck in a store call; the running candidates are abandoned to the next
    # start (a wait=True close would wait for each of them, up to its timeout).
    assert dispatcher.joins == [{"timeout": 10}]
    assert len(pool.closed) == 1 and not pool.closed[0]["wait"]
    assert not service.ready and service._stopping


# -- the dispatcher's periods, on a fake clock --------------------------------------------------------


class FakeTime:
    """core's `time`: a monotonic clock the test moves, a `sleep` that records and returns at once."""

    def __init__(self, now: float) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)


class ScriptedKick:
    """The dispatcher's wake-up event: each `wait` records its timeout, moves the clock to the next time of
    the script and, past the script's end, stops the service (the loop then ends at once)."""

    def __init__(self, service: EvaluationService, clock: FakeTime, times: list[float]) -> None:
        self.service, self.clock, self.times = service, clock, list(times)
        self.timeouts: list[float | None] = []

    def wait(self, timeout=None) -> bool:
        self.timeouts.append(timeout)
        if self.times:
            self.clock.now = self.times.pop(0)
        else:
            self.service._stopping = True
        return False

    def clear(self) -> None:
        pass

    def set(self) -> None:
        pass


def dispatcher_on_a_fake_clock(tmp_path, monkeypatch, times, **overrides):
    service = EvaluationService(config(tmp_path, **overrides))
    clock = FakeTime(times[0])
    monkeypatch.setattr(core, "time", clock)
    kick = ScriptedKick(service, clock, times)
    service._kick = kick
    prunes: list[float] = []

    def prune(*, max_age_s, max_finished):
        prunes.append(clock.now)
        return 0

    service.store.prune = prune
    service.prune_problems = lambda max_age_s=None: 0
    return service, clock, kick, prunes


def test_the_dispatcher_wakes_every_second_and_prunes_once_per_interval(tmp_path, monkeypatch):
    # Woken at 1000 (the first prune), 1005, 1010 (exactly one interval on: prune), 1015, 1019.9, 1020.
    times = [1000.0, 1005.0, 1010.0, 1015.0, 1019.9, 1020.0]
    service, clock, kick, prunes = dispatcher_on_a_fake_clock(tmp_path, monkeypatch, times, prune_interval_s=10.0)
    dispatched: list[float] = []
    service._dispatch_some = lambda: dispatched.append(clock.now)
    try:
        service._dispatch_loop()
        assert kick.timeouts == [1.0] * (len(times) + 1)  # a look at the queue at least once a second
        assert dispatched == times
        assert prunes == [1000.0, 1010.0, 1020.0]
        assert clock.sleeps == []
    finally:
        service.stop()


def test_the_dispatcher_backs_off_half_a_second_after_a_failure_and_logs_it(tmp_path, monkeypatch, caplog):
    times = [1000.0, 1001.0]
    service, clock, kick, prunes = dispatcher_on_a_fake_clock(tmp_path, monkeypatch, times)
    failures: list[float] = []

    def failing():
        failures.append(clock.now)
        raise OSError("database disk image is malformed")

    service._dispatch_some = failing
    try:
        with caplog.at_level(logging.ERROR, logger="tritongym.service"):
            service._dispatch_loop()
        assert failures == times and clock.sleeps == [0.5, 0.5]  # one back-off per failure, then on again
        logged = [r for r in caplog.records if r.name == "tritongym.service"]
        assert [r.getMessage() for r in logged] == ["dispatch failed; retrying"] * 2
        assert all(r.exc_info and isinstance(r.exc_info[1], OSError) for r in logged)
        assert prunes == []  # the failed round did not get as far as pruning
    finally:
        service.stop()


# -- _dispatch_now ------------------------------------------------------------------------------


def ready_service(tmp_path, pool: RecordingPool) -> EvaluationService:
    """A service with a caller's pool, ready to dispatch from the calling thread: no dispatcher thread."""
    service = EvaluationService(config(tmp_path), pool=pool)
    service._depth = 4
    service.ready = True
    return service


def test_a_dispatch_that_fails_in_a_submitting_thread_is_logged_and_left_to_the_dispatcher(tmp_path, caplog):
    service = ready_service(tmp_path, RecordingPool())

    def failing():
        raise OSError("disk I/O error")

    service._dispatch_some = failing
    try:
        with caplog.at_level(logging.ERROR, logger="tritongym.service"):
            service._dispatch_now()  # does not raise into the request that submitted
        [logged] = [r for r in caplog.records if r.name == "tritongym.service"]
        assert logged.getMessage() == "dispatch failed; the dispatcher will retry" and logged.levelname == "ERROR"
        assert isinstance(logged.exc_info[1], OSError)
        assert service._dispatch_lock.acquire(blocking=False)  # released after the failure
        service._dispatch_lock.release()
    finally:
        service.stop()


def test_a_future_done_before_its_callback_is_added_does_not_deadlock_the_dispatching_thread(tmp_path):
    # The pool may answer a request before submit() returns (a closed pool, a refused request): the callback
    # then runs at once, in the thread that holds the dispatch lock, and its _dispatch_now must wake the
    # dispatcher instead of waiting for that lock.
    pool = RecordingPool(answer=True)
    service = ready_service(tmp_path, pool)
    problem = service.problem_by_builtin("builtin/01_scaled_add")
    out: list = []
    submitter = threading.Thread(target=lambda: out.append(
        service.submit([JobSpec(problem.content_hash, NO_TRITON, {})], client="c")), daemon=True)
    submitter.start()
    submitter.join(10)
    try:
        assert not submitter.is_alive(), "the submitting thread deadlocked on its own dispatch lock"
        [[(record, created)]] = out
        assert created and len(pool.requests) == 1
        stored = service.get(record.id)
        assert (stored.state, stored.error) == (JobState.FAILED, "RuntimeError: no slot today")
        assert service._kick.is_set()  # the dispatcher is woken for what the callback could not dispatch
    finally:
        if submitter.is_alive():  # a deadlocked submitter: free it, so that it ends with the test
            service._dispatch_lock.release()
            submitter.join(10)
        service.stop()


def test_dispatching_from_a_thread_while_another_dispatches_wakes_the_dispatcher(tmp_path):
    service = ready_service(tmp_path, RecordingPool())
    service.store.insert_jobs([NewJob(id="j", idempotency_key=None, fingerprint="f", client="c", api="native",
                                      problem_hash="h", solution=NO_TRITON, options={})])
    with service._dispatch_lock:  # the dispatcher thread is dispatching
        caller = threading.Thread(target=service._dispatch_now, daemon=True)
        caller.start()
        caller.join(5)
        assert not caller.is_alive(), "_dispatch_now waited for the dispatcher's lock"
        assert service._kick.is_set() and service.get("j").state == JobState.QUEUED
    caller.join(5)
    service.stop()


# -- wait_final's safety re-check ---------------------------------------------------------------------


def test_a_waiter_whose_notice_is_lost_reads_the_store_again_after_30_s(tmp_path, monkeypatch):
    service = EvaluationService(config(tmp_path))
    service.store.insert_jobs([NewJob(id="j", idempotency_key=None, fingerprint="f", client="c", api="native",
                                      problem_hash="h", solution=NO_TRITON, options={})])
    timeouts: list[float] = []

    async def wait_for(future, timeout):
        # No notice comes (another process finished the job, or the notice was lost): the wait runs out.
        timeouts.append(timeout)
        service.store.finish("j", JobState.DONE, result={"status": "ok"})
        raise asyncio.TimeoutError

    monkeypatch.setattr(core, "asyncio", SimpleNamespace(
        wait_for=wait_for, to_thread=asyncio.to_thread, TimeoutError=asyncio.TimeoutError,
        get_running_loop=asyncio.get_running_loop))
    try:
        final = asyncio.run(service.wait_final(["j"], timeout=3600))
        # One wait of at most 30 s (not the whole hour), then the store again: the job found final.
        assert timeouts == [30.0] and final["j"].state == JobState.DONE
    finally:
        service.stop()
