"""A seccomp filter for the candidate's jail, built as a classic-BPF program in pure Python.

bubblewrap loads it (``--seccomp FD``) for the whole jail before the worker starts, so it binds the
worker, the candidate and everything they start, and cannot be removed. It is a deny-list: the
syscalls below have no use in a kernel solution and each serves an attack on the harness, on
other candidates or on the host; every other syscall is allowed (Python, torch, Triton and the
CUDA driver need a wide set, and the mount namespace, the user namespace and the rlimits already
confine them). A denied syscall fails with ``EPERM``; a foreign architecture is killed.

Not denied on purpose: ``unshare``, ``clone`` and ``clone3`` (threads need ``clone``/``clone3``, and a
fork server that gives each candidate nested namespaces needs ``unshare``); inside the jail's own
user namespace they grant nothing over the host.

Also here: `make_non_dumpable`, which the candidate worker calls before the candidate's import,
so that no process of the same user may attach to it or read its memory through ``/proc``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct

# Classic BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h).
_BPF_LD_W_ABS = 0x20
_BPF_JMP_JEQ_K = 0x15
_BPF_RET_K = 0x06
_SECCOMP_RET_KILL_PROCESS = 0x80000000
_SECCOMP_RET_ERRNO = 0x00050000
_SECCOMP_RET_ALLOW = 0x7FFF0000
_EPERM = 1
# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
_OFFSET_NR, _OFFSET_ARCH = 0, 4
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}

#: Denied syscalls: name → (x86_64 number, aarch64 number, why).
DENIED: dict[str, tuple[int, int, str]] = {
    "ptrace": (101, 117, "attach to and rewrite another process (a sibling candidate, the worker's harness)"),
    "process_vm_readv": (310, 270, "read another process's memory"),
    "process_vm_writev": (311, 271, "write another process's memory"),
    "pidfd_getfd": (438, 438, "steal another process's file descriptors (the harness's channel)"),
    "pidfd_open": (434, 434, "handles on other processes"),
    "kcmp": (312, 272, "probe other processes' kernel objects"),
    "process_madvise": (440, 440, "act on another process's memory"),
    "perf_event_open": (298, 241, "performance counters: side channels on other processes"),
    "bpf": (321, 280, "load programs into the kernel"),
    "userfaultfd": (323, 282, "stall the kernel on page faults (race amplification)"),
    "io_uring_setup": (425, 425, "an I/O path that bypasses per-syscall filtering"),
    "io_uring_enter": (426, 426, "an I/O path that bypasses per-syscall filtering"),
    "io_uring_register": (427, 427, "an I/O path that bypasses per-syscall filtering"),
    "keyctl": (250, 219, "the kernel keyring"),
    "add_key": (248, 217, "the kernel keyring"),
    "request_key": (249, 218, "the kernel keyring"),
    "mount": (165, 40, "change the file system view"),
    "umount2": (166, 39, "change the file system view"),
    "pivot_root": (155, 41, "change the file system view"),
    "chroot": (161, 51, "change the file system view"),
    "setns": (308, 268, "join other namespaces"),
    "swapon": (167, 224, "host administration"),
    "swapoff": (168, 225, "host administration"),
    "reboot": (169, 142, "host administration"),
    "kexec_load": (246, 104, "host administration"),
    "kexec_file_load": (320, 294, "host administration"),
    "init_module": (175, 105, "kernel modules"),
    "finit_module": (313, 273, "kernel modules"),
    "delete_module": (176, 106, "kernel modules"),
    "open_by_handle_at": (304, 265, "open files outside the mount namespace by handle"),
    "name_to_handle_at": (303, 264, "file handles for open_by_handle_at"),
    "acct": (163, 89, "host administration"),
    "settimeofday": (164, 170, "the wall clock the parent times with"),
    "clock_settime": (227, 112, "the clocks the parent times with"),
}


def machine_arch() -> str | None:
    """``x86_64`` or ``aarch64`` when this machine is one of them, else None (no filter)."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine) if machine else None


def _instruction(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def filter_program(arch: str | None = None) -> bytes:
    """The compiled cBPF program (``struct sock_filter[]``) for `arch` (default: this machine)."""
    arch = arch or machine_arch()
    if arch not in _AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for architecture {arch!r}")
    column = 0 if arch == "x86_64" else 1
    numbers = sorted({entry[column] for entry in DENIED.values()})
    program = [
        _instruction(_BPF_LD_W_ABS, 0, 0, _OFFSET_ARCH),
        _instruction(_BPF_JMP_JEQ_K, 1, 0, _AUDIT_ARCH[arch]),
        _instruction(_BPF_RET_K, 0, 0, _SECCOMP_RET_KILL_PROCESS),
        _instruction(_BPF_LD_W_ABS, 0, 0, _OFFSET_NR),
    ]
    # One comparison per denied number: equal → jump to the deny return at the end.
    count = len(numbers)
    for index, number in enumerate(numbers):
        to_deny = count - index  # instructions between the next one and the deny return
        program.append(_instruction(_BPF_JMP_JEQ_K, to_deny, 0, number))
    program.append(_instruction(_BPF_RET_K, 0, 0, _SECCOMP_RET_ALLOW))
    program.append(_instruction(_BPF_RET_K, 0, 0, _SECCOMP_RET_ERRNO | _EPERM))
    return b"".join(program)


def program_fd(arch: str | None = None) -> int | None:
    """A readable descriptor holding the program (for bwrap's ``--seccomp FD``), or None.

    None when this machine's architecture has no filter here; the caller then runs without one
    and says so. The descriptor is a sealed-size memory file positioned at its start.
    """
    try:
        program = filter_program(arch)
    except ValueError:
        return None
    fd = os.memfd_create("tritongym-seccomp", 0)
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def make_non_dumpable() -> bool:
    """``prctl(PR_SET_DUMPABLE, 0)`` on this process: True when it took effect."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE = 4
    except (OSError, AttributeError):
        return False


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_filter(arch: str | None = None) -> bool:
    """Load the filter into the calling process itself (and everything it starts); irreversible.

    Used by the fork server's children, which set up their own mounts first (``mount`` is in the
    deny-list) and then install the same program bwrap loads for a fresh worker. Sets
    ``no_new_privs`` first, as the kernel requires of a process without ``CAP_SYS_ADMIN`` in its
    user namespace. Returns False when this architecture has no filter or the kernel refused it.
    """
    try:
        program = filter_program(arch)
    except ValueError:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p).value)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        return False
    return libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
