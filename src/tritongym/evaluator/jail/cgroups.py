"""Process-count and memory caps through cgroups, where this machine lets us create one.

``RLIMIT_NPROC`` is not enforced for processes whose real uid is root, and ``RLIMIT_AS`` breaks
CUDA (the driver reserves large virtual ranges). A cgroup caps what matters for both: the number
of tasks (``pids.max``: a fork storm fails with EAGAIN inside the jail instead of exhausting the
host's PIDs) and resident memory (``memory.limit_in_bytes`` / ``memory.max``: the kernel's OOM
killer ends the worker, and the parent reports it as a memory-limit crash).

Supported: cgroup v1 with the ``pids`` and ``memory`` hierarchies mounted under
``/sys/fs/cgroup/<controller>`` (what containers that run as root usually have), and cgroup v2
where the controllers are delegated to the evaluator's own cgroup. Anything else returns None and
the evaluator carries on with rlimits and the PID namespace, saying so in a notice.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroups() -> dict[str, str]:
    """Controller name → this process's cgroup path, from /proc/self/cgroup (v2 under key '')."""
    paths: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return paths
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


@dataclass
class Cgroup:
    """Cgroup directories (one per v1 controller, or one v2 group) holding one worker's tree."""

    directories: list[Path]
    memory_dir: Path | None
    version: int
    limits: dict[str, int] = field(default_factory=dict)

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.directories]

    def join(self) -> None:
        """Move the calling process into the cgroup (run in the child before exec)."""
        pid = str(os.getpid())
        for path in self.procs_files():
            with open(path, "w") as handle:
                handle.write(pid)

    #: memory event counts when `set_limits` last ran (a reused cgroup judges only what came after)
    baseline: int = 0

    def _memory_events(self) -> int:
        """Failed charges plus OOM kills so far (0 without a memory controller)."""
        if self.memory_dir is None:
            return 0
        try:
            if self.version == 1:
                count = int((self.memory_dir / "memory.failcnt").read_text().strip() or 0)
                control = (self.memory_dir / "memory.oom_control").read_text()
                return count + sum(int(line.split()[1]) for line in control.splitlines()
                                   if line.startswith("oom_kill "))
            events = (self.memory_dir / "memory.events").read_text()
            return sum(int(line.split()[1]) for line in events.splitlines()
                       if line.split()[0] in ("oom", "oom_kill", "max"))
        except (OSError, ValueError, IndexError):
            return 0

    def memory_exceeded(self) -> bool:
        """True when the memory limit was hit (an OOM kill or failed charges) since `set_limits`."""
        return self._memory_events() > self.baseline

    def set_limits(self, max_pids: int | None, memory_bytes: int | None) -> None:
        """New caps for the next job of a reused cgroup (a fork server's slot), and a fresh baseline."""
        for directory in self.directories:
            if max_pids is not None and "pids" in self.limits and _write(directory / "pids.max", str(max_pids)):
                self.limits["pids"] = max_pids
        if self.memory_dir is not None and memory_bytes is not None:
            if self.version == 1:
                # v1 wants memory <= memory+swap at every step: raise the pair's upper one first.
                _write(self.memory_dir / "memory.memsw.limit_in_bytes", str(memory_bytes))
                written = _write(self.memory_dir / "memory.limit_in_bytes", str(memory_bytes))
                _write(self.memory_dir / "memory.memsw.limit_in_bytes", str(memory_bytes))
            else:
                written = _write(self.memory_dir / "memory.max", str(memory_bytes))
            if written:
                self.limits["memory"] = memory_bytes
        self.baseline = self._memory_events()

    def pids(self) -> set[int]:
        found: set[int] = set()
        for path in self.procs_files():
            try:
                found.update(int(p) for p in Path(path).read_text().split())
            except (OSError, ValueError):
                continue
        return found

    def destroy(self) -> None:
        """Kill everything still inside and remove the directories."""
        for _ in range(50):
            remaining = self.pids()
            if not remaining:
                break
            for pid in remaining:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)
        for directory in self.directories:
            for _ in range(50):
                try:
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


#: The CPU quota's accounting period (cgroup v1 ``cpu.cfs_period_us``, v2 ``cpu.max``), µs.
CPU_PERIOD_US = 100_000


def _cpu_quota(directory: Path, version: int, cores: float) -> bool:
    quota = max(1000, int(cores * CPU_PERIOD_US))
    if version == 1:
        return (_write(directory / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                and _write(directory / "cpu.cfs_quota_us", str(quota)))
    return _write(directory / "cpu.max", f"{quota} {CPU_PERIOD_US}")


def create_cgroup(name: str, max_pids: int | None, memory_bytes: int | None,
                  cpu_cores: float | None = None) -> Cgroup | None:
    """A fresh cgroup named `name` with the given caps, or None when none can be made here.

    `cpu_cores` caps CPU time at that many cores' worth per period (the ``cpu`` controller, where
    available): a candidate that spins threads on every core cannot starve the pool's other slots.
    """
    if max_pids is None and memory_bytes is None:
        return None
    own = _own_cgroups()
    controllers = ("pids", "memory") + (("cpu",) if cpu_cores is not None else ())
    v1 = [c for c in controllers if (CGROUP_ROOT / c / "cgroup.procs").exists() and c in own]
    if v1:
        directories: list[Path] = []
        memory_dir = None
        limits: dict[str, int] = {}
        for controller in v1:
            directory = CGROUP_ROOT / controller / own[controller].lstrip("/") / name
            try:
                directory.mkdir()
            except OSError:
                continue
            directories.append(directory)
            if controller == "pids" and max_pids is not None and _write(directory / "pids.max", str(max_pids)):
                limits["pids"] = max_pids
            if controller == "memory" and memory_bytes is not None:
                if _write(directory / "memory.limit_in_bytes", str(memory_bytes)):
                    limits["memory"] = memory_bytes
                    memory_dir = directory
                    # Count swap too where the kernel tracks it, so the cap cannot be dodged.
                    _write(directory / "memory.memsw.limit_in_bytes", str(memory_bytes))
            if controller == "cpu" and cpu_cores is not None and _cpu_quota(directory, 1, cpu_cores):
                limits["cpu"] = int(cpu_cores * CPU_PERIOD_US)
        if directories:
            return Cgroup(directories=directories, memory_dir=memory_dir, version=1, limits=limits)
        return None
    if "" in own and (CGROUP_ROOT / "cgroup.controllers").exists():
        parent = CGROUP_ROOT / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            return None
        if not {"pids", "memory"} & set(enabled):
            return None
        directory = parent / name
        try:
            directory.mkdir()
        except OSError:
            return None
        limits = {}
        if max_pids is not None and _write(directory / "pids.max", str(max_pids)):
            limits["pids"] = max_pids
        memory_dir = None
        if memory_bytes is not None and _write(directory / "memory.max", str(memory_bytes)):
            limits["memory"] = memory_bytes
            memory_dir = directory
            _write(directory / "memory.swap.max", "0")
        if cpu_cores is not None and "cpu" in enabled and _cpu_quota(directory, 2, cpu_cores):
            limits["cpu"] = int(cpu_cores * CPU_PERIOD_US)
        return Cgroup(directories=[directory], memory_dir=memory_dir, version=2, limits=limits)
    return None
