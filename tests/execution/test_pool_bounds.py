"""The execution layer's limits: how often a job runs when its fork server keeps dying, and which
warm reference runners the LRU bound evicts, in which order.

Real fork servers and real reference workers (forked from a trusted server); the servers are killed
from outside, as a crash or the OOM killer would.
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
from tritongym.execution import EvalRequest, LocalPool
from tritongym.execution.references import WarmReferences
from tritongym.tasks.problem import Problem

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


# -- warm references: LRU ----------------------------------------------------------------------------

def problem(scale: int) -> Problem:
    """A distinct tiny problem per `scale` (a different source, so a different content hash)."""
    source = f'''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * {scale}


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''
    return Problem.from_source(source, name=f"relu_x{scale}")


def kept(runner) -> bool:
    """Not closed: `ReferenceRunner.close` removes its folder (a released fork handle cannot be asked)."""
    return runner._dir.exists()


@pytest.fixture
def references():
    cache = WarmReferences(max_idle=2, threads=1)
    yield cache
    cache.close()


def test_the_least_recently_released_runner_is_evicted_first(references):
    a, b, c = (references.acquire(problem(n), "cpu", 60.0) for n in (1, 2, 3))
    assert references.misses == 3 and references.hits == 0
    references.release(a, reusable=True)
    references.release(b, reusable=True)
    assert references.idle() == 2 and kept(a) and kept(b)
    references.release(c, reusable=True)  # over the bound: a, the oldest, goes
    assert references.idle() == 2
    assert not kept(a) and kept(b) and kept(c)
    # Using b makes it the most recent: the next eviction takes c.
    again = references.acquire(problem(2), "cpu", 60.0)
    assert again is b and references.hits == 1 and references.idle() == 1
    assert again.timeout == 60.0
    references.release(again, reusable=True)
    d = references.acquire(problem(4), "cpu", 60.0)
    references.release(d, reusable=True)
    assert not kept(c) and kept(b) and kept(d)
    fresh = references.acquire(problem(3), "cpu", 30.0)
    assert fresh is not c and references.misses == 5
    fresh.close()


def test_the_most_recently_released_runner_of_a_problem_is_handed_out_first(references):
    first, second = references.acquire(problem(5), "cpu", 60.0), references.acquire(problem(5), "cpu", 60.0)
    references.release(first, reusable=True)
    references.release(second, reusable=True)
    assert references.acquire(problem(5), "cpu", 10.0) is second
    assert references.acquire(problem(5), "cpu", 20.0) is first and first.timeout == 20.0
    assert references.hits == 2 and references.misses == 2 and references.idle() == 0
    references.release(first, reusable=True)
    references.release(second, reusable=True)


def test_a_runner_ended_abnormally_or_dead_is_closed_not_kept(references):
    runner = references.acquire(problem(6), "cpu", 60.0)
    references.release(runner, reusable=False)
    assert references.idle() == 0 and not kept(runner)
    dead = references.acquire(problem(6), "cpu", 60.0)
    dead.process.kill()
    references.release(dead, reusable=True)
    assert references.idle() == 0 and not kept(dead)
    # A runner that died while idle is not handed out: the next acquire starts a fresh one.
    idle = references.acquire(problem(6), "cpu", 60.0)
    references.release(idle, reusable=True)
    idle.process.kill()
    misses = references.misses
    fresh = references.acquire(problem(6), "cpu", 60.0)
    assert fresh is not idle and references.misses == misses + 1 and references.hits == 0
    assert not kept(idle)
    assert fresh.process.alive()
    references.release(fresh, reusable=True)


def test_the_memory_bound_keeps_only_the_most_recent_runner():
    cache = WarmReferences(max_idle=8, max_idle_bytes=1, threads=1)
    try:
        runners = [cache.acquire(problem(n), "cpu", 60.0) for n in (7, 8, 9)]
        for runner in runners:
            cache.release(runner, reusable=True)
        assert cache.idle() == 1  # every runner is over one byte; the newest is still kept
        assert [kept(r) for r in runners] == [False, False, True]
    finally:
        cache.close()
    assert not kept(runners[2])  # close() closes the idle ones too
