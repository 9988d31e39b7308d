"""Warm reference workers, kept per problem so that a group of candidates pays the start-up once.

In RL the common batch is G candidates for one problem. A reference worker costs an interpreter
start and ``import torch`` (~1.6 s here) plus building the problem's module; this cache keeps idle
runners keyed by (problem content hash, device, jailed, memory cap), hands one to each evaluation, and takes it
back when the evaluation ends. Every evaluation still calls ``setup(weight_seed)`` with its own
secret seed and draws fresh trial seeds, so reuse changes nothing a candidate could learn or
exploit: the worker holds no per-evaluation secret between evaluations.

Which problem code is trusted: code from this machine (a file, a built-in, a dataset the operator
loaded; `EvalRequest.trusted_problem`) runs in forks of a warm *trusted* fork server
(`forkserver_main --trusted`: unjailed, it runs only problem code). Code a client sent (the
service's ``problem.source``, KernelGYM's ``reference_code``) runs in forks of a warm *jailed*
reference server: the candidate's jail and per-child set-up (namespaces, private tmpfs, no
``/proc``, seccomp, no network, no capabilities, rlimits) plus one cgroup capping all its workers.
Either way a new problem's reference costs a fork, not an interpreter start and ``import torch``.
Where no fork server can run, references start fresh (jailed by bwrap for client code).

Bounds: at most `max_idle` idle runners and `max_idle_bytes` of their resident memory; the least
recently used go first. A runner whose process died, or whose evaluation ended abnormally, is
closed instead of kept.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any

from tritongym.errors import EvaluatorError
from tritongym.evaluator.reference import ReferenceRunner, ReferenceWorkerLost
from tritongym.tasks.problem import Problem

#: Processes (threads count) of the jailed reference server's whole tree.
JAILED_SERVER_PIDS = 4096


def _resident_bytes(pid: int) -> int:
    """Resident memory of `pid` and its descendants, from /proc (0 where it cannot be read).

    The reference worker runs behind a waiting shell (see `sandbox.spawn_worker`), so the tree
    is what counts."""
    total, stack, seen = 0, [pid], set()
    while stack and len(seen) < 64:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            with open(f"/proc/{current}/task/{current}/children", encoding="ascii") as handle:
                stack.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


class FreshJailedReferences:
    """A new jailed reference worker per evaluation (client problem code, no warm cache)."""

    def acquire(self, problem: Problem, device: str, timeout: float,
                memory_limit_bytes: int | None = None) -> ReferenceRunner:
        return ReferenceRunner(problem, device=device, timeout=timeout, jailed=True,
                               memory_limit_bytes=memory_limit_bytes)

    def release(self, runner: ReferenceRunner, reusable: bool) -> None:
        runner.close()


class _Jailed:
    """`WarmReferences` as a `ReferenceSource` whose runners are jailed (client problem code)."""

    def __init__(self, cache: WarmReferences) -> None:
        self.cache = cache

    def acquire(self, problem: Problem, device: str, timeout: float,
                memory_limit_bytes: int | None = None) -> ReferenceRunner:
        return self.cache.acquire(problem, device, timeout, jailed=True, memory_limit_bytes=memory_limit_bytes)

    def release(self, runner: ReferenceRunner, reusable: bool) -> None:
        self.cache.release(runner, reusable)


class WarmReferences:
    """A `ReferenceSource` that keeps idle reference runners per (problem hash, device, jailed),
    LRU-bounded. As a `ReferenceSource` it runs trusted problem code; `jailed()` is the same cache
    for client problem code.

    `jail_memory_bytes` caps the resident memory of the jailed reference server's whole tree (its
    cgroup, where one can be made); None: `max_idle_bytes` plus 8 GiB per running evaluation.
    `slots` is how many evaluations may run at once (for that default)."""

    def __init__(self, max_idle: int = 8, max_idle_bytes: int = 4 << 30, threads: int | None = None,
                 fork: bool = True, *, slots: int = 1, jail_memory_bytes: int | None = None) -> None:
        self.max_idle = max_idle
        self.threads = threads
        #: start new reference workers as forks of a warm server (trusted, or jailed for client code)
        self.fork = fork and sys.platform.startswith("linux")
        self._servers: dict[tuple[str, bool], Any] = {}
        self._no_server: set[tuple[str, bool]] = set()
        self.max_idle_bytes = max_idle_bytes
        self.slots = max(1, slots)
        self.jail_memory_bytes = jail_memory_bytes or (max_idle_bytes + self.slots * (8 << 30))
        self._idle: OrderedDict[int, tuple[tuple[str, str, bool, int | None], ReferenceRunner]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self._jailed_view = _Jailed(self)

    def jailed(self) -> _Jailed:
        """This cache as a `ReferenceSource` for client problem code (jailed workers)."""
        return self._jailed_view

    def acquire(self, problem: Problem, device: str, timeout: float, jailed: bool = False,
                memory_limit_bytes: int | None = None) -> ReferenceRunner:
        # The cap is part of the key: a warm runner keeps the cap it was started with.
        key = (problem.content_hash, device, jailed, memory_limit_bytes)
        runner: ReferenceRunner | None = None
        with self._lock:
            for ident, (runner_key, idle) in reversed(self._idle.items()):
                if runner_key == key:
                    del self._idle[ident]
                    runner = idle
                    break
        if runner is not None and runner.process.alive():
            self.hits += 1
            runner.timeout = timeout
            return runner
        if runner is not None:
            runner.close()
        self.misses += 1
        spawner = self._spawner(device, jailed)
        if jailed and memory_limit_bytes is not None and spawner is not None:
            self._fit_tree_cap(spawner.__self__, memory_limit_bytes)
        try:
            return ReferenceRunner(problem, device=device, timeout=timeout, threads=self.threads,
                                   spawner=spawner, jailed=jailed, memory_limit_bytes=memory_limit_bytes)
        except EvaluatorError as exc:
            if spawner is None:
                raise
            # The warm server failed to fork it (it died, or its child could not be set up): the
            # machine's fault, retried by the pool like a worker that died.
            raise ReferenceWorkerLost(f"the reference fork server did not start a worker: {exc}") from exc

    def _fit_tree_cap(self, server: Any, memory_limit_bytes: int) -> None:
        """Raise the jailed server's tree cap to hold every slot's worker at its own cap: each child
        is held by its rlimit first, so the shared cgroup never picks a victim among siblings."""
        cgroup = getattr(server, "cgroup", None)
        wanted = self.max_idle_bytes + self.slots * memory_limit_bytes
        if cgroup is not None and 0 < cgroup.limits.get("memory", 0) < wanted:
            cgroup.set_limits(None, wanted)

    def _spawner(self, device: str, jailed: bool) -> Any:
        """A warm fork server's ``start`` for (`device`, `jailed`), started on first use and
        replaced when it died; None (fresh processes) where none can run."""
        key = (device, jailed)
        if not self.fork or key in self._no_server:
            return None
        with self._lock:
            server = self._servers.get(key)
            if server is not None and server.lost():
                server.close()
                server = None
            if server is None:
                from tritongym.execution.forkserver import ForkServerLauncher, jailed_forkserver_problem

                try:
                    if jailed and jailed_forkserver_problem(device) is not None:
                        raise RuntimeError(jailed_forkserver_problem(device))
                    server = (ForkServerLauncher(device, threads=self.threads, roles=("reference",),
                                                 cgroup_caps=(JAILED_SERVER_PIDS, self.jail_memory_bytes))
                              if jailed else ForkServerLauncher(device, threads=self.threads, trusted=True))
                except Exception:  # noqa: BLE001 - fresh processes (jailed by bwrap for client code) still work
                    self._no_server.add(key)
                    return None
                self._servers[key] = server
            return server.start

    def server_pid(self, device: str, jailed: bool) -> int | None:
        """The host PID of the warm reference server for (`device`, `jailed`), None if none runs."""
        with self._lock:
            server = self._servers.get((device, jailed))
        return server.process.pid if server is not None and not server.lost() else None

    def release(self, runner: ReferenceRunner, reusable: bool) -> None:
        if not reusable or not runner.process.alive():
            runner.close()
            return
        evicted: list[ReferenceRunner] = []
        with self._lock:
            self._idle[id(runner)] = ((runner.problem.content_hash, runner.device, runner.jailed,
                                       runner.memory_limit_bytes), runner)
            while len(self._idle) > self.max_idle:
                evicted.append(self._idle.popitem(last=False)[1][1])
            total = sum(_resident_bytes(r.process.pid or 0) for _, r in self._idle.values())
            while total > self.max_idle_bytes and len(self._idle) > 1:
                _, old = self._idle.popitem(last=False)[1]
                total -= _resident_bytes(old.process.pid or 0)
                evicted.append(old)
        for old in evicted:
            old.close()

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def close(self) -> None:
        with self._lock:
            runners = [runner for _, runner in self._idle.values()]
            self._idle.clear()
            servers = list(self._servers.values())
            self._servers.clear()
        for runner in runners:
            runner.close()
        for server in servers:
            server.close()
