"""The warm references' bookkeeping without reference workers: the fast unit layer for mutation testing.

What is faked here, and why: `tests/execution/test_references_lru.py` and `test_references_keys.py` start
real trusted and jailed reference servers (seconds per test), and some cases cannot be made with real
processes on a test machine: a process tree larger than the walk's cap, a process that exits in the
middle of the walk, one listed under two parents, a worker that names itself in bytes that are not ASCII,
a runner whose host PID is unknown, a GPU device. Here `/proc` is a dictionary answered in place of the
module's builtin `open`, `ReferenceRunner` is a recorder (the memory cap each runner is made with among its
arguments), and the fork servers `_spawner` starts (and the jail's probe it asks, and a jailed server's tree
cgroup) are recording stand-ins; nothing is started, so that
`benchmarks/mutation.py references_units` can rerun the file for each mutant it is given.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tests.execution.fake_proc import FakeProc

import tritongym.execution.references as references
from tritongym.errors import EvaluatorError
from tritongym.evaluator.reference import ReferenceWorkerLost
from tritongym.execution.references import FreshJailedReferences, WarmReferences


class MemoryProc(FakeProc):
    """Processes with their resident memory (``VmRSS``), as `_resident_bytes` reads them."""

    def add(self, pid: int, rss_kb: int | None, children: tuple[int, ...] = (), name: bytes = b"python3") -> None:
        lines = [b"Name:\t" + name, b"State:\tS (sleeping)", f"Pid:\t{pid}".encode(), b"VmPeak:\t  900000 kB"]
        if rss_kb is not None:
            lines.append(f"VmRSS:\t{rss_kb:8} kB".encode())
        lines.append(b"Threads:\t4")
        self.put(pid, lines, children)


@pytest.fixture
def proc(monkeypatch) -> MemoryProc:
    fake = MemoryProc()
    monkeypatch.setattr(references, "open", fake.open, raising=False)
    return fake


# -- _resident_bytes ----------------------------------------------------------------------------------


def test_resident_bytes_sums_a_tree(proc):
    proc.add(10, 100, (11, 12))
    proc.add(11, 20, (13,))
    proc.add(12, None)  # a zombie has no VmRSS line
    proc.add(13, 3)
    assert references._resident_bytes(10) == (100 + 20 + 3) * 1024
    assert references._resident_bytes(11) == 23 * 1024 and references._resident_bytes(99) == 0


@pytest.mark.parametrize("size, counted", [(64, 64), (65, 64), (200, 64)])
def test_resident_bytes_reads_at_most_64_processes(proc, size, counted):
    for pid in range(1, size):
        proc.add(pid, 1, (pid + 1,))
    proc.add(size, 1)
    assert references._resident_bytes(1) == counted * 1024
    assert proc.statuses() == list(range(1, counted + 1))


def test_resident_bytes_goes_on_past_a_process_that_exited_during_the_walk(proc):
    proc.add(20, 1, (22, 21))  # 21 is read first (the stack's top): it exited, its files are gone
    proc.add(22, 5)
    assert references._resident_bytes(20) == 6 * 1024
    del proc.files["/proc/22/task/22/children"]  # 22 exits between its status and its children
    proc.add(23, 7, (22, 24))
    proc.add(24, 9)
    assert references._resident_bytes(23) == (7 + 5 + 9) * 1024


def test_resident_bytes_counts_a_process_listed_twice_once_and_goes_on(proc):
    """A process reparented while the tree is walked shows under its old and its new parent."""
    proc.add(30, 1, (33, 32, 31))
    proc.add(31, 2, (32,))
    proc.add(32, 4)
    proc.add(33, 8)
    assert references._resident_bytes(30) == 15 * 1024
    assert proc.statuses() == [30, 31, 32, 33]


@pytest.mark.parametrize("name", [b"\xe2\x98\x83 worker", b"\xff\xfe", b"caf\xc3\xa9"])
def test_resident_bytes_counts_a_worker_whose_name_is_not_ascii(proc, name):
    """A worker names itself (prctl PR_SET_NAME takes any bytes): its memory and its children's still count."""
    proc.add(40, 1, (41,))
    proc.add(41, 300, (42,), name=name)
    proc.add(42, 50)
    assert references._resident_bytes(40) == 351 * 1024


# -- WarmReferences.release: a runner whose host PID is unknown -----------------------------------------


class Runner:
    """An idle reference runner: its problem, device, jail and memory cap, a process (alive, with a PID
    or none)."""

    def __init__(self, problem: str, pid: int | None, memory_limit_bytes: int | None = None) -> None:
        self.problem = SimpleNamespace(content_hash=problem)
        self.device, self.jailed = "cpu", True
        self.memory_limit_bytes = memory_limit_bytes
        self.process = SimpleNamespace(pid=pid, alive=lambda: True)
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def init_tree(proc) -> FakeProc:
    """PID 1 and its tree, heavy: what a PID-less runner must not be charged with."""
    proc.add(1, 8 << 20, (2,))
    proc.add(2, 8 << 20)
    proc.add(50, 1024)  # 1 MiB
    proc.add(60, 1024)
    return proc


def test_a_runner_without_a_host_pid_counts_no_memory(init_tree):
    """A jailed fork server's worker whose host PID was not found (`ForkedWorker.pid` is None) weighs 0."""
    cache = WarmReferences(max_idle=8, max_idle_bytes=3 << 19, fork=False)
    unknown, known = Runner("a", None), Runner("b", 50)
    cache.release(unknown, True)
    cache.release(known, True)
    assert cache.idle() == 2 and unknown.closed == known.closed == 0
    assert 1 not in init_tree.statuses()  # no PID is no process: not PID 1's tree


def test_evicting_a_runner_without_a_host_pid_frees_no_memory(init_tree):
    cache = WarmReferences(max_idle=8, max_idle_bytes=3 << 19, fork=False)  # 1.5 MiB
    unknown, first, second = Runner("a", None), Runner("b", 50), Runner("c", 60)
    for runner in (unknown, first, second):
        cache.release(runner, True)
    # 2 MiB idle: the oldest (0 bytes) goes, then the next (1 MiB), which leaves 1 MiB
    assert cache.idle() == 1 and (unknown.closed, first.closed, second.closed) == (1, 1, 0)
    assert 1 not in init_tree.statuses()


# -- the device each runner is made for --------------------------------------------------------------


class Made:
    """Replaces `ReferenceRunner`: records each runner's arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return SimpleNamespace(args=args, kwargs=kwargs)


@pytest.mark.parametrize("device", ["cuda:1", "cpu"])
def test_a_warm_caches_new_runner_is_made_for_the_device_asked(monkeypatch, device):
    made = Made()
    monkeypatch.setattr(references, "ReferenceRunner", made)
    problem = SimpleNamespace(content_hash="p")
    cache = WarmReferences(threads=3, fork=False)
    cache.acquire(problem, device, 7.5)
    cache.jailed().acquire(problem, device, 2.0)
    cache.acquire(problem, device, 7.5, memory_limit_bytes=3 << 30)
    cache.jailed().acquire(problem, device, 2.0, memory_limit_bytes=5 << 29)
    assert made.calls == [((problem,), {"device": device, "timeout": 7.5, "threads": 3, "spawner": None,
                                        "jailed": False, "memory_limit_bytes": None}),
                          ((problem,), {"device": device, "timeout": 2.0, "threads": 3, "spawner": None,
                                        "jailed": True, "memory_limit_bytes": None}),
                          ((problem,), {"device": device, "timeout": 7.5, "threads": 3, "spawner": None,
                                        "jailed": False, "memory_limit_bytes": 3 << 30}),
                          ((problem,), {"device": device, "timeout": 2.0, "threads": 3, "spawner": None,
                                        "jailed": True, "memory_limit_bytes": 5 << 29})]
    assert cache.misses == 4 and cache.hits == 0


@pytest.mark.parametrize("device", ["cuda:1", "cpu"])
def test_a_fresh_jailed_runner_is_made_for_the_device_asked(monkeypatch, device):
    made = Made()
    monkeypatch.setattr(references, "ReferenceRunner", made)
    problem = SimpleNamespace(content_hash="p")
    FreshJailedReferences().acquire(problem, device, 4.0)
    FreshJailedReferences().acquire(problem, device, 4.0, memory_limit_bytes=2 << 30)
    assert made.calls == [((problem,), {"device": device, "timeout": 4.0, "jailed": True, "memory_limit_bytes": None}),
                          ((problem,), {"device": device, "timeout": 4.0, "jailed": True,
                                        "memory_limit_bytes": 2 << 30})]


# -- _spawner: the warm fork server of each (device, jailed) -----------------------------------------


class Launcher:
    """Replaces `ForkServerLauncher`: each server's arguments, a scripted `lost`, counted `close`."""

    made: list[Launcher]

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs
        self.is_lost = False
        self.closed = 0
        self.process = SimpleNamespace(pid=4000 + len(Launcher.made))
        Launcher.made.append(self)

    def lost(self) -> bool:
        return self.is_lost

    def close(self) -> None:
        self.closed += 1

    def start(self, *args, **kwargs):
        raise AssertionError("not started here")


@pytest.fixture
def servers(monkeypatch):
    """Fork servers replaced by `Launcher`s; the jailed probe answers `servers.problem`, each ask recorded."""
    import tritongym.execution.forkserver as forkserver

    state = SimpleNamespace(problem=None, asked=[], made=[])
    Launcher.made = state.made

    def jailed_problem(device):
        state.asked.append(device)
        return state.problem

    monkeypatch.setattr(forkserver, "ForkServerLauncher", Launcher)
    monkeypatch.setattr(forkserver, "jailed_forkserver_problem", jailed_problem)
    monkeypatch.setattr(references.sys, "platform", "linux")
    return state


def test_a_trusted_server_per_device_is_started_once_and_reused(servers):
    cache = WarmReferences(threads=2)
    spawner = cache._spawner("cuda:1", False)
    [server] = servers.made
    assert spawner == server.start and server.args == ("cuda:1",) and server.kwargs == {"threads": 2, "trusted": True}
    assert cache._spawner("cuda:1", False) == server.start and len(servers.made) == 1
    assert servers.asked == []  # the jail's probe is for jailed servers only
    assert cache.server_pid("cuda:1", False) == server.process.pid and cache.server_pid("cuda:1", True) is None
    cache._spawner("cpu", False)
    assert len(servers.made) == 2 and servers.made[1].args == ("cpu",)


def test_a_jailed_server_has_the_reference_role_and_a_cgroup_for_its_whole_tree(servers):
    cache = WarmReferences(max_idle_bytes=1 << 30, threads=3, slots=2)
    spawner = cache._spawner("cpu", True)
    [server] = servers.made
    assert spawner == server.start and servers.asked == ["cpu"]
    assert server.args == ("cpu",)
    assert server.kwargs == {"threads": 3, "roles": ("reference",), "cgroup_caps": (4096, (1 << 30) + 2 * (8 << 30))}
    assert cache._spawner("cpu", False) is not None and len(servers.made) == 2  # trusted and jailed kept apart


@pytest.mark.parametrize("device", ["cpu", "cuda:1"])
def test_where_no_jailed_server_can_run_references_start_fresh_and_it_is_not_asked_again(servers, device):
    servers.problem = "bubblewrap (bwrap) is not installed"
    cache = WarmReferences()
    assert cache._spawner(device, True) is None and servers.made == [] and set(servers.asked) == {device}
    asked = len(servers.asked)
    assert cache._spawner(device, True) is None and len(servers.asked) == asked
    assert cache._spawner(device, False) is not None  # a trusted server still runs


def test_a_server_that_fails_to_start_is_not_tried_again(servers, monkeypatch):
    import tritongym.execution.forkserver as forkserver

    calls = []

    def failing(*args, **kwargs):
        calls.append(args)
        raise EvaluatorError("the fork server did not start: ...")

    monkeypatch.setattr(forkserver, "ForkServerLauncher", failing)
    cache = WarmReferences()
    assert cache._spawner("cpu", False) is None and cache._spawner("cpu", False) is None
    assert calls == [("cpu",)] and cache.server_pid("cpu", False) is None


def test_a_lost_server_is_closed_and_replaced(servers):
    cache = WarmReferences()
    cache._spawner("cpu", False)
    [first] = servers.made
    first.is_lost = True
    assert cache.server_pid("cpu", False) is None
    spawner = cache._spawner("cpu", False)
    assert first.closed == 1 and len(servers.made) == 2 and spawner == servers.made[1].start


def test_without_fork_there_are_no_servers(servers):
    cache = WarmReferences(fork=False)
    assert cache._spawner("cpu", False) is None and cache._spawner("cpu", True) is None
    assert servers.made == [] and servers.asked == []


def test_close_closes_the_idle_runners_and_the_servers(servers, proc):
    cache = WarmReferences()
    cache._spawner("cpu", False)
    cache._spawner("cpu", True)
    runner = Runner("a", 50)
    proc.add(50, 1)
    cache.release(runner, True)
    cache.close()
    assert runner.closed == 1 and [s.closed for s in servers.made] == [1, 1] and cache.idle() == 0
    assert cache.server_pid("cpu", False) is None


# -- acquire: a fork server's failure to start a worker is the machine's ------------------------------


def test_a_fork_servers_failure_to_start_a_worker_is_a_lost_worker(servers, monkeypatch):
    def failing(*args, **kwargs):
        raise EvaluatorError("the fork server refused the job: no room")

    monkeypatch.setattr(references, "ReferenceRunner", failing)
    cache = WarmReferences()
    with pytest.raises(ReferenceWorkerLost) as info:
        cache.acquire(SimpleNamespace(content_hash="p"), "cpu", 5.0)
    assert str(info.value) == "the reference fork server did not start a worker: " \
                              "the fork server refused the job: no room"
    assert isinstance(info.value.__cause__, EvaluatorError)
    fresh = WarmReferences(fork=False)
    with pytest.raises(EvaluatorError) as info:
        fresh.acquire(SimpleNamespace(content_hash="p"), "cpu", 5.0)
    assert type(info.value) is EvaluatorError  # a fresh worker's own failure is not the server's


# -- the cache: defaults, hits, and its bounds ---------------------------------------------------------


def test_the_caches_defaults(monkeypatch):
    monkeypatch.setattr(references.sys, "platform", "linux")
    cache = WarmReferences()
    assert (cache.max_idle, cache.max_idle_bytes, cache.threads, cache.fork) == (8, 4 << 30, None, True)
    assert cache.jail_memory_bytes == (4 << 30) + (8 << 30)  # one running evaluation's 8 GiB by default
    assert WarmReferences(max_idle_bytes=1 << 30, slots=0).jail_memory_bytes == (1 << 30) + (8 << 30)
    assert WarmReferences(slots=3, jail_memory_bytes=5 << 30).jail_memory_bytes == 5 << 30
    assert (cache.hits, cache.misses, cache.idle()) == (0, 0, 0)
    monkeypatch.setattr(references.sys, "platform", "darwin")
    assert WarmReferences().fork is False


@pytest.fixture
def made(monkeypatch) -> Made:
    fake = Made()
    monkeypatch.setattr(references, "ReferenceRunner", fake)
    return fake


def test_an_idle_runner_of_the_same_problem_device_and_jail_is_handed_out_again(proc, made):
    cache = WarmReferences(fork=False)
    older, newer, other = Runner("p", None), Runner("p", None), Runner("q", None)
    for runner in (older, other, newer):
        cache.release(runner, True)
    problem = SimpleNamespace(content_hash="p")
    assert cache.acquire(problem, "cpu", 3.0, jailed=True) is newer and newer.timeout == 3.0  # the latest first
    assert cache.acquire(problem, "cpu", 4.0, jailed=True) is older and older.timeout == 4.0
    assert (cache.hits, cache.misses, cache.idle()) == (2, 0, 1)
    cache.acquire(problem, "cpu", 5.0, jailed=True)  # none left: a new runner
    cache.jailed().release(older, True)
    cache.acquire(problem, "cuda:0", 5.0, jailed=True)  # another device
    cache.acquire(problem, "cpu", 5.0)  # trusted
    assert (cache.hits, cache.misses, cache.idle()) == (2, 3, 2) and len(made.calls) == 3
    assert older.closed == newer.closed == 0


def test_an_idle_runner_that_died_is_closed_and_replaced(proc, made):
    cache = WarmReferences(fork=False)
    runner = Runner("p", None)
    cache.release(runner, True)
    runner.process.alive = lambda: False
    new = cache.acquire(SimpleNamespace(content_hash="p"), "cpu", 1.0, jailed=True)
    assert new is not runner and runner.closed == 1 and (cache.hits, cache.misses) == (0, 1)


def test_an_idle_runner_is_handed_out_only_for_the_memory_cap_it_was_started_with(proc, made):
    """A warm runner keeps the cap it was started with, so the cap is part of its key."""
    cache = WarmReferences(fork=False)
    capped, uncapped = Runner("p", None, memory_limit_bytes=2 << 30), Runner("p", None)
    cache.release(capped, True)
    cache.release(uncapped, True)
    problem = SimpleNamespace(content_hash="p")
    new = cache.acquire(problem, "cpu", 1.0, jailed=True, memory_limit_bytes=3 << 30)  # another cap: a new runner
    assert new is not capped and new is not uncapped and made.calls[-1][1]["memory_limit_bytes"] == 3 << 30
    assert cache.acquire(problem, "cpu", 1.0, jailed=True, memory_limit_bytes=2 << 30) is capped
    assert cache.acquire(problem, "cpu", 1.0, jailed=True) is uncapped
    assert (cache.hits, cache.misses, cache.idle()) == (2, 1, 0) and capped.closed == uncapped.closed == 0


class TreeCgroup:
    """The jailed server's cgroup: its limits, each `set_limits` recorded and applied."""

    def __init__(self, limits: dict[str, int]) -> None:
        self.limits = dict(limits)
        self.set_calls: list[tuple[int | None, int | None]] = []

    def set_limits(self, max_pids: int | None, memory_bytes: int | None) -> None:
        self.set_calls.append((max_pids, memory_bytes))
        if memory_bytes is not None:
            self.limits["memory"] = memory_bytes


def test_a_jailed_servers_tree_cap_grows_to_hold_every_slot_at_the_requests_cap_and_never_shrinks(servers, made):
    cache = WarmReferences(max_idle_bytes=1 << 30, slots=3)
    cache._spawner("cpu", True)
    [server] = servers.made
    server.cgroup = tree = TreeCgroup({"pids": 4096, "memory": 2 << 30})
    problem = SimpleNamespace(content_hash="p")
    cache.acquire(problem, "cpu", 1.0, jailed=True, memory_limit_bytes=2 << 30)
    assert tree.set_calls == [(None, (1 << 30) + 3 * (2 << 30))]  # idle runners plus each slot's worker at its cap
    assert made.calls[-1][1]["memory_limit_bytes"] == 2 << 30 and made.calls[-1][1]["spawner"] == server.start
    cache.acquire(problem, "cpu", 1.0, jailed=True, memory_limit_bytes=2 << 30)  # 7 GiB fits exactly: unchanged
    cache.acquire(problem, "cpu", 1.0, jailed=True, memory_limit_bytes=1 << 30)  # a smaller cap: never lowered
    cache.acquire(problem, "cpu", 1.0, jailed=True)  # no cap: nothing to hold
    assert tree.set_calls == [(None, 7 << 30)] and tree.limits == {"pids": 4096, "memory": 7 << 30}
    assert len(made.calls) == 4


@pytest.mark.parametrize("limits", [{"pids": 4096}, {"pids": 4096, "memory": 0}])
def test_a_jailed_servers_tree_without_a_memory_cap_is_left_uncapped(servers, made, limits):
    cache = WarmReferences(max_idle_bytes=1 << 30, slots=2)
    cache._spawner("cpu", True)
    [server] = servers.made
    server.cgroup = tree = TreeCgroup(limits)
    cache.acquire(SimpleNamespace(content_hash="p"), "cpu", 1.0, jailed=True, memory_limit_bytes=4 << 30)
    assert tree.set_calls == [] and tree.limits == limits


def test_a_trusted_servers_cgroup_is_not_grown_for_a_requests_cap(servers, made):
    """A trusted server's children join a cgroup of their own (`ReferenceRunner`): no shared tree to grow."""
    cache = WarmReferences(max_idle_bytes=1 << 30, slots=2)
    cache._spawner("cpu", False)
    [server] = servers.made
    server.cgroup = tree = TreeCgroup({"pids": 4096, "memory": 1 << 30})
    cache.acquire(SimpleNamespace(content_hash="p"), "cpu", 1.0, memory_limit_bytes=4 << 30)
    assert tree.set_calls == [] and made.calls[-1][1]["memory_limit_bytes"] == 4 << 30


def test_a_new_runner_is_forked_by_the_warm_server_of_its_device_and_jail(servers, made):
    cache = WarmReferences()
    problem = SimpleNamespace(content_hash="p")
    cache.acquire(problem, "cpu", 1.0, jailed=True)
    cache.acquire(problem, "cuda:1", 1.0)
    jailed, trusted = servers.made
    assert jailed.args == ("cpu",) and "roles" in jailed.kwargs and trusted.args == ("cuda:1",)
    assert trusted.kwargs == {"threads": None, "trusted": True}
    assert [kwargs["spawner"] for _, kwargs in made.calls] == [jailed.start, trusted.start]


@pytest.mark.parametrize("reusable, alive", [(False, True), (True, False), (False, False)])
def test_a_runner_not_to_be_reused_is_closed(proc, reusable, alive):
    cache = WarmReferences(fork=False)
    runner = Runner("p", None)
    runner.process.alive = lambda: alive
    cache.release(runner, reusable)
    assert runner.closed == 1 and cache.idle() == 0


def test_beyond_max_idle_the_least_recently_used_goes(proc, made):
    cache = WarmReferences(max_idle=2, fork=False)
    first, second, third = Runner("a", None), Runner("b", None), Runner("c", None)
    cache.release(first, True)
    cache.release(second, True)
    assert cache.idle() == 2 and first.closed == 0
    cache.release(third, True)
    assert (first.closed, second.closed, third.closed) == (1, 0, 0) and cache.idle() == 2
    assert cache.acquire(SimpleNamespace(content_hash="b"), "cpu", 1.0, jailed=True) is second
    assert cache.acquire(SimpleNamespace(content_hash="c"), "cpu", 1.0, jailed=True) is third


def test_the_memory_bound_keeps_what_fits_exactly_and_always_one(proc):
    for pid in (50, 60, 70):
        proc.add(pid, 1024)  # 1 MiB each
    cache = WarmReferences(max_idle_bytes=2 << 20, fork=False)
    runners = [Runner(name, pid) for name, pid in (("a", 50), ("b", 60))]
    for runner in runners:
        cache.release(runner, True)
    assert cache.idle() == 2 and [r.closed for r in runners] == [0, 0]  # 2 MiB exactly: within the bound
    alone = WarmReferences(max_idle_bytes=1 << 19, fork=False)
    big = Runner("c", 70)
    alone.release(big, True)
    assert alone.idle() == 1 and big.closed == 0  # the last one is kept even when it alone is too big


def test_the_memory_bound_evicts_only_until_the_rest_fits(proc):
    for pid in (50, 60, 70):
        proc.add(pid, 1024)
    cache = WarmReferences(max_idle_bytes=5 << 19, fork=False)  # 2.5 MiB
    runners = [Runner(name, pid) for name, pid in (("a", 50), ("b", 60), ("c", 70))]
    for runner in runners:
        cache.release(runner, True)
    assert [r.closed for r in runners] == [1, 0, 0] and cache.idle() == 2
