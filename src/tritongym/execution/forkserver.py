"""The evaluator's side of a fork server: start it jailed, hand it jobs, watch its children.

A server forks the workers of the roles it is given (`ROLES`): candidate workers (one server per
pool slot), or reference workers running a client's problem code (one per device, shared by the
slots); a ``trusted`` server forks unjailed reference workers for problem code from this machine
only. Every role gets the same jail set-up in the child (`forkserver_main`).

A fresh candidate worker costs an interpreter start plus ``import torch, triton`` (~1.6 s on the
CI machine) per evaluation. A fork server pays that once per pool slot: it runs inside the same
bubblewrap jail a fresh worker gets (no network, no ``/proc``, read-only system, its own user and
PID namespaces, ``--die-with-parent``), and for each candidate forks a child that builds a
nested jail of its own before any candidate code runs (`forkserver_main` lists the steps).

What differs from a fresh worker, and why it is as strong:

* bwrap keeps ``CAP_SYS_ADMIN`` and ``CAP_SETPCAP`` *inside the jail's user namespace* for the
  server, because each child mounts its private ``/tmp`` and ``/job`` and then empties its bounding
  set. The child drops every capability (bounding set included) and loads the seccomp deny-list
  before the candidate's import. Capabilities in a user namespace confer nothing over the host.
* The jail outlives one candidate, so its root is remounted read-only and each child covers the
  jail's ``/dev`` with a read-only one of its own: the only writable places are each child's own
  tmpfs (``/tmp``, ``/job``, ``/dev/shm``).
* The seccomp filter is loaded by the child, not by bwrap (the filter denies ``mount``, which the
  child's set-up needs); it is the same program, loaded before candidate code.
* Caps on memory and processes: the slot's cgroup (when this machine allows one) holds the server
  and its one running child; the limits are set per job (server baseline + the job's caps).

Siblings (candidates in other slots, at the same time) live in different fork servers, each
child in its own mount, PID, IPC, network and UTS namespaces: they cannot see, signal, trace or
touch each other (tests/execution/test_siblings.py attacks this).
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tritongym.errors import EvaluatorError
from tritongym.evaluator.jail.cgroups import Cgroup, create_cgroup
from tritongym.evaluator.jail.sandbox import (
    JAIL_JOB_DIR,
    PASSTHROUGH_ENV,
    ResourceLimits,
    WorkerProcess,
    bwrap_command,
    gpu_worker_env,
    log_tail,
    python_paths,
    spawn_worker,
)
from tritongym.evaluator.result import Notice, NoticeCode

#: Seconds to wait for a fork server's ``ready`` (it imports torch and triton).
START_TIMEOUT = 180.0
#: Head-room above a job's memory cap for the server's own resident pages in the slot's cgroup.
SERVER_MEMORY_HEADROOM = 2 << 30
#: Processes of the server's tree besides the candidate's (bwrap init, server, middle, init).
SERVER_PROCESSES = 8
#: Where the jail shows a second, read-only view of Python folders that lie under /tmp.
REBIND_ROOT = "/.tritongym-python"
#: The worker module of each role a server can fork (`forkserver_main.WORKERS` on the jailed side).
ROLES = {
    "candidate": "tritongym.evaluator.worker.candidate",
    "reference": "tritongym.evaluator.worker.reference",
    "cleanroom": "tritongym.evaluator.cleanroom.worker",
}


def host_pid(root: int, inner: list[str]) -> int | None:
    """The host PID of the first of `root`'s descendants whose ``NSpid`` below the host's PID is
    `inner` (its PID in each nested namespace; ``"*"`` matches any), from /proc; None if none."""
    stack, seen = [root], set()
    while stack and len(seen) < 4096:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/status", encoding="ascii", errors="replace") as handle:
                for line in handle:
                    if line.startswith("NSpid:"):
                        ids = line.split()[2:]
                        if len(ids) == len(inner) and all(w in ("*", i) for w, i in zip(inner, ids, strict=True)):
                            return current
                        break
            with open(f"/proc/{current}/task/{current}/children", encoding="ascii") as handle:
                stack.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return None


@functools.lru_cache(maxsize=1)
def forkserver_problem() -> str | None:
    """None when a jailed fork server can give its children nested namespaces here, else why not."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    if not sys.platform.startswith("linux"):
        return "fork servers need Linux namespaces"
    probe = ("import ctypes, os\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "assert libc.unshare(0x00020000 | 0x20000000 | 0x08000000 | 0x40000000 | 0x04000000) == 0, "
             "os.strerror(ctypes.get_errno())\n"
             "assert libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, b'size=1m') == 0, os.strerror(ctypes.get_errno())\n")
    # The probe runs in the jail the server gets (same binds: a virtual environment under /tmp is
    # bound over the jail's private /tmp, exactly as for the real server).
    empty = tempfile.mkdtemp(prefix="tritongym-probe-")
    try:
        command = [*bwrap_command(empty, False, job_dir_bytes=1 << 20, cap_add=("CAP_SYS_ADMIN", "CAP_SETPCAP")),
                   sys.executable, "-I", "-S", "-c", probe]
    finally:
        os.rmdir(empty)
    try:
        completed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed: {exc}"
    if completed.returncode != 0:
        return f"nested namespaces are not available in the jail: {completed.stderr.strip()[-300:]}"
    return None


#: Opts GPU pools into jailed fork servers (`jailed_forkserver_problem`).
GPU_FORKSERVER_ENV = "TRITONGYM_GPU_FORKSERVER"

#: Why a jailed fork server is not used on a GPU (`jailed_forkserver_problem`).
GPU_FORK_PROBLEM = (
    "a jailed fork server's children could not use the GPU: cuInit failed with error 304 (torch: "
    "'Unexpected error from cudaGetDeviceCount') before any candidate code ran (an H200 and an H100, "
    "2026-11-26); cause: a child in a nested PID namespace under the jail's procfs, where getpid() and "
    "/proc/self disagree (benchmarks/gpu_fork_diagnosis.py, tests/execution/test_gpu_fork_cause.py). "
    "GPU fork servers now give each child a procfs of its own (not yet run on a GPU: set "
    f"{GPU_FORKSERVER_ENV}=1 to use them); until verified, GPUs get fresh jailed workers, which work")

#: CPU jails have no /proc, so a CPU fork server's children mount none; tests set this to run the
#: GPU jail's procfs set-up (the host's procfs bound, a fresh one per child) on a CPU.
FRESH_PROC_ON_CPU = False


def jailed_forkserver_problem(device: str) -> str | None:
    """`forkserver_problem`, and None only where a jailed fork server's children work on `device`
    (on a GPU: only with ``TRITONGYM_GPU_FORKSERVER=1``, until a GPU run verifies them)."""
    if (device == "cuda" or device.startswith("cuda:")) and os.environ.get(GPU_FORKSERVER_ENV) != "1":
        return GPU_FORK_PROBLEM
    return forkserver_problem()


class ForkedWorker:
    """The parent's handle on one forked candidate (`WorkerProcess`'s methods)."""

    def __init__(self, server: ForkServerLauncher, job: str, log_path: Path, cgroup: Cgroup | None,
                 pid: int | None = None, own_cgroup: bool = False) -> None:
        self.server = server
        self.job = job
        self.log_path = log_path
        self.cgroup = cgroup
        #: the cgroup is this worker's alone (a trusted server's child joined it): removed on release
        self.own_cgroup = own_cgroup
        self._server_pid = pid
        self._host_pid: int | None = pid if server.trusted else None
        self.mode = "none" if server.trusted else "bwrap"

    @property
    def pid(self) -> int | None:
        """The worker's PID as this process sees it, for the warm references' memory accounting: a
        trusted server's child is the worker; a jailed server reports its middle process in its
        own namespace, and the worker is PID 2 of the middle's new namespace (found through
        /proc once)."""
        if self._host_pid is None and self._server_pid is not None:
            middle = host_pid(self.server.process.pid, [str(self._server_pid)])
            self._host_pid = None if middle is None else host_pid(middle, ["*", "2"])
        return self._host_pid

    def alive(self) -> bool:
        return self.server.exit_code(self.job, wait=0.0) is None and not self.server.lost()

    def exit_description(self) -> str:
        if self.cgroup is not None and self.cgroup.memory_exceeded():
            limit = self.cgroup.limits.get("memory", 0) / (1 << 30)
            return f"exceeded the memory limit of {limit:g} GiB and was killed"
        code = self.server.exit_code(self.job, wait=0.0)
        if code is None:
            return "still running"
        return WorkerProcess.describe_code(code)

    def wait_exit(self, grace: float) -> str:
        if self.server.exit_code(self.job, wait=grace) is None:
            self.kill()
            return "still running; killed"
        return self.exit_description()

    def kill(self) -> None:
        self.server.kill(self.job)

    def release(self) -> None:
        self.kill()
        self.server.forget(self.job)
        if self.own_cgroup and self.cgroup is not None:
            self.cgroup.destroy()

    def log_tail(self, limit: int = 4000) -> str:
        return log_tail(self.log_path, limit)


class ForkServerLauncher:
    """A `CandidateLauncher` backed by one fork server (jailed unless `trusted`) forking the workers
    of `roles`: candidates (one server per pool slot and device), references (one per device).

    `cgroup_caps` ``(pids, memory bytes)`` caps a jailed server's whole tree for its life (a
    reference server, whose jobs run side by side); without it a jailed server's cgroup caps are
    set per job (`candidate_cgroup`: one candidate at a time)."""

    def __init__(self, device: str, slot: int = 0, threads: int | None = None, *, trusted: bool = False,
                 roles: tuple[str, ...] | None = None, cgroup_caps: tuple[int, int] | None = None) -> None:
        roles = roles or (("reference",) if trusted else ("candidate",))
        unknown = [role for role in roles if role not in ROLES]
        if unknown:
            raise ValueError(f"roles must be among {', '.join(ROLES)}, got {unknown}")
        if trusted and set(roles) != {"reference"}:
            raise ValueError("only reference workers (problem code from this machine) may run unjailed")
        self.device = device
        self.slot = slot
        self.threads = threads
        #: asked right after each start: True kills the new worker at once (the job was cancelled)
        self.should_cancel: Any = lambda: False
        #: a trusted server forks reference workers for local problem code: no jail, children in
        #: their own process group; an untrusted one (the default) forks jailed workers
        self.trusted = trusted
        self.roles = tuple(roles)
        #: the module of each role this server forks (`start` takes the module, as spawn does)
        self.modules = {ROLES[role]: role for role in self.roles}
        #: a trusted server's children run unjailed in the host's view of /sys: each joins the cgroup
        #: `start` is given (its memory cap) before the worker runs; a jailed server's cannot
        self.joins_job_cgroups = trusted
        self._home = Path(tempfile.mkdtemp(prefix=f"tritongym-fs{slot}-"))
        self._jobs = self._home / "jobs"
        self._jobs.mkdir()
        (self._home / "empty").mkdir()
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._exits: dict[str, int] = {}
        self._started: dict[str, int | None] = {}
        self._failed: dict[str, str] = {}
        self._current: str | None = None
        self._dead: str | None = None
        # The slot's share of the CPU is capped too: a candidate spinning threads on every core
        # would otherwise slow its siblings towards their timeouts (an attack on peers' rewards).
        # Python folders that lie under /tmp (a virtual environment there, as in CI) are bound a
        # second time outside /tmp, so that each child can bind them back over its private /tmp.
        self._rebinds = [] if trusted else [
            (f"{REBIND_ROOT}/{index}", folder)
            for index, folder in enumerate(f for f in python_paths() if f == "/tmp" or f.startswith("/tmp/"))]
        if trusted:
            self.cgroup = None
        elif cgroup_caps is not None:
            self.cgroup = create_cgroup(f"tritongym-{'-'.join(self.roles)}-{secrets.token_hex(6)}", *cgroup_caps)
        else:
            self.cgroup = create_cgroup(f"tritongym-slot-{secrets.token_hex(6)}", 1 << 20, 1 << 62,
                                        cpu_cores=max(1, threads or 1))
        #: each child mounts a procfs of its own PID namespace (`forkserver_main._grandchild`)
        #: over the host's, bound into the jail for this: a GPU jail needs a /proc that agrees
        #: with getpid() (CUDA's cuInit fails with 304 otherwise, `GPU_FORK_PROBLEM`)
        self.fresh_proc = not trusted and (device.startswith("cuda") or FRESH_PROC_ON_CPU)
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.process = spawn_worker(
                "tritongym.execution.forkserver_main", None, device=device, mode="none" if trusted else "bwrap",
                job_dir=self._home / "empty", log_path=self._home / "server.log", channel_fd=child_end.fileno(),
                token=secrets.token_hex(12),
                limits=ResourceLimits(memory_bytes=None, max_processes=None, job_dir_bytes=1 << 20),
                interpret=device == "cpu", cgroup=self.cgroup,
                cap_add=() if trusted else ("CAP_SYS_ADMIN", "CAP_SETPCAP"),
                ro_binds=() if trusted else ((str(self._jobs), "/jobs"), *[(f, alt) for alt, f in self._rebinds]),
                jail_seccomp=False, host_proc=self.fresh_proc,
                extra_args=("--trusted",) if trusted else (), threads=threads)
        except BaseException:
            parent_end.close()
            self._cleanup()
            raise
        finally:
            child_end.close()
        self.control = parent_end
        self.control.settimeout(START_TIMEOUT)
        try:
            ready = json.loads(self.control.recv(1 << 16) or b"{}")
        except (OSError, ValueError):
            ready = {}
        if ready.get("op") != "ready":
            log = self.process.log_tail(2000)
            self.close()
            raise EvaluatorError(f"the fork server did not start: {log}")

    # -- the control channel -------------------------------------------------------------------
    def _pump(self, timeout: float) -> None:
        """Read at most one frame (waiting up to `timeout` s) and file it by job; thread-safe.

        Several threads may wait on one server (a trusted server serves every slot's references):
        whoever reads a frame files it, and each waiter looks for its own job's entry."""
        if not self._recv_lock.acquire(timeout=max(timeout, 0.0)):
            return
        try:
            self.control.settimeout(max(timeout, 0.0001))
            try:
                data = self.control.recv(1 << 16)
            except TimeoutError:
                return
            except OSError as exc:
                self._dead = f"control channel failed: {exc}"
                return
            if not data:
                # The channel ends as the server dies, a moment before its exit can be read: wait for it
                # briefly, so that the reason says how it ended rather than "still running".
                try:
                    self.process.popen.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    pass
                self._dead = f"the fork server exited ({self.process.exit_description()})"
                return
            frame = json.loads(data)
            job, op = frame.get("job"), frame.get("op")
            if op == "exited":
                self._exits[job] = int(frame["code"])
            elif op == "started":
                self._started[job] = frame.get("pid")
            elif op == "failed":
                self._failed[str(job)] = str(frame.get("message"))
        finally:
            self._recv_lock.release()

    def _send(self, frame: dict[str, Any], fds: list[int] | None = None) -> None:
        with self._send_lock:
            try:
                socket.send_fds(self.control, [json.dumps(frame).encode()], fds or [])
            except OSError as exc:
                self._dead = f"control channel failed: {exc}"
                raise EvaluatorError(f"the fork server is gone: {exc}") from exc

    def lost(self) -> bool:
        """True when the server died (its job is not the candidate's verdict: the pool retries it)."""
        return self._dead is not None or self.process.popen.poll() is not None

    # -- CandidateLauncher -------------------------------------------------------------------------
    def candidate_cgroup(self, evaluation: Any, max_pids: int, memory_bytes: int) -> Cgroup | None:
        if self.cgroup is None or not {"pids", "memory"} <= set(self.cgroup.limits):
            have = ", ".join(sorted(self.cgroup.limits)) if self.cgroup else "none"
            evaluation.notices.append(Notice(
                NoticeCode.LIMITS_WEAKENED,
                f"no cgroup with pids and memory caps could be created here (have: {have}); the candidate's "
                "process count and memory are capped by rlimits only, which do not bind a root user's "
                "process count or a CUDA process's memory"))
            return None
        self.cgroup.set_limits(max_pids + SERVER_PROCESSES, memory_bytes + SERVER_MEMORY_HEADROOM)
        return None  # the slot's cgroup already holds the server and its children

    @property
    def starts_clean_rooms(self) -> bool:
        """Whether `evaluator.parent` may fork the evaluation's clean room here (a candidate slot's server)."""
        return "cleanroom" in self.roles and not self.trusted

    def start(self, module: str, source_path: str, **kwargs: Any) -> ForkedWorker:
        role = self.modules.get(module)
        if role is None:
            raise EvaluatorError(f"this fork server starts {', '.join(self.modules)} only, not {module}")
        if self.lost():
            raise EvaluatorError(f"the fork server is gone ({self._dead or self.process.exit_description()})")
        job_dir = Path(kwargs["job_dir"])
        limits: ResourceLimits = kwargs["limits"]
        job = secrets.token_hex(8)
        if self.trusted:
            files: list[str] = []

            def inside(path: str) -> str:
                return path
        else:
            folder = self._jobs / job
            folder.mkdir()
            files = sorted(p.name for p in job_dir.iterdir() if p.is_file())
            for name in files:
                shutil.copyfile(job_dir / name, folder / name)
                os.chmod(folder / name, 0o444)
            os.chmod(folder, 0o555)

            def inside(path: str) -> str:
                return os.path.join(JAIL_JOB_DIR, os.path.relpath(path, job_dir))

        argv = ["--source", inside(source_path), "--device", "cuda" if self.device.startswith("cuda") else "cpu"]
        if kwargs.get("problem_path"):
            argv += ["--problem", inside(kwargs["problem_path"])]
        argv += list(kwargs.get("extra_args", ()))
        home = str(job_dir) if self.trusted else JAIL_JOB_DIR
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
               "USER": "sandbox", "LOGNAME": "sandbox", "TRITONGYM_JOB": kwargs["token"], "HOME": home,
               "TMPDIR": home if self.trusted else "/tmp", "TRITON_CACHE_DIR": os.path.join(home, ".triton")}
        if kwargs.get("interpret"):
            env["TRITON_INTERPRET"] = "1"
        for name in PASSTHROUGH_ENV:
            if name in os.environ:
                env[name] = os.environ[name]
        if self.device.startswith("cuda"):
            # ``cuda:N`` narrows the visible devices to that one, as for a fresh worker.
            env.update(gpu_worker_env(self.device))
        frame = {"op": "start", "job": job, "role": role, "dir": str(job_dir) if self.trusted else f"/jobs/{job}",
                 "files": files, "argv": argv,
                 "limits": limits.pairs(self.device.startswith("cuda")),
                 "job_bytes": limits.job_dir_bytes or (256 << 20), "env": env, "threads": self.threads,
                 "rebind": self._rebinds, "fresh_proc": self.fresh_proc}
        job_cgroup: Cgroup | None = kwargs.get("cgroup") if self.joins_job_cgroups else None
        if job_cgroup is not None:
            frame["cgroup_procs"] = job_cgroup.procs_files()
        log_path = Path(kwargs["log_path"])
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            self._send(frame, [kwargs["channel_fd"], log_fd])
        finally:
            os.close(log_fd)
        deadline = time.monotonic() + 30
        while job not in self._started:
            if job in self._failed:
                raise EvaluatorError(f"the fork server refused the job: {self._failed.pop(job)}")
            if self.lost():  # why it is gone, not the 30 s it was not given
                raise EvaluatorError(f"the fork server did not start the job "
                                     f"({self._dead or 'it exited: ' + self.process.exit_description()})")
            if time.monotonic() > deadline:
                raise EvaluatorError("the fork server did not start the job (no reply in 30 s)")
            self._pump(0.05)
        pid = self._started.pop(job)
        self._current = job
        worker = (ForkedWorker(self, job, log_path, job_cgroup, pid=pid, own_cgroup=True) if job_cgroup is not None
                  else ForkedWorker(self, job, log_path, self.cgroup, pid=pid))
        if self.should_cancel():  # cancelled while the job was being prepared
            worker.kill()
        return worker

    # -- job control -------------------------------------------------------------------------------
    def exit_code(self, job: str, wait: float) -> int | None:
        """The job's exit code once its middle process ended (waiting up to `wait` s), else None."""
        deadline = time.monotonic() + wait
        while job not in self._exits:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.lost():
                break
            self._pump(min(remaining, 0.05))
        return self._exits.get(job)

    def kill(self, job: str) -> None:
        """SIGKILL the job's process tree (its namespace dies with its init) and wait for the exit."""
        if job in self._exits or self.lost():
            return
        try:
            self._send({"op": "kill", "job": job})
        except EvaluatorError:
            return
        self.exit_code(job, wait=10.0)

    def kill_current(self) -> None:
        """Kill the running job (cancellation from another thread: send only, the slot reaps)."""
        if self._current is not None and self._current not in self._exits and not self.lost():
            try:
                self._send({"op": "kill", "job": self._current})
            except EvaluatorError:
                pass

    def forget(self, job: str) -> None:
        self._exits.pop(job, None)
        if self._current == job:
            self._current = None
        folder = self._jobs / job
        if not self.trusted and folder.exists():
            os.chmod(folder, 0o755)
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        try:
            self._send({"op": "exit"})
        except EvaluatorError:
            pass
        self.process.kill()
        self.control.close()
        self._cleanup()

    def _cleanup(self) -> None:
        if self.cgroup is not None:
            self.cgroup.destroy()
            self.cgroup = None
        shutil.rmtree(self._home, ignore_errors=True)
