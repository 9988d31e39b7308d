"""The fork server: runs jailed (bwrap), imports torch and triton once, forks one child per job.

This process is trusted and never runs client code: it imports the harness, then only reads
control frames from the evaluator (`forkserver.ForkServerLauncher`) and forks. Each job names its
``role``, which picks the worker module from the fixed table `WORKERS` (a candidate worker, or a
reference worker running a client's problem code); a frame never names a module. Every role gets
the same jail; each child

1. leaves the server's control socket behind and asks to die with its parent;
2. enters new mount, PID, IPC, network and UTS namespaces (nested inside the jail's own), so the
   worker sees no sibling's files, processes, System V objects, abstract sockets or hostname;
3. forks once more: the grandchild is PID 1 of the new PID namespace, so when it ends, the kernel
   kills everything the worker started; the middle process waits and reports its exit status;
4. in the grandchild: private size-capped tmpfs at ``/tmp``, ``/job`` and ``/dev/shm``, and a
   private ``/dev`` of its own (the jail's device nodes bound into a fresh tmpfs that is then made
   read-only: the jail's own ``/dev`` is writable and outlives every child, so a file left there
   would reach the next one); the jail's root is read-only, so nothing else is writable; the job's
   files copied in and bound read-only, the server's job folder covered, rlimits, its own
   environment, log and descriptors, ``/job`` as working directory;
5. drops every capability (the jail gave the server ``CAP_SYS_ADMIN`` and ``CAP_SETPCAP`` in its user
   namespace only, for step 4 and for emptying the bounding set), loads the seccomp filter (the
   same deny-list bwrap loads for a fresh worker), and
6. runs the role's worker ``main`` — the same code, protocol and checks as a fresh worker.

Nothing of one job survives into the next: each is a fresh fork of a server that has never run
client code, and its namespaces, folders and processes die with it.

With ``--trusted`` the server runs unjailed and forks reference workers only (problem code from
this machine: a file, a built-in, a dataset the operator loaded): each child gets its own process
group, environment, log and folder, and runs ``worker.reference.main``; a pool keeps one such
server so that a new problem's reference costs a fork, not an interpreter start.

Control protocol (SOCK_SEQPACKET, JSON frames): server → ``ready``; evaluator → ``start {job, role,
dir, files, argv, limits, job_bytes, env}`` (a trusted server's also ``cgroup_procs``: the files its
child writes its PID into, joining its memory cap) with two descriptors (the worker's channel, its log),
server → ``started {job, pid}`` or ``failed {job, message}``, later ``exited {job, code}``; evaluator →
``kill {job}``; ``exit``. ``pid`` is the middle process in the server's PID namespace.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import select
import signal
import socket
import stat
import sys
from types import ModuleType

# The warm part: everything a candidate worker imports, loaded once here.
import torch
import triton  # noqa: F401

from tritongym.evaluator.cleanroom import worker as cleanroom_worker
from tritongym.evaluator.jail import seccomp
from tritongym.evaluator.worker import candidate as candidate_worker
from tritongym.evaluator.worker import reference as reference_worker

_libc = ctypes.CDLL(None, use_errno=True)


def _warm_triton_specialisation() -> None:
    """Make here, once, the imports Triton makes at a process's first launch.

    Triton 3.9's argument specialisation (``mangle_type``, called for every scalar and tensor
    argument of a launch) imports 50 modules (``triton.compiler.code_generator``, gluon's) at its
    first call: 28-37 ms bare, ~75 ms under a worker's audit hook (py-spy over 12 evaluations on the
    CPU tier, 2026-11-26). Every forked candidate and clean-room worker paid it once per evaluation.
    """
    try:
        from triton.runtime.jit import mangle_type

        mangle_type(0)
        mangle_type(torch.empty(1))
    except Exception:  # noqa: BLE001 - another Triton: nothing to warm, the first launch does it
        pass


_warm_triton_specialisation()


def _install_interpreter_fixes() -> None:
    """Install the CPU interpreter's fixes here, once, for every child to inherit.

    Both roles this server forks on the CPU tier (candidate and clean room) install
    `interpreter_fixes` before anything else runs Triton; done in each child it cost ~9 ms (the
    import and the patches) twice per evaluation. The children still call `install()`, which finds
    it done (every fix is idempotent). Trusted here: no candidate code has run in this process.
    """
    from tritongym.evaluator.worker import interpreter_fixes

    interpreter_fixes.install()

#: The worker a job's ``role`` runs: a fixed table (a frame names a role, never a module). Every
#: role gets the same jail (`_grandchild`).
WORKERS: dict[str, ModuleType] = {
    "candidate": candidate_worker,
    "reference": reference_worker,
    # The clean room (issue 20): forked by a candidate slot's server for the evaluation it runs;
    # it never imports the candidate, and the server never ran candidate code either.
    "cleanroom": cleanroom_worker,
}
#: Roles a ``--trusted`` (unjailed) server may run: problem code from this machine only.
TRUSTED_ROLES = frozenset({"reference"})

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MS_NOEXEC, MNT_DETACH = 8, 2
PR_SET_PDEATHSIG, PR_CAPBSET_DROP = 1, 24
MAX_FRAME = 1 << 16


class SetupError(RuntimeError):
    """A step of the child's set-up failed (the machine's fault: reported, never run half-jailed)."""


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(f"{what} failed: {os.strerror(errno)} (errno {errno})")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                       ctypes.c_ulong(flags), data.encode() if data else None), f"mount {target}")


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> None:
    """Empty the bounding set, then the effective, permitted and inheritable sets (irreversible)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            if ctypes.get_errno() == 22:
                break  # EINVAL: past the last capability this kernel knows
            _check(-1, f"dropping capability {cap} from the bounding set")
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")


def _environment_and_log(job: dict, log_fd: int) -> None:
    """The job's environment only; stdin from /dev/null, stdout and stderr to the job's log."""
    os.environ.clear()
    os.environ.update(job["env"])
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(null)
    os.close(log_fd)


def _report(fd: int, text: str) -> None:
    try:
        os.write(fd, text.encode())
    except OSError:
        pass


def _exit_code(status: int) -> int:
    """A wait status as a shell reports it: the exit code, or 128 + the signal that killed it."""
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def _umount(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), f"umount {target}")


#: Entries of the jail's /dev that a child never gets: its own /dev/shm is mounted fresh, and
#: pseudo-terminals (a devpts shared by the whole jail) have no use in a worker.
_DEV_SKIPPED = frozenset({"shm", "pts", "ptmx", "mqueue"})


def _private_dev(size: int) -> None:
    """Cover the jail's /dev with a fresh one: its device nodes (null, zero, random, ...; the GPU's
    in CUDA mode) and symlinks, a private size-capped ``/dev/shm``, the rest read-only.

    bwrap's ``--dev`` is one writable, uncapped tmpfs for the jail's whole life, and the server's
    ``--remount-ro /`` does not reach it: without this, one candidate's file there (written from
    any language, no Python ``open`` needed) was seen by the next candidates of the slot. Regular
    files in the jail's /dev are never carried over. The nodes are bound from a staging folder in
    this child's private /tmp, since the new tmpfs hides the old ones.
    """
    stage = "/tmp/.tritongym-dev"
    os.mkdir(stage, 0o700)
    carried: list[tuple[str, str, str]] = []
    for name in sorted(os.listdir("/dev")):
        if name in _DEV_SKIPPED:
            continue
        path = os.path.join("/dev", name)
        info = os.lstat(path)
        staged = os.path.join(stage, name)
        if stat.S_ISLNK(info.st_mode):
            carried.append(("link", name, os.readlink(path)))
        elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
            os.close(os.open(staged, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(path, staged, None, MS_BIND)
            carried.append(("node", name, staged))
        elif stat.S_ISDIR(info.st_mode):  # device folders (nvidia-caps, dri): their nodes, read-only
            os.mkdir(staged)
            _mount(path, staged, None, MS_BIND | MS_REC)
            carried.append(("dir", name, staged))
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=64k,nr_inodes=4096,mode=0755")
    for kind, name, what in carried:
        target = os.path.join("/dev", name)
        if kind == "link":
            os.symlink(what, target)
            continue
        if kind == "node":
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(what, target, None, MS_BIND)
        else:
            os.mkdir(target)
            _mount(what, target, None, MS_BIND | MS_REC)
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
        _umount(what)
    os.mkdir("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    _mount(None, "/dev", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for _kind, name, _what in carried:
        staged = os.path.join(stage, name)
        if os.path.isdir(staged) and not os.path.islink(staged):
            os.rmdir(staged)
        elif os.path.lexists(staged):
            os.unlink(staged)
    os.rmdir(stage)


def _grandchild(job: dict, channel_fd: int, log_fd: int) -> None:
    """PID 1 of the job's namespace: finish the jail, start the role's worker, wait for it."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if job.get("fresh_proc"):
        # A procfs of this PID namespace over the host's (bound into a GPU server's jail for
        # this): /proc then shows only this job's processes and agrees with getpid(), which CUDA
        # needs (cuInit 304 under the jail's procfs). A failure ends the set-up: no candidate
        # code ever runs with the host's procfs in view.
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    worker = WORKERS[job["role"]]
    size = int(job["job_bytes"])
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=1777")
    _private_dev(size)
    for alternate, folder in job.get("rebind", []):
        # Python folders under /tmp (a virtual environment there) come back, read-only, over the
        # private /tmp; the jail bound them a second time at `alternate` for this.
        os.makedirs(folder, exist_ok=True)
        _mount(alternate, folder, None, MS_BIND | MS_REC)
        # nosuid and nodev are locked on the jail's binds: a remount must keep them.
        _mount(None, folder, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    _mount("tmpfs", "/job", "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode=0755")
    source_dir = job["dir"]
    for name in job["files"]:
        if "/" in name or name.startswith("."):
            raise SetupError(f"bad job file name {name!r}")
        with open(os.path.join(source_dir, name), "rb") as src, open(os.path.join("/job", name), "wb") as dst:
            dst.write(src.read())
        inside = os.path.join("/job", name)
        _mount(inside, inside, None, MS_BIND)
        _mount(None, inside, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    # The server's folder of job files is covered by an empty read-only tmpfs in this namespace
    # (the jail's own mounts are locked: they can be covered, not removed).
    _mount("tmpfs", "/jobs", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    for name, value in job["limits"]:
        limit = getattr(resource, name)
        _, hard = resource.getrlimit(limit)
        new = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (new, new))
    _environment_and_log(job, log_fd)
    os.chdir("/job")
    # As under bwrap, the worker is PID 2 and this process the namespace's init: signals the
    # candidate sends itself behave as for any process, and orphans are reaped here.
    pid = os.fork()
    if pid == 0:
        # Threads only after the last fork (an OpenMP pool does not survive a fork).
        threads = job.get("threads")
        if isinstance(threads, int) and threads > 0:
            torch.set_num_threads(threads)
        try:
            drop_capabilities()
            if seccomp.machine_arch() in ("x86_64", "aarch64") and not seccomp.install_filter():
                raise SetupError("the seccomp filter could not be loaded")
        except BaseException as exc:  # noqa: BLE001 - never run client code half-jailed
            _report(2, f"tritongym fork server: {job['role']} set-up failed: {exc}\n")
            os._exit(70)
        sys.argv = [f"tritongym-{job['role']}", *job["argv"], "--fd", str(channel_fd)]
        # As in a fresh worker, the harness is ``__main__`` (candidates that go after the worker's
        # main module meet the harness, whose globals the tampering check watches).
        sys.modules["__main__"] = worker
        worker.main()  # the candidate worker ends with os._exit
        os._exit(0)
    os.close(channel_fd)
    drop_capabilities()
    while True:
        try:
            reaped, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(70)
        if reaped == pid:
            os._exit(_exit_code(status))


def _child(job: dict, control: socket.socket, channel_fd: int, log_fd: int) -> None:
    """The middle process: new namespaces, then fork PID 1 of them and report how it ended."""
    try:
        control.close()
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS), "unshare")
        _mount("none", "/", None, MS_REC | MS_PRIVATE)
        pid = os.fork()
        if pid == 0:
            try:
                _grandchild(job, channel_fd, log_fd)
            except BaseException as exc:  # noqa: BLE001 - set-up failure: say it in the log, exit 70
                _report(log_fd, f"tritongym fork server: candidate set-up failed: {exc}\n")
                _report(2, f"tritongym fork server: candidate set-up failed: {exc}\n")
            os._exit(70)
        os.close(channel_fd)
        os.close(log_fd)
        _, status = os.waitpid(pid, 0)
        os._exit(_exit_code(status))
    except BaseException as exc:  # noqa: BLE001
        _report(log_fd, f"tritongym fork server: candidate set-up failed: {exc}\n")
        os._exit(70)


def _trusted_child(job: dict, control: socket.socket, channel_fd: int, log_fd: int) -> None:
    """A reference worker for problem code from this machine: its own process group, environment,
    log, folder, cgroup and rlimits (its memory cap; no jail: `TRUSTED_ROLES`)."""
    try:
        control.close()
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.setpgid(0, 0)
        # Before the problem's code: the cgroup caps this worker's resident memory (and whatever it
        # starts), the rlimits its address space (an over-cap allocation fails here, not the host).
        for path in job.get("cgroup_procs", ()):
            with open(path, "w") as handle:
                handle.write(str(os.getpid()))
        for name, value in job["limits"]:
            limit = getattr(resource, name)
            _, hard = resource.getrlimit(limit)
            resource.setrlimit(limit, (value if hard == resource.RLIM_INFINITY else min(value, hard),) * 2)
        _environment_and_log(job, log_fd)
        os.chdir(job["dir"])
        threads = job.get("threads")
        if isinstance(threads, int) and threads > 0:
            torch.set_num_threads(threads)
        sys.argv = ["tritongym-reference", *job["argv"], "--fd", str(channel_fd)]
        sys.modules["__main__"] = reference_worker
        reference_worker.main()
    except BaseException as exc:  # noqa: BLE001
        _report(2, f"tritongym fork server: reference worker failed: {exc}\n")
        os._exit(70)
    os._exit(0)


def _send(control: socket.socket, frame: dict) -> None:
    control.send(json.dumps(frame).encode())


def serve(control: socket.socket, trusted: bool = False) -> None:
    running: dict[int, str] = {}
    _send(control, {"op": "ready", "threads": __import__("threading").active_count()})
    while True:
        readable, _, _ = select.select([control], [], [], 0.01)
        while running:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            job_id = running.pop(pid, None)
            if job_id is not None:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                _send(control, {"op": "exited", "job": job_id, "code": code})
        if not readable:
            continue
        data, fds, _flags, _addr = socket.recv_fds(control, MAX_FRAME, 2)
        if not data:
            return  # the evaluator went away
        frame = json.loads(data)
        op = frame.get("op")
        if op == "exit":
            for pid in running:
                os.kill(pid, signal.SIGKILL)
            return
        if op == "kill":
            for pid, job_id in running.items():
                if job_id == frame.get("job"):
                    if trusted:  # the reference's process group: anything it started goes too
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
                    os.kill(pid, signal.SIGKILL)
            continue
        role = frame.get("role")
        allowed = TRUSTED_ROLES if trusted else WORKERS
        if op != "start" or len(fds) != 2 or not isinstance(role, str) or role not in allowed:
            for fd in fds:
                os.close(fd)
            reason = f"bad frame {op!r}" if op != "start" or len(fds) != 2 else (
                f"role {role!r} is not one this server runs ({', '.join(sorted(allowed))})")
            _send(control, {"op": "failed", "job": frame.get("job"), "message": reason})
            continue
        channel_fd, log_fd = fds
        pid = os.fork()
        if pid == 0:
            (_trusted_child if trusted else _child)(frame, control, channel_fd, log_fd)
        os.close(channel_fd)
        os.close(log_fd)
        running[pid] = frame["job"]
        _send(control, {"op": "started", "job": frame["job"], "pid": pid})


def main() -> None:
    parser = argparse.ArgumentParser(description="tritongym fork server (internal)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--device", required=True, choices=("cpu", "cuda"))
    parser.add_argument("--trusted", action="store_true",
                        help="run unjailed and fork reference workers only (problem code from this machine)")
    args = parser.parse_args()
    seccomp.make_non_dumpable()
    if args.device == "cpu" and not args.trusted:
        _install_interpreter_fixes()
    control = socket.socket(fileno=args.fd)
    serve(control, trusted=args.trusted)


if __name__ == "__main__":
    main()
