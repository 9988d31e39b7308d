"""Warm reference runners under their bounds: which the LRU evicts, in which order, the memory bound,
and runners that died or ended abnormally.

Real reference workers (forks of a trusted fork server) for tiny distinct problems; no candidate runs.
"""

from __future__ import annotations

import pytest
from tests.execution.conftest import needs_forkserver
from tests.execution.scaled_problems import runner_kept as kept
from tests.execution.scaled_problems import scaled_relu as problem

from tritongym.execution.references import WarmReferences

pytestmark = [pytest.mark.sandbox, needs_forkserver()]


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
    assert (fresh.timeout, fresh.device, fresh.problem.name) == (30.0, "cpu", "relu_x3")
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


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
        return next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmRSS:"))


def test_resident_bytes_sums_a_process_and_its_descendants():
    import os
    import signal
    import subprocess
    import time

    from tritongym.execution.references import _resident_bytes

    # sh with two sleeping children (their RSS is stable while they sleep), in a session of its own.
    tree = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            pids, stack = [], [tree.pid]
            while stack:
                pid = stack.pop()
                pids.append(pid)
                with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
                    stack.extend(int(child) for child in handle.read().split())
            if len(pids) == 3 or time.monotonic() > deadline:
                break
        assert len(pids) == 3, pids
        # Just-started processes may still be faulting pages in: measure between two equal readings.
        for _ in range(100):
            before = sum(rss_bytes(pid) for pid in pids)
            measured = _resident_bytes(tree.pid)
            if sum(rss_bytes(pid) for pid in pids) == before:
                break
        assert measured == before
        assert before > rss_bytes(tree.pid)
    finally:
        os.killpg(tree.pid, signal.SIGKILL)  # the session this test started
        tree.wait(timeout=30)
    assert _resident_bytes(tree.pid) == 0  # gone: nothing to read


def test_the_cache_defaults_and_how_it_starts_runners():
    from tritongym.evaluator.jail.sandbox import WorkerProcess
    from tritongym.execution.forkserver import ForkedWorker

    defaults = WarmReferences()
    assert (defaults.max_idle, defaults.max_idle_bytes, defaults.threads, defaults.fork) == (8, 4 << 30, None, True)
    assert (defaults.hits, defaults.misses, defaults.idle()) == (0, 0, 0)
    defaults.close()
    forked, fresh = WarmReferences(threads=1), WarmReferences(threads=1, fork=False)
    try:
        assert forked.threads == 1 and forked.fork is True and fresh.fork is False
        one = forked.acquire(problem(10), "cpu", 60.0)
        two = fresh.acquire(problem(10), "cpu", 60.0)
        assert isinstance(one.process, ForkedWorker) and isinstance(two.process, WorkerProcess)
        assert len(forked._servers) == 1 and fresh._servers == {}  # one trusted server, for the CPU
        one.close()
        two.close()
    finally:
        forked.close()
        fresh.close()
    assert forked._servers == {}


def stable_sizes(runners) -> list[int]:
    """Each idle runner's resident bytes once unchanged for a second (a fresh fork goes on faulting
    pages in while it finishes starting; there is no event to wait for, so this polls)."""
    import time

    from tritongym.execution.references import _resident_bytes

    sizes: list[int] = []
    same = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        again = [_resident_bytes(r.process.pid) for r in runners]
        same = same + 1 if again == sizes else 0
        sizes = again
        if same >= 10:
            return sizes
        time.sleep(0.1)
    raise AssertionError(f"the runners' memory did not settle: {sizes}")


@pytest.mark.parametrize("slack", [0, -1])
def test_the_memory_bound_counts_what_it_evicts(slack):
    # A budget of exactly the two newest runners keeps them; one byte less keeps only the newest.
    cache = WarmReferences(max_idle=8, threads=1)
    try:
        runners = [cache.acquire(problem(n), "cpu", 60.0) for n in (21, 22, 23)]
        sizes = stable_sizes(runners)
        assert all(size > 0 for size in sizes)
        cache.max_idle_bytes = sizes[1] + sizes[2] + slack
        for runner in runners:
            cache.release(runner, reusable=True)
        assert [kept(r) for r in runners] == ([False, True, True] if slack == 0 else [False, False, True])
        assert cache.idle() == (2 if slack == 0 else 1)
    finally:
        cache.close()


def test_a_lowered_memory_bound_evicts_down_to_it_at_the_next_release():
    # Three idle runners under a large bound; the bound then drops to one runner's size: the next
    # release evicts oldest first until the rest fits (one eviction is not enough).
    cache = WarmReferences(max_idle=8, max_idle_bytes=1 << 40, threads=1)
    try:
        runners = [cache.acquire(problem(n), "cpu", 60.0) for n in (31, 32, 33, 34)]
        sizes = stable_sizes(runners)
        for runner in runners[:3]:
            cache.release(runner, reusable=True)
        assert cache.idle() == 3
        cache.max_idle_bytes = max(sizes)
        cache.release(runners[3], reusable=True)
        assert [kept(r) for r in runners] == [False, False, False, True] and cache.idle() == 1
    finally:
        cache.close()


def test_a_lost_trusted_server_is_replaced_at_the_next_miss(references):
    import os
    import signal

    first = references.acquire(problem(41), "cpu", 60.0)
    first.close()
    (server,) = references._servers.values()
    os.killpg(server.process.popen.pid, signal.SIGKILL)
    server.process.popen.wait(timeout=30)
    second = references.acquire(problem(42), "cpu", 60.0)
    try:
        (replacement,) = references._servers.values()
        assert replacement is not server and not replacement.lost()
        assert references.fork is True and second.process.alive()
    finally:
        second.close()
