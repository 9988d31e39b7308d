"""The fork server's host side on a real trusted server: the worker handle's answers (alive, exit
description, wait-and-kill, log), job refusal, and a server that died.

A trusted server forks reference workers (problem code, no jail), so this runs in seconds; the
jailed candidate path is tests/execution/test_forkserver.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import threading
import time

import pytest
from tests.execution.conftest import needs_forkserver

from tritongym import EvaluatorError
from tritongym.evaluator.jail.sandbox import PASSTHROUGH_ENV, ResourceLimits
from tritongym.evaluator.reference import JAILED_REFERENCE_LIMITS, ReferenceRunner
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
        launcher._pump(5.0)  # what a waiting thread reads: the end of the channel, and why
        assert launcher._dead == "the fork server exited (killed by SIGKILL)"
        with pytest.raises(EvaluatorError,
                           match=r"the fork server is gone \(the fork server exited \(killed by SIGKILL\)\)"):
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


def test_a_waiter_returns_at_its_wait_even_while_another_thread_reads(server):
    # A trusted server serves every slot's references: several threads wait on it, one reads at a
    # time. A waiter must come back at its own wait, whether the channel is quiet or another
    # thread holds the reader.
    runner = ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                             spawner=server.start)
    try:
        job = runner.process.job
        started = time.monotonic()
        assert server.exit_code(job, 0.2) is None  # running, and the channel is quiet
        assert 0.15 <= time.monotonic() - started < 0.7
        answers: list[float] = []

        def wait_for_exit() -> None:
            began = time.monotonic()
            server.exit_code(job, 0.2)
            answers.append(time.monotonic() - began)

        assert server._recv_lock.acquire(timeout=5)  # another waiter is reading
        try:
            waiter = threading.Thread(target=wait_for_exit, daemon=True)
            waiter.start()
            waiter.join(timeout=5)
            assert not waiter.is_alive() and len(answers) == 1 and answers[0] < 0.7
            assert server._recv_lock.locked()  # it did not read (nor let go) while the other reader held it
        finally:
            server._recv_lock.release()
        assert runner.process.alive()
    finally:
        runner.close()


def test_a_job_the_server_refuses_is_an_error_with_the_servers_reason(server, tmp_path):
    # The host asks only for its own roles; a server that does not run the asked role (the two
    # sides disagreeing) refuses the job with its reason, and the host says so at once.
    candidate = "tritongym.evaluator.worker.candidate"
    server.modules[candidate] = "candidate"
    left, right = socket.socketpair()
    try:
        (tmp_path / "job").mkdir()
        started = time.monotonic()
        with pytest.raises(EvaluatorError, match=r"^the fork server refused the job: role 'candidate' is not one "
                                                 r"this server runs \(reference\)$"):
            server.start(candidate, str(tmp_path / "job" / "x.py"), job_dir=tmp_path / "job",
                         limits=ResourceLimits(), token="t", log_path=tmp_path / "log", channel_fd=right.fileno())
        assert time.monotonic() - started < 10  # not the 30 s of a server that never answers
    finally:
        del server.modules[candidate]
        left.close()
        right.close()
    assert server._failed == {} and not server.lost()
    again = ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                            spawner=server.start)
    again.close()


def test_a_failed_control_channel_loses_the_server_and_says_why():
    launcher = ForkServerLauncher("cpu", threads=1, trusted=True)
    control = launcher.control
    try:
        launcher.control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # connected to nothing
        launcher._pump(0.1)
        assert launcher._dead is not None and launcher._dead.startswith("control channel failed: ")
        assert launcher.lost() and launcher.process.popen.poll() is None  # lost though still running
        with pytest.raises(EvaluatorError, match=r"the fork server is gone \(control channel failed: "):
            ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                            spawner=launcher.start)
    finally:
        launcher.control.close()
        launcher.control = control
        launcher.close()


# A problem that tells, when the worker imports it, the environment and arguments it was started with
# (its output goes to the job's log).
TELLING_SOURCE = ("import json, os, resource, sys\nimport torch\n"
                  "tmp = os.statvfs('/tmp')\n"
                  "print('TOLD=' + json.dumps({'env': dict(os.environ), 'argv': sys.argv, 'tmp_bytes': tmp.f_blocks * "
                  "tmp.f_frsize, 'nofile': resource.getrlimit(resource.RLIMIT_NOFILE), "
                  "'threads': torch.get_num_threads()}), flush=True)\n" + SOURCE)


def told(runner: ReferenceRunner) -> dict:
    runner.setup(0)  # the worker imports the problem before it answers
    line = next(line for line in runner.process.log_path.read_text().splitlines() if line.startswith("TOLD="))
    return json.loads(line[len("TOLD="):])


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "jailed"])
def test_a_forked_worker_gets_the_jobs_environment_arguments_and_a_private_log(trusted, monkeypatch):
    monkeypatch.setenv("CC", "cc-from-the-host")  # passed through (PASSTHROUGH_ENV)
    monkeypatch.setenv("TRITONGYM_HOST_ONLY", "1")  # the host's other variables stay out
    # A jailed server may fork two roles: it names both when asked for a third.
    launcher = ForkServerLauncher("cpu", threads=1, trusted=True) if trusted else \
        ForkServerLauncher("cpu", threads=1, roles=("reference", "candidate"))
    try:
        if not trusted:
            with pytest.raises(EvaluatorError, match=r"^this fork server starts tritongym.evaluator.worker.reference, "
                                                     r"tritongym.evaluator.worker.candidate only, not "
                                                     r"tritongym.evaluator.cleanroom.worker$"):
                launcher.start("tritongym.evaluator.cleanroom.worker", "/nonexistent.py")
        # The job's own limits (a jailed job's /tmp size and rlimits), a problem path and extra arguments.
        limits = ResourceLimits(**{**JAILED_REFERENCE_LIMITS.__dict__, "job_dir_bytes": 64 << 20,
                                   "max_open_files": 512})

        def spawner(module: str, source: str, **kwargs: object) -> ForkedWorker:
            return launcher.start(module, source, **{**kwargs, "limits": limits}, problem_path=source,
                                  extra_args=("--allow-forbidden",))

        runner = ReferenceRunner(Problem.from_source(TELLING_SOURCE, name="telling"), device="cpu", timeout=60.0,
                                 jailed=not trusted, spawner=spawner)
        try:
            seen = told(runner)
            job_dir = str(runner._dir / "job")
            home = job_dir if trusted else "/job"
            source = f"{home}/problem.py"
            env = seen["env"]
            assert re.fullmatch("[0-9a-f]{24}", env.pop("TRITONGYM_JOB"))
            expected = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
                        "USER": "sandbox", "LOGNAME": "sandbox", "HOME": home,
                        "TMPDIR": home if trusted else "/tmp", "TRITON_CACHE_DIR": f"{home}/.triton",
                        "TRITON_INTERPRET": "1", "CC": "cc-from-the-host"}
            expected.update({name: os.environ[name] for name in PASSTHROUGH_ENV if name in os.environ})
            assert {name: env.get(name) for name in expected} == expected
            assert "TRITONGYM_HOST_ONLY" not in env
            argv = seen["argv"]
            assert argv[:-2] == ["tritongym-reference",
                                 "--source", source, "--device", "cpu", "--problem", source, "--allow-forbidden"]
            assert argv[-2] == "--fd"
            assert seen["threads"] == 1  # the server's thread cap, set again in the job (its environment has none)
            if not trusted:
                assert seen["tmp_bytes"] == 64 << 20 and seen["nofile"] == [512, 512]
                # The server's copy of the job's files: read-only for the job's life, then removed.
                folder = launcher._jobs / runner.process.job
                assert stat.S_IMODE(folder.stat().st_mode) == 0o555
                assert [(p.name, stat.S_IMODE(p.stat().st_mode)) for p in folder.iterdir()] == [("problem.py", 0o444)]
                assert (folder / "problem.py").read_text() == TELLING_SOURCE
            assert runner.process.cgroup is launcher.cgroup  # the slot's cgroup, where this machine has one
            # The log is the evaluator's own file: created for the job, readable by this user only.
            assert stat.S_IMODE(os.stat(runner.process.log_path).st_mode) == 0o600
        finally:
            runner.close()
        assert not (launcher._jobs / runner.process.job).exists()  # forgotten with its job
        assert launcher._current is None and runner.process.job not in launcher._exits
        if not trusted:  # a jailed job whose limits name no size gets a 256 MiB /tmp
            limits = ResourceLimits(**{**JAILED_REFERENCE_LIMITS.__dict__, "job_dir_bytes": None})
            sized = ReferenceRunner(Problem.from_source(TELLING_SOURCE, name="telling"), device="cpu",
                                    timeout=60.0, jailed=True, spawner=spawner)
            try:
                assert told(sized)["tmp_bytes"] == 256 << 20
            finally:
                sized.close()
    finally:
        launcher.close()


def test_a_server_that_dies_while_starting_a_job_is_reported_at_once():
    launcher = ForkServerLauncher("cpu", threads=1, trusted=True)
    group = launcher.process.popen.pid
    try:
        os.killpg(group, signal.SIGSTOP)  # it reads no frame and answers nothing
        killer = threading.Timer(0.5, os.killpg, (group, signal.SIGKILL))
        killer.start()
        started = time.monotonic()
        # Why, whichever the host noticed first: the channel's end, its reset (the start frame was
        # left unread), or the exit itself.
        with pytest.raises(EvaluatorError, match=r"^the fork server did not start the job \((the fork server exited "
                                                 r"\(killed by SIGKILL\)|it exited: killed by SIGKILL|control channel "
                                                 r"failed: \[Errno 104\] Connection reset by peer)\)$"):
            ReferenceRunner(Problem.from_source(SOURCE, name="double"), device="cpu", timeout=60.0,
                            spawner=launcher.start)
        assert time.monotonic() - started < 10  # not the 30 s a server that is alive gets
        killer.join()
    finally:
        launcher.close()
