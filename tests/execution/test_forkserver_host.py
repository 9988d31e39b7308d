"""The fork server's host side on a real trusted server: the worker handle's answers (alive, exit
description, wait-and-kill, log), job refusal, and a server that died.

A trusted server forks reference workers (problem code, no jail), so this runs in seconds; the
jailed candidate path is tests/execution/test_forkserver.py.
"""

from __future__ import annotations

import os
import signal

import pytest
from tests.execution.conftest import needs_forkserver

from tritongym import EvaluatorError
from tritongym.evaluator.reference import ReferenceRunner
from tritongym.execution.forkserver import ForkedWorker, ForkServerLauncher
from tritongym.tasks.problem import Problem

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

SOURCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(2, 2)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def server():
    launcher = ForkServerLauncher("cpu", threads=1, trusted=True)
    yield launcher
    launcher.close()


def test_a_worker_handle_answers_while_running_and_after_its_death(server):
    runner = ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                             spawner=server.start)
    try:
        worker = runner.process
        assert isinstance(worker, ForkedWorker) and worker.mode == "none" and worker.cgroup is None
        assert isinstance(worker.pid, int) and worker.pid > 0  # a trusted server's child: a host PID
        os.kill(worker.pid, 0)  # it exists
        assert worker.alive() and worker.exit_description() == "still running"
        assert server._current == worker.job
        assert worker.wait_exit(0.2) == "still running; killed"
        assert not worker.alive()
        assert worker.exit_description() in ("killed by SIGKILL", "exited with code 137")
        assert worker.wait_exit(0.0) == worker.exit_description()  # already dead: its description, no kill
        assert isinstance(worker.log_tail(), str)
        server.kill(worker.job)  # a dead job: nothing to do
        worker.release()
        assert worker.job not in server._exits and server._current is None
    finally:
        runner.close()


def test_the_server_starts_only_its_own_module(server):
    with pytest.raises(EvaluatorError, match="this fork server starts tritongym.evaluator.worker.reference only, not "
                                             "tritongym.evaluator.worker.candidate"):
        server.start("tritongym.evaluator.worker.candidate", "/nonexistent.py")
    assert not server.lost()


def test_a_dead_server_is_lost_and_refuses_jobs():
    launcher = ForkServerLauncher("cpu", threads=1, trusted=True)
    try:
        assert not launcher.lost()
        os.killpg(launcher.process.popen.pid, signal.SIGKILL)
        launcher.process.popen.wait(timeout=30)
        assert launcher.lost()
        with pytest.raises(EvaluatorError, match="the fork server is gone"):
            ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                            spawner=launcher.start)
        assert launcher.exit_code("no-such-job", wait=0.0) is None
        launcher.kill("no-such-job")  # lost: nothing is sent
        launcher.kill_current()
    finally:
        launcher.close()
    assert not launcher._home.exists()


def test_kill_current_kills_the_running_worker_and_is_a_no_op_without_one(server):
    runner = ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                             spawner=server.start)
    try:
        worker = runner.process
        assert server._current == worker.job and worker.alive()
        server.kill_current()  # from a cancelling thread: sends the kill, the slot reaps
        assert server.exit_code(worker.job, wait=10.0) is not None
        assert worker.exit_description() in ("killed by SIGKILL", "exited with code 137")
        server.kill_current()  # the job has exited: nothing is sent
        worker.release()
        assert server._current is None
        server.kill_current()  # no running job: nothing is sent
        assert not server.lost()
    finally:
        runner.close()
    # The server still serves.
    again = ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                            spawner=server.start)
    try:
        assert again.process.alive() and not server.lost()
    finally:
        again.close()


def test_host_pid_finds_nothing_where_no_descendant_matches():
    from tritongym.execution.forkserver import host_pid

    assert host_pid(os.getpid(), ["no-such-pid"]) is None
    assert host_pid(os.getpid(), []) == os.getpid()  # no nested namespace: the root itself


def test_exit_code_waits_up_to_its_wait_for_a_job_that_ends(server):
    runner = ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                             spawner=server.start)
    try:
        worker = runner.process
        assert server.exit_code(worker.job, 0.0) is None  # running: no exit yet, at once
        os.kill(worker.pid, signal.SIGKILL)  # ended behind the server's back: it reports the exit
        assert server.exit_code(worker.job, 0.9) is not None  # waited (under a second) for the report
        worker.release()
    finally:
        runner.close()
