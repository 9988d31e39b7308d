"""Warm references keyed by (problem, device, jailed): client problem code (jailed) and code from this
machine (trusted) never share a runner or a fork server, and each kind of server is started as its
kind must be.

Real reference workers: forks of a real trusted server and of a real jailed (bwrap) server, or fresh
bwrap workers; tiny problems; no candidate runs. The one stand-in: a machine where the jailed server
cannot run (nested namespaces refused) is simulated by making `forkserver_problem` name a reason,
since this machine has them.
"""

from __future__ import annotations

import time

import pytest
from tests.execution.conftest import needs_forkserver
from tests.execution.scaled_problems import runner_kept as kept
from tests.execution.scaled_problems import scaled_relu as problem

from tritongym.evaluator.jail.sandbox import WorkerProcess
from tritongym.execution import forkserver
from tritongym.execution.forkserver import ForkedWorker
from tritongym.execution.references import JAILED_SERVER_PIDS, FreshJailedReferences, WarmReferences

pytestmark = [pytest.mark.sandbox, needs_forkserver()]


def status_field(pid: int, name: str) -> list[str]:
    with open(f"/proc/{pid}/status") as handle:
        return next(line.split()[1:] for line in handle if line.startswith(name + ":"))


def ancestors(pid: int) -> list[int]:
    found = []
    while pid > 1:
        pid = int(status_field(pid, "PPid")[0])
        found.append(pid)
    return found


@pytest.fixture
def references():
    cache = WarmReferences(max_idle=4, threads=1)
    yield cache
    cache.close()


def test_the_jailed_servers_caps_default_to_the_idle_bound_plus_8_gib_per_slot():
    gib = 1 << 30
    assert JAILED_SERVER_PIDS == 4096
    assert WarmReferences().jail_memory_bytes == 4 * gib + 8 * gib  # max_idle_bytes 4 GiB, one slot
    assert WarmReferences(max_idle_bytes=gib, slots=3).jail_memory_bytes == gib + 3 * 8 * gib
    assert WarmReferences(max_idle_bytes=gib, slots=0).jail_memory_bytes == gib + 8 * gib  # at least one
    assert WarmReferences(max_idle_bytes=gib, slots=2, jail_memory_bytes=5 * gib).jail_memory_bytes == 5 * gib


def test_jailed_and_trusted_runners_of_one_problem_are_kept_apart(references):
    view = references.jailed()
    assert references.jailed() is view and view.cache is references
    assert references.server_pid("cpu", True) is None and references.server_pid("cpu", False) is None
    jailed = view.acquire(problem(51), "cpu", 60.0)
    trusted = references.acquire(problem(51), "cpu", 60.0)
    assert (jailed.jailed, trusted.jailed) == (True, False)
    assert (jailed.timeout, jailed.device) == (60.0, "cpu")
    assert isinstance(jailed.process, ForkedWorker) and isinstance(trusted.process, ForkedWorker)
    jailed_server, trusted_server = references._servers[("cpu", True)], references._servers[("cpu", False)]
    assert jailed.process.server is jailed_server and trusted.process.server is trusted_server
    assert jailed.process.mode == "bwrap" and trusted.process.mode == "none"
    # The jailed server forks reference workers only, in one cgroup capping its whole tree.
    assert (jailed_server.trusted, jailed_server.roles, jailed_server.threads) == (False, ("reference",), 1)
    assert (trusted_server.trusted, trusted_server.roles, trusted_server.threads) == (True, ("reference",), 1)
    if jailed_server.cgroup is not None:  # where cgroups can be made (they can on this machine)
        assert jailed_server.cgroup.limits == {"pids": JAILED_SERVER_PIDS, "memory": references.jail_memory_bytes}
    assert references.server_pid("cpu", True) == jailed_server.process.pid
    # Each handle's pid is the worker's own host PID (the memory bound reads its /proc): the trusted
    # server's child itself; for the jailed server, PID 2 of the namespace its middle process made.
    for runner, server in ((jailed, jailed_server), (trusted, trusted_server)):
        pid = runner.process.pid
        assert pid is not None and server.process.pid in ancestors(pid)
        nspid = status_field(pid, "NSpid")
        assert nspid[0] == str(pid)
        assert nspid[1:] == ([] if runner is trusted else nspid[1:2] + ["2"])
        assert runner.process.pid == pid  # found once, then kept
    assert references.server_pid("cpu", False) == trusted_server.process.pid
    assert references.server_pid("cuda", False) is None
    assert (references.hits, references.misses) == (0, 2)

    view.release(jailed, reusable=True)
    references.release(trusted, reusable=True)
    assert references.idle() == 2 and kept(jailed) and kept(trusted)
    # Each kind gets its own runner back, whichever was released last.
    assert references.acquire(problem(51), "cpu", 10.0) is trusted
    assert view.acquire(problem(51), "cpu", 20.0) is jailed and jailed.timeout == 20.0
    assert (references.hits, references.misses, references.idle()) == (2, 2, 0)
    # A jailed runner released as not reusable is closed, not kept for the next client.
    job_folder = jailed_server._jobs / jailed.process.job
    assert job_folder.is_dir()
    view.release(jailed, reusable=False)
    assert not kept(jailed) and references.idle() == 0
    assert not job_folder.exists()  # the jailed server's folder for that job is gone with it
    references.release(trusted, reusable=True)
    other = view.acquire(problem(51), "cpu", 60.0)
    assert other is not trusted and other.jailed  # a trusted runner never serves the jail
    assert (references.hits, references.misses) == (2, 3)
    other.close()


def test_where_no_jailed_server_can_run_client_code_starts_fresh_and_still_jailed(references, monkeypatch):
    calls: list[str] = []

    def refused() -> str:
        calls.append("probed")
        return "nested namespaces are not available in the jail: (simulated)"

    monkeypatch.setattr(forkserver, "forkserver_problem", refused)
    first = references.jailed().acquire(problem(61), "cpu", 60.0)
    probes = len(calls)
    second = references.jailed().acquire(problem(62), "cpu", 60.0)
    try:
        for runner in (first, second):
            assert isinstance(runner.process, WorkerProcess) and runner.process.mode == "bwrap"
            assert runner.jailed and runner.process.alive()
        assert probes >= 1 and len(calls) == probes  # not asked again: the answer is remembered
        assert ("cpu", True) in references._no_server and ("cpu", True) not in references._servers
        assert references.server_pid("cpu", True) is None
        # Code from this machine still gets its warm trusted server.
        trusted = references.acquire(problem(61), "cpu", 60.0)
        assert isinstance(trusted.process, ForkedWorker) and ("cpu", False) not in references._no_server
        trusted.close()
    finally:
        first.close()
        second.close()


def test_without_fork_servers_no_server_is_started_for_either_kind():
    cache = WarmReferences(threads=1, fork=False)
    try:
        runner = cache.jailed().acquire(problem(71), "cpu", 60.0)
        assert isinstance(runner.process, WorkerProcess) and runner.process.mode == "bwrap" and runner.jailed
        cache.jailed().release(runner, reusable=True)
        assert cache.idle() == 1 and cache._servers == {} and cache._no_server == set()
        assert cache.jailed().acquire(problem(71), "cpu", 30.0) is runner and cache.hits == 1
        runner.close()
    finally:
        cache.close()


def test_fresh_jailed_references_start_a_jailed_worker_each_time_and_keep_none():
    source = FreshJailedReferences()
    first = source.acquire(problem(81), "cpu", 45.0)
    second = source.acquire(problem(81), "cpu", 45.0)
    try:
        assert first is not second
        for runner in (first, second):
            assert isinstance(runner.process, WorkerProcess) and runner.process.mode == "bwrap"
            assert (runner.jailed, runner.device, runner.timeout) == (True, "cpu", 45.0)
    finally:
        source.release(first, reusable=True)  # reusable or not: closed
        source.release(second, reusable=False)
    assert not kept(first) and not kept(second)


def environment_of(pid: int, waiting_for: str, within: float = 5.0) -> dict[str, str]:
    """The process's environment once it holds `waiting_for`, or as it is after `within` seconds.

    Between fork and exec ``/proc/<pid>/environ`` still shows the parent's environment (this test
    process's), and the waiting shell may not have exec'd yet when `acquire` returns."""
    deadline = time.monotonic() + within
    while True:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            pairs = [item.split(b"=", 1) for item in handle.read().split(b"\0") if b"=" in item]
        env = {key.decode(): value.decode() for key, value in pairs}
        if waiting_for in env or time.monotonic() > deadline:
            return env
        time.sleep(0.02)


@pytest.mark.parametrize("threads", [1, 2])
def test_fresh_workers_get_the_caches_torch_thread_count(threads):
    # Fresh (unforked) trusted workers: the thread cap is in the environment the worker starts with
    # (its waiting shell's, which the worker inherits).
    cache = WarmReferences(threads=threads, fork=False)
    try:
        runner = cache.acquire(problem(91), "cpu", 60.0)
        env = environment_of(runner.process.pid, "OMP_NUM_THREADS")
        assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == (str(threads), str(threads))
        runner.close()
    finally:
        cache.close()


def test_a_server_that_cannot_start_a_worker_is_the_machines_fault_and_is_replaced(references):
    import socket

    from tritongym.evaluator.reference import ReferenceWorkerLost

    first = references.acquire(problem(95), "cpu", 60.0)
    first.close()
    server = references._servers[("cpu", False)]
    server.control.shutdown(socket.SHUT_WR)  # the control channel breaks; the process still runs
    assert not server.lost()
    with pytest.raises(ReferenceWorkerLost) as lost:
        references.acquire(problem(96), "cpu", 60.0)
    assert str(lost.value).startswith("the reference fork server did not start a worker: the fork server is gone")
    assert server.lost()  # so the next miss replaces it
    second = references.acquire(problem(96), "cpu", 60.0)
    try:
        assert references._servers[("cpu", False)] is not server and second.process.alive()
        assert references.misses == 3
    finally:
        second.close()
