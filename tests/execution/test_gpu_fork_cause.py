"""Why a jailed fork server's children cannot use CUDA, pinned on the CPU (issue 20, fix 11).

On an H100 (2026-11-26, `benchmarks/gpu_fork_diagnosis.py`) ``cuInit`` returned 304 in exactly the
set-ups that give the child a new PID namespace (``only:unshare-pid``; IPC, network and UTS alone
were fine), and in each of them ``getpid()`` and ``/proc/self`` disagreed: the GPU jail's procfs
belongs to the jail's PID namespace, not the child's. These tests pin both halves of the cause,
and the way out for the next GPU lease, with the real bwrap:

* under the GPU jail's own ``--proc``, a child of a nested PID namespace is PID 1 to itself and
  another PID to ``/proc``, and it cannot mount a procfs of its own (bwrap's read-only covers over
  ``/proc/sys`` and friends are locked once the child's mount namespace is copied under bwrap's
  nested user namespace, so the kernel finds no fully visible procfs);
* with a fully visible procfs in the jail, the child can mount one of its own, after which
  ``/proc`` lists only its namespace and agrees with ``getpid()``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tritongym.evaluator.jail import sandbox
from tritongym.execution.forkserver import GPU_FORK_PROBLEM, forkserver_problem

pytestmark = pytest.mark.sandbox

CHILD = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWPID, MS_PRIVATE, MS_REC = 0x00020000, 0x20000000, 1 << 18, 0x4000
assert libc.unshare(CLONE_NEWNS | CLONE_NEWPID) == 0, os.strerror(ctypes.get_errno())
assert libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) == 0
pid = os.fork()
if pid == 0:
    print("pid", os.getpid(), os.readlink("/proc/self"), flush=True)
    mounted = libc.mount(b"proc", b"/proc", b"proc", 2 | 4 | 8, None) == 0
    print("mount", "ok" if mounted else os.strerror(ctypes.get_errno()), flush=True)
    if mounted:
        print("after", os.getpid(), os.readlink("/proc/self"),
              " ".join(sorted(e for e in os.listdir("/proc") if e.isdigit())), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
'''


def _run_in_gpu_jail(tmp_path, visible_proc: bool) -> dict[str, list[str]]:
    if sandbox.bwrap_problem() or forkserver_problem():
        pytest.skip(sandbox.bwrap_problem() or forkserver_problem())
    (tmp_path / "child.py").write_text(CHILD)
    command = sandbox.bwrap_command(str(tmp_path), True, {}, cap_add=("CAP_SYS_ADMIN", "CAP_SETPCAP"))
    assert "--proc" in command  # the GPU jail's own procfs (CUDA needs one)
    if visible_proc:
        at = command.index("--proc")
        command[at:at + 2] = ["--bind", "/proc", "/proc"]
    done = subprocess.run([*command, sys.executable, "/job/child.py"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()}


def test_under_the_gpu_jails_proc_a_nested_pid_namespace_disagrees_with_proc_and_cannot_fix_it(tmp_path):
    seen = _run_in_gpu_jail(tmp_path, visible_proc=False)
    getpid, proc_self = seen["pid"]
    assert getpid == "1" and proc_self != "1"  # what the CUDA driver met (cuInit 304 on the H100)
    assert seen["mount"] == ["Operation", "not", "permitted"]
    assert "cause: a child in a nested PID namespace" in GPU_FORK_PROBLEM


def test_with_a_fully_visible_procfs_the_child_mounts_its_own_and_it_agrees(tmp_path):
    seen = _run_in_gpu_jail(tmp_path, visible_proc=True)
    assert seen["mount"] == ["ok"]
    getpid, proc_self, *listed = seen["after"]
    assert getpid == proc_self == "1" and listed == ["1"]  # only its own namespace is visible
