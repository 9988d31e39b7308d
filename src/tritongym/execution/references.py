"""Warm reference workers, kept per problem so that a group of candidates pays the start-up once.

In RL the common batch is G candidates for one problem. A reference worker costs an interpreter
start and ``import torch`` (~1.6 s here) plus building the problem's module; this cache keeps idle
runners keyed by (problem content hash, device), hands one to each evaluation, and takes it back
when the evaluation ends. Every evaluation still calls ``setup(weight_seed)`` with its own secret
seed and draws fresh trial seeds, so reuse changes nothing a candidate could learn or exploit: the
reference is trusted code and holds no per-evaluation secret between evaluations.

New runners are forks of a warm, trusted fork server (`forkserver_main --trusted`: unjailed, it
runs only problem code), so even a problem seen for the first time costs a fork, not an
interpreter start and ``import torch``.

Bounds: at most `max_idle` idle runners and `max_idle_bytes` of their resident memory; the least
recently used go first. A runner whose process died, or whose evaluation ended abnormally, is
closed instead of kept.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any

from tritongym.evaluator.reference import ReferenceRunner
from tritongym.tasks.problem import Problem


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


class WarmReferences:
    """A `ReferenceSource` that keeps idle reference runners per (problem hash, device), LRU-bounded."""

    def __init__(self, max_idle: int = 8, max_idle_bytes: int = 4 << 30, threads: int | None = None,
                 fork: bool = True) -> None:
        self.max_idle = max_idle
        self.threads = threads
        #: start new reference workers as forks of a warm trusted server (problem code only)
        self.fork = fork and sys.platform.startswith("linux")
        self._servers: dict[str, Any] = {}
        self.max_idle_bytes = max_idle_bytes
        self._idle: OrderedDict[int, tuple[tuple[str, str], ReferenceRunner]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def acquire(self, problem: Problem, device: str, timeout: float) -> ReferenceRunner:
        key = (problem.content_hash, device)
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
        return ReferenceRunner(problem, device=device, timeout=timeout, threads=self.threads,
                               spawner=self._spawner(device))

    def _spawner(self, device: str) -> Any:
        """A trusted fork server's ``start`` for `device` (started on first use), or None (fresh
        processes) where none can run."""
        if not self.fork:
            return None
        with self._lock:
            server = self._servers.get(device)
            if server is not None and server.lost():
                server.close()
                server = None
            if server is None:
                from tritongym.execution.forkserver import ForkServerLauncher

                try:
                    server = ForkServerLauncher(device, threads=self.threads, trusted=True)
                except Exception:  # noqa: BLE001 - fresh processes still work
                    self.fork = False
                    return None
                self._servers[device] = server
            return server.start

    def release(self, runner: ReferenceRunner, reusable: bool) -> None:
        if not reusable or not runner.process.alive():
            runner.close()
            return
        evicted: list[ReferenceRunner] = []
        with self._lock:
            self._idle[id(runner)] = ((runner.problem.content_hash, runner.device), runner)
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
