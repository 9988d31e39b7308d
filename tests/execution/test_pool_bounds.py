"""The pool's retry limit: how often a job runs when its fork server keeps dying.

Real jailed fork servers, killed from outside (as a crash or the OOM killer would) while the job's
candidate provably runs (it spins until killed and says so on its log first).
LRU eviction of warm references: tests/execution/test_references_lru.py.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM, needs_forkserver

from tritongym import EvalOptions, EvaluatorError, Status
from tritongym.execution import EvalRequest, LocalPool, PoolClosed

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

OPTIONS = EvalOptions(device="cpu", num_trials=2, input_families=(), timeout=120.0)
SPIN = FIXTURES / "relu_spin_until_killed.py"


def logs_with(marker: str) -> set[Path]:
    found = set()
    for log in Path(tempfile.gettempdir()).glob("tritongym-*/candidate.log"):
        try:
            if marker in log.read_text(errors="replace"):
                found.add(log)
        except OSError:
            pass
    return found


def wait_for_new_log(marker: str, seen: set[Path], timeout: float = 120.0) -> Path:
    """The next candidate log carrying `marker` that is not in `seen` (a new attempt is spinning)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        new = logs_with(marker) - seen
        if new:
            return new.pop()
        time.sleep(0.1)
    raise AssertionError(f"no new attempt reached its loop in {timeout} s")


def kill_server(pool: LocalPool) -> object:
    (launcher,) = pool._slots[0].launchers.values()
    os.killpg(launcher.process.popen.pid, signal.SIGKILL)
    launcher.process.popen.wait(timeout=30)
    return launcher


def test_a_job_whose_fork_server_dies_twice_runs_twice_and_ends_in_an_error_not_a_verdict():
    marker = f"tritongym-retry-{uuid.uuid4().hex}"
    spinner = SPIN.read_text().replace("MARKER_PLACEHOLDER", marker)
    with LocalPool(1, launcher="forkserver") as pool:
        future = pool.submit(EvalRequest(RELU_PROBLEM, spinner, OPTIONS))
        job = future._tritongym_job
        first = wait_for_new_log(marker, set())
        assert job.attempts == 1
        killed = kill_server(pool)
        second = wait_for_new_log(marker, {first})  # the job runs again, on a new server
        (replacement,) = pool._slots[0].launchers.values()
        assert replacement is not killed and job.attempts == 2
        kill_server(pool)
        with pytest.raises(EvaluatorError, match="the fork server died twice while running this job"):
            future.result(timeout=120)
        assert job.attempts == 2  # not a third time: a job that kills servers must not loop
        assert second != first
        stats = pool.stats()
        assert (stats.restarts, stats.failed, stats.completed, stats.cancelled) == (2, 1, 0, 0)
        # The slot goes on with a third server.
        after = pool.submit(EvalRequest(RELU_PROBLEM, FIXTURES / "relu_honest.py", OPTIONS)).result(timeout=300)
        assert after.status == Status.OK, (after.status, after.error)
        assert pool.stats().completed == 1 and pool.stats().restarts == 2


def test_a_job_whose_fork_server_dies_once_is_answered_by_its_second_run():
    marker = f"tritongym-retry-once-{uuid.uuid4().hex}"
    spinner = SPIN.read_text().replace("MARKER_PLACEHOLDER", marker)
    with LocalPool(1, launcher="forkserver") as pool:
        future = pool.submit(EvalRequest(RELU_PROBLEM, spinner, EvalOptions(**{**OPTIONS.__dict__, "timeout": 4.0})))
        job = future._tritongym_job
        wait_for_new_log(marker, set())
        kill_server(pool)
        result = future.result(timeout=120)  # the second run spins to its own 4 s timeout: a verdict
        assert result.status == Status.TIMEOUT, (result.status, result.error)
        assert job.attempts == 2
        stats = pool.stats()
        assert (stats.restarts, stats.failed, stats.completed) == (1, 0, 1)


# -- arguments, closing and counters, without an evaluation --------------------------------------------

def test_pool_arguments_are_checked():
    with pytest.raises(ValueError, match="launcher must be auto, forkserver or spawn, got 'fork'"):
        LocalPool(1, launcher="fork")
    for workers in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError, match="workers must be an integer >= 1, got"):
            LocalPool(workers)


def test_an_idle_pool_reports_its_shape_and_refuses_what_is_not_a_request():
    from concurrent.futures import Future

    from tritongym.evaluator.jail.sandbox import resolve_mode
    from tritongym.execution.pool import _cores

    pool = LocalPool(2, queue_size=3, reference_cache=4, threads=None)
    try:
        assert pool.workers == 2 and pool._queue.maxsize == 3
        assert pool.threads == max(1, _cores() // 2)
        assert pool.references is not None and pool.references.max_idle == 4
        assert pool.references.threads == pool.threads
        stats = pool.stats()
        assert (stats.slots, stats.busy, stats.queued, stats.completed, stats.failed, stats.restarts,
                stats.cancelled) == (2, 0, 0, 0, 0, 0, 0)
        assert stats.launcher == "auto" and stats.sandbox == resolve_mode("auto")
        assert stats.extra == {"reference_hits": 0, "reference_misses": 0}
        with pytest.raises(TypeError, match="submit takes an EvalRequest, got str"):
            pool.submit("relu.py")
        answered = Future()
        answered.set_result(None)
        assert pool.cancel(answered) is False  # answered already, and not one of this pool's jobs
        assert [slot.thread.name for slot in pool._slots] == ["tritongym-slot-0", "tritongym-slot-1"]
        assert all(slot.thread.is_alive() and slot.thread.daemon for slot in pool._slots)
    finally:
        pool.close()
    assert not any(slot.thread.is_alive() for slot in pool._slots)
    with pytest.raises(PoolClosed, match="the pool is closed"):
        pool.submit(EvalRequest(RELU_PROBLEM, "x", OPTIONS))
    pool.close()  # a second close is a no-op


def test_pool_defaults():
    from tritongym.execution.pool import _cores, default_workers

    pool = LocalPool(1, launcher="spawn", reference_cache=0, threads=3)
    try:
        assert pool.references is None and pool.threads == 3 and pool._queue.maxsize == 64
        assert pool.stats().launcher == "spawn"
        assert pool.stats().extra == {"reference_hits": 0, "reference_misses": 0}
    finally:
        pool.close()
    assert default_workers("cpu") == _cores()
    import torch

    assert default_workers("auto") == (torch.cuda.device_count() if torch.cuda.is_available() else _cores())


def test_closing_cancels_the_queued_jobs_and_counts_them():
    marker = f"tritongym-close-{uuid.uuid4().hex}"
    spinner = SPIN.read_text().replace("MARKER_PLACEHOLDER", marker)
    pool = LocalPool(1, launcher="forkserver")
    running = pool.submit(EvalRequest(RELU_PROBLEM, spinner, EvalOptions(**{**OPTIONS.__dict__, "timeout": 3.0})))
    queued = [pool.submit(EvalRequest(RELU_PROBLEM, FIXTURES / "relu_honest.py", OPTIONS)) for _ in range(2)]
    wait_for_new_log(marker, set())
    assert pool.stats().queued == 2 and pool.stats().busy == 1
    pool.close(cancel_queued=True)  # waits for the running job (it times out after 3 s)
    assert all(f.cancelled() for f in queued)
    assert running.result(timeout=1).status == Status.TIMEOUT
    stats = pool.stats()
    assert (stats.cancelled, stats.completed, stats.busy, stats.queued) == (2, 1, 0, 0)


def test_where_each_jobs_reference_runs():
    from tritongym.execution.references import FreshJailedReferences

    honest = FIXTURES / "relu_honest.py"
    jailed_options = EvalOptions(**{**OPTIONS.__dict__, "sandbox": "bwrap"})
    open_options = EvalOptions(**{**OPTIONS.__dict__, "sandbox": "none"})
    with LocalPool(1, launcher="spawn", reference_cache=2) as pool:
        trusted = EvalRequest(RELU_PROBLEM, honest, jailed_options)
        client = EvalRequest(RELU_PROBLEM, honest, jailed_options, trusted_problem=False)
        assert pool.references_for(trusted, jailed_options) is pool.references  # warm, unjailed
        assert pool.references_for(client, jailed_options) is pool.references.jailed()  # warm, jailed
        # Without a sandbox there is no jail to put client code in: the trusted cache serves it.
        assert pool.references_for(client, open_options) is pool.references
    with LocalPool(1, launcher="spawn", reference_cache=0) as pool:
        assert pool.references_for(trusted, jailed_options) is None  # a fresh trusted worker each time
        assert isinstance(pool.references_for(client, jailed_options), FreshJailedReferences)
        assert pool.references_for(client, open_options) is None


def test_two_gpus_are_already_spread_over():
    from tritongym.execution.pool import slot_device

    assert [slot_device("cuda", i, 2) for i in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]
