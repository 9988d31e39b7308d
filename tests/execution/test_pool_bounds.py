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
from tritongym.execution import EvalRequest, LocalPool

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
