"""Look at a fork server's running child from the host: its process tree and its mounts.

A jailed child has no ``/proc``, so the test reads the child's mount table from outside
(``/proc/<host pid>/mountinfo``), which is what ``findmnt`` would print inside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


def tree(pid: int, depth: int = 0) -> list[tuple[int, int]]:
    """(pid, depth) of `pid` and all its descendants."""
    out = [(pid, depth)]
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            children = [int(c) for c in handle.read().split()]
    except OSError:
        children = []
    for child in children:
        out += tree(child, depth + 1)
    return out


def wait_for_depth(root: int, depth: int, timeout: float = 120.0, known: frozenset[int] = frozenset()) -> int:
    """The host PID of a process `depth` levels below `root` and not in `known` (waits until one exists)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        deep = [pid for pid, level in tree(root) if level >= depth and pid not in known]
        if deep:
            return deep[0]
        time.sleep(0.05)
    raise AssertionError(f"no process {depth} levels below {root} in {timeout} s: {tree(root)}")


@dataclass(frozen=True)
class Mount:
    id: int
    parent: int
    root: str
    target: str
    options: str
    fstype: str
    super_options: str

    @property
    def writable(self) -> bool:
        return "rw" in self.options.split(",") and "rw" in self.super_options.split(",")


def visible_mounts(pid: int) -> list[Mount]:
    """The mounts a process can reach: for each mount point, the one on top (covered ones left out)."""
    with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as handle:
        mounts = []
        for line in handle:
            head, tail = line.split(" - ", 1)
            fields, rest = head.split(), tail.split()
            mounts.append(Mount(int(fields[0]), int(fields[1]), fields[3], fields[4], fields[5], rest[0],
                                rest[2] if len(rest) > 2 else ""))
    by_id = {m.id: m for m in mounts}
    # A mount is hidden when another is mounted on top of it, and so is everything under it.
    covered = {m.parent for m in mounts if m.parent in by_id and by_id[m.parent].target == m.target}

    def reachable(mount: Mount) -> bool:
        if mount.id in covered:
            return False
        while mount.parent in by_id:
            parent = by_id[mount.parent]
            # Stacked on its parent (same target): the parent is covered by this very chain.
            if parent.target != mount.target and parent.id in covered:
                return False
            mount = parent
        return True

    return [m for m in mounts if reachable(m)]


def writable_places(pid: int) -> dict[str, Mount]:
    """Writable mounts that can hold new files (device-node binds, such as /dev/null, cannot)."""
    return {m.target: m for m in visible_mounts(pid) if m.writable and m.fstype != "devtmpfs"}
