"""Start worker processes: plain, or jailed by bubblewrap; kill them and everything they started.

Every worker is a fresh process started with ``python -I -m ...`` (spawn, never fork: nothing of
the parent's memory is inherited), a scrubbed, allow-listed environment, its own session, a
private working directory, and one inherited socket as its only link to the parent.

With ``bwrap`` (Debian/Ubuntu package ``bubblewrap``) the candidate worker additionally gets:

* its own user namespace mapped to an unprivileged uid (no capabilities, even when the
  evaluator runs as root), PID namespace (it is PID 2 under bwrap's init; it cannot signal the
  evaluator, and every descendant dies with it), network namespace (no network at all), IPC and
  UTS namespaces;
* a read-only view of ``/usr`` and of the Python installation, virtual environment and
  import paths it needs, a private ``/tmp``, and its job directory as the only writable place;
* in CUDA mode, the GPU device nodes and driver folders, nothing else from ``/dev``.

Where bwrap cannot run, `resolve_mode("auto")` falls back to no sandbox and the evaluator puts a
``sandbox_disabled`` notice in every result. Resource limits (memory, processes, files, CPU
time) are applied by `ResourceLimits` in both modes, as strongly as the machine allows.
"""

from __future__ import annotations

import functools
import glob
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tritongym.errors import EvaluatorError, OptionsError
from tritongym.evaluator.jail.cgroups import Cgroup

SANDBOX_MODES = ("auto", "bwrap", "none")
#: Where the job directory appears inside the jail.
JAIL_JOB_DIR = "/job"
#: Environment variables passed through from the caller when set (GPU drivers need some).
PASSTHROUGH_ENV = (
    "CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "TRITON_LIBCUDA_PATH", "TRITON_PTXAS_PATH",
    "TRITON_CUOBJDUMP_PATH", "TRITON_NVDISASM_PATH", "CUDA_HOME", "CUDA_PATH",
    # -- GPU (issue 13): Triton builds its launcher with $CC at the first launch; MPS clients find
    # the daemon through its pipe directory; the device order fixes what an index means.
    "CC", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY", "CUDA_DEVICE_ORDER",
)
#: Where an MPS daemon listens when CUDA_MPS_PIPE_DIRECTORY is not set (under the jail's private /tmp).
DEFAULT_MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"


@dataclass(frozen=True)
class ResourceLimits:
    """Limits applied to a worker process and all its descendants.

    Attributes:
        memory_bytes: address-space cap (``RLIMIT_AS``) in CPU mode; in CUDA mode the driver
            reserves huge virtual ranges, so the cap is not applied there (None: no cap).
        max_processes: ``RLIMIT_NPROC``; the kernel does not enforce it for processes whose real
            uid is root, so under root the PID namespace (bwrap) is what contains a fork storm.
        max_open_files: ``RLIMIT_NOFILE``.
        max_file_bytes: ``RLIMIT_FSIZE``: the largest file the worker may write (its log on the
            host's disk included: stdout and stderr go to a file there).
        job_dir_bytes: size of the jail's job directory and ``/tmp`` (each a tmpfs; with bwrap
            only): a candidate that fills them fails with ENOSPC inside its own jail and
            cannot touch the host's disk or a sibling's space.
        cpu_seconds: ``RLIMIT_CPU``: CPU time before the kernel kills it (a backstop; the
            wall-clock timeout is the primary limit).
    """

    memory_bytes: int | None = 8 << 30
    max_processes: int | None = 512
    max_open_files: int | None = 1024
    max_file_bytes: int | None = 64 << 20
    cpu_seconds: int | None = None
    job_dir_bytes: int | None = 256 << 20

    def pairs(self, cuda: bool) -> list[tuple[str, int]]:
        """``(RLIMIT_* name, value)`` for every limit that is set."""
        pairs = [
            ("RLIMIT_NPROC", self.max_processes),
            ("RLIMIT_NOFILE", self.max_open_files),
            ("RLIMIT_FSIZE", self.max_file_bytes),
            ("RLIMIT_CPU", self.cpu_seconds),
        ]
        if not cuda:
            pairs.append(("RLIMIT_AS", self.memory_bytes))
        return [(name, int(value)) for name, value in pairs if value is not None]

    def apply(self, cuda: bool) -> None:
        """Set the limits on the current process."""
        for name, value in self.pairs(cuda):
            limit = getattr(resource, name)
            soft, hard = resource.getrlimit(limit)
            new = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (new, new))


#: Runs between the spawn and the worker (or bwrap): joins the cgroup, sets the rlimits, execs.
#: This replaces ``preexec_fn``, which runs Python between fork and exec in the child of a possibly
#: multithreaded parent (a trainer): a lock held by another thread at fork time deadlocks it.
#: Here the child is a fresh interpreter, so there is nothing to deadlock on; it joins the cgroup
#: *before* exec'ing the worker, so nothing the candidate starts escapes the caps.
_PRELUDE = (
    "import json, os, resource, sys\n"
    "limits, procs = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
    "for path in procs:\n"
    "    with open(path, 'w') as handle:\n"
    "        handle.write(str(os.getpid()))\n"
    "for name, value in limits:\n"
    "    limit = getattr(resource, name)\n"
    "    soft, hard = resource.getrlimit(limit)\n"
    "    new = value if hard == resource.RLIM_INFINITY else min(value, hard)\n"
    "    resource.setrlimit(limit, (new, new))\n"
    "os.execv(sys.argv[3], sys.argv[3:])\n"
)


def prelude_argv(limits: ResourceLimits, cuda: bool, cgroup: Cgroup | None, argv: list[str]) -> list[str]:
    """`argv` behind the prelude that applies `limits` and joins `cgroup` first."""
    import json

    procs = cgroup.procs_files() if cgroup is not None else []
    return [sys.executable, "-I", "-S", "-c", _PRELUDE, json.dumps(limits.pairs(cuda)), json.dumps(procs), *argv]


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None when bubblewrap works here, else why it does not (cached for the process)."""
    path = shutil.which("bwrap")
    if path is None:
        return "bubblewrap (bwrap) is not installed; apt-get install bubblewrap"
    probe = [path, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
             "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        completed = subprocess.run(probe, capture_output=True, timeout=30, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if completed.returncode != 0:
        return f"bwrap cannot create namespaces here: {completed.stderr.strip()[:300]}"
    return None


def resolve_mode(mode: str) -> str:
    """``auto`` → ``bwrap`` when it works, else ``none``; an explicit ``bwrap`` must work."""
    if mode not in SANDBOX_MODES:
        raise OptionsError(f"sandbox must be one of {', '.join(SANDBOX_MODES)}, got {mode!r}")
    if mode == "none":
        return "none"
    problem = bwrap_problem()
    if problem is None:
        return "bwrap"
    if mode == "bwrap":
        raise EvaluatorError(f"sandbox 'bwrap' was requested but {problem}")
    return "none"


def python_paths() -> list[str]:
    """Folders the worker's Python needs to read: the installation, the venv, installed packages.

    Only package folders (``site-packages``/``dist-packages`` on the import path) and
    tritongym's own root, never every ``sys.path`` entry: the caller's script folder or working
    directory (``python /tmp/train.py`` puts ``/tmp`` there) would otherwise be shown, read-only,
    to every candidate.
    """
    candidates = [sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))]
    candidates += [p for p in sys.path if p and os.path.basename(p.rstrip(os.sep)) in ("site-packages",
                                                                                       "dist-packages")]
    # tritongym's own root (…/src or site-packages): this file is tritongym/evaluator/jail/sandbox.py.
    candidates.append(str(Path(__file__).resolve().parents[3]))
    folders: list[str] = []
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and not real.startswith("/usr/") and real != "/usr":
            folders.append(real)
    # Drop folders already inside another bound folder.
    folders = sorted(set(folders))
    return [f for f in folders if not any(f != g and f.startswith(g + os.sep) for g in folders)]


def gpu_worker_env(device: str, environ: dict[str, str] | os._Environ[str] = os.environ) -> dict[str, str]:
    """The GPU variables of a worker's environment for `device` (``cuda`` or ``cuda:N``).

    ``cuda:N`` narrows ``CUDA_VISIBLE_DEVICES`` to that one device (the worker sees it as its
    only GPU, ``cuda``); indices mean PCI bus order unless the caller chose another order.
    """
    from tritongym.evaluator.common.device import parse_device, worker_visible_devices

    _, index = parse_device(device)
    env: dict[str, str] = {}
    visible = worker_visible_devices(index, environ.get("CUDA_VISIBLE_DEVICES"))
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    env["CUDA_DEVICE_ORDER"] = environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    return env


def _gpu_device_nodes(visible_devices: str | None, device_order: str | None) -> list[str]:
    """/dev/nvidia* nodes to bind: the control nodes and the visible GPUs' nodes only (all GPUs'
    nodes when which ones are visible cannot be told: no NVIDIA listing, MIG, another order)."""
    from tritongym.evaluator.common.device import physical_gpus, visible_gpu_minors

    every = sorted(glob.glob("/dev/nvidia*"))
    minors = None if device_order not in (None, "PCI_BUS_ID") else visible_gpu_minors(visible_devices,
                                                                                       physical_gpus())
    if minors is None:
        return every
    gpu_nodes = {f"/dev/nvidia{minor}" for minor in minors}
    return [node for node in every if not node[len("/dev/nvidia"):].isdigit() or node in gpu_nodes]


def _gpu_binds(visible_devices: str | None = None, device_order: str | None = None) -> list[str]:
    args: list[str] = []
    for node in _gpu_device_nodes(visible_devices, device_order):
        args += ["--dev-bind", node, node]
    mps = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", DEFAULT_MPS_PIPE_DIRECTORY)
    if os.path.isdir(mps):
        args += ["--bind", mps, mps]  # the jail's /tmp is private: the MPS daemon's pipes must be bound
    compiler = shutil.which(os.environ.get("CC", "")) if os.environ.get("CC") else None
    if compiler is not None and not os.path.realpath(compiler).startswith("/usr/"):
        folder = os.path.dirname(os.path.realpath(compiler))
        if os.path.basename(folder) == "bin":
            # The whole toolchain (…/bin/gcc runs …/libexec/gcc/*/cc1 and reads …/lib): bind its
            # prefix, as CC=/opt/gcc/bin/gcc on the H200 image needs.
            folder = os.path.dirname(folder)
        args += ["--ro-bind", folder, folder]
    # /usr (with /usr/local/cuda and /usr/local/nvidia in it) is bound already: binding those again
    # fails where one is a symbolic link (/usr/local/cuda -> cuda-13.0 on the H200 image).
    for folder in ("/sys", "/run/nvidia-persistenced"):
        if os.path.exists(folder):
            args += ["--ro-bind", folder, folder]
    for folder in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
        if folder and os.path.isdir(folder) and not folder.startswith("/usr/"):
            args += ["--ro-bind", folder, folder]
    return args


def bwrap_command(job_dir: str, cuda: bool, gpu_env: dict[str, str] | None = None, *,
                  job_dir_bytes: int | None = None, seccomp_fd: int | None = None,
                  cap_add: tuple[str, ...] = (), ro_binds: tuple[tuple[str, str], ...] = (),
                  host_proc: bool = False) -> list[str]:
    """The bubblewrap prefix that jails one worker (see the module docstring).

    The job directory appears as a size-capped tmpfs at ``/job`` with every file of `job_dir`
    bound read-only into it (the candidate cannot rewrite its own source after the check, nor
    fill the host's disk); with `job_dir_bytes` None it is bound writable as before (callers that
    need that). A CPU jail has no ``/proc``: nothing of the worker's memory, maps or descriptors,
    nor any other process, is visible as a file; a GPU jail gets a procfs of its own PID namespace
    (CUDA does not start without one). `seccomp_fd` is a cBPF program (`seccomp`).
    `cap_add` keeps capabilities inside the jail's user namespace (the fork server's children need
    ``CAP_SYS_ADMIN`` there to mount their private folders; they drop it before candidate code);
    `ro_binds` are extra ``(host, jail)`` read-only binds. `host_proc` binds the host's procfs
    instead (a GPU fork server's jail: each child mounts a procfs of its own PID namespace over it
    before any candidate code, `forkserver_main._grandchild`; the kernel allows that mount only
    where a procfs is fully visible, and bwrap's ``--proc`` is not, tests/execution/test_gpu_fork_cause.py).
    """
    path = shutil.which("bwrap")
    if path is None:
        raise EvaluatorError("bwrap is not installed")
    args = [
        path, "--unshare-all", "--unshare-user", "--uid", "65534", "--gid", "65534",
        "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        *[arg for cap in cap_add for arg in ("--cap-add", cap)],
        "--ro-bind", "/usr", "/usr",
    ]
    for link in ("lib", "lib64", "lib32", "bin", "sbin"):
        target = os.path.join("/", link)
        if os.path.islink(target):
            args += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            args += ["--ro-bind", target, target]
    for item in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"):
        if os.path.exists(item):
            args += ["--ro-bind", item, item]
    # /tmp first: later binds may live under it (a virtual environment in /tmp, say) and must
    # land on top of the private tmpfs, not under it.
    size = [] if job_dir_bytes is None else ["--size", str(int(job_dir_bytes))]
    args += ["--dev", "/dev", *size, "--tmpfs", "/tmp"]
    for folder in python_paths():
        args += ["--ro-bind", folder, folder]
    if host_proc:
        args += ["--bind", "/proc", "/proc"]
    elif cuda:
        # The CUDA driver reads /proc (cudaGetDeviceCount fails with error 304 without it, seen on
        # an H200): a fresh procfs of the jail's own PID namespace, which shows no host process.
        args += ["--proc", "/proc"]
    if cuda:
        gpu_env = gpu_env or {}
        args += _gpu_binds(gpu_env.get("CUDA_VISIBLE_DEVICES"), gpu_env.get("CUDA_DEVICE_ORDER"))
    if job_dir_bytes is None:
        args += ["--bind", job_dir, JAIL_JOB_DIR]
    else:
        args += [*size, "--tmpfs", JAIL_JOB_DIR]
        for name in sorted(os.listdir(job_dir)):
            inside = os.path.join(JAIL_JOB_DIR, name)
            args += ["--ro-bind", os.path.join(job_dir, name), inside]
    for host, inside in ro_binds:
        args += ["--ro-bind", host, inside]
    if cap_add:
        # A jail that outlives one candidate (the fork server's) must give them nothing shared to
        # write: its root (bwrap's tmpfs holding the mount points) becomes read-only.
        args += ["--remount-ro", "/"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", JAIL_JOB_DIR]
    return args


@dataclass
class WorkerProcess:
    """A started worker: its process, socket end, log file and the identity used to sweep it."""

    popen: subprocess.Popen
    log_path: Path
    token: str
    mode: str
    cgroup: Cgroup | None = None
    started_at: float = field(default_factory=time.monotonic)

    def exit_description(self) -> str:
        """Why the process ended, in words (``killed by SIGSEGV``, ``exited with code 0``)."""
        if self.cgroup is not None and self.cgroup.memory_exceeded():
            limit = self.cgroup.limits.get("memory", 0) / (1 << 30)
            return f"exceeded the memory limit of {limit:g} GiB and was killed"
        code = self.popen.poll()
        if code is None:
            return "still running"
        return self.describe_code(code)

    @staticmethod
    def describe_code(code: int) -> str:
        """An exit status in words: negative is death by that signal, above 128 too (as shells say)."""
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        if code > 128:
            # bwrap and the stand-in shell report the worker's death by signal N as 128 + N.
            try:
                return f"killed by {signal.Signals(code - 128).name}"
            except ValueError:
                pass
        return f"exited with code {code}"

    def alive(self) -> bool:
        return self.popen.poll() is None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait_exit(self, grace: float) -> str:
        """Give a dying process `grace` seconds to exit by itself, kill it, and say how it ended."""
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.kill()
            return "still running; killed"
        return self.exit_description()

    def kill(self) -> None:
        """Kill the worker, its process group and any descendant that carries its token."""
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not wait for consent
            pass
        sweep_processes(self.token)

    def release(self) -> None:
        """Kill everything and remove the worker's cgroup (call once, at the end)."""
        self.kill()
        if self.cgroup is not None:
            self.cgroup.destroy()

    def log_tail(self, limit: int = 4000) -> str:
        return log_tail(self.log_path, limit)


#: Lines every jailed worker's log carries that say nothing about the candidate: PyTorch's cpuinfo
#: cannot read /proc/cpuinfo inside the jail (no /proc mounted) and says so on import. A user reads
#: it as an error of their kernel, so it is dropped from the log a result returns.
JAIL_ARTEFACTS = frozenset({
    "Error in cpuinfo: failed to parse processor information from /proc/cpuinfo",
})


def _without_artefacts(text: str) -> str:
    return "".join(line for line in text.splitlines(keepends=True) if line.rstrip("\r\n") not in JAIL_ARTEFACTS)


def log_tail(path: Path, limit: int = 4000) -> str:
    """The last `limit` bytes of a worker's log as text ("" when it cannot be read), without the
    jail's `JAIL_ARTEFACTS` lines."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return ("…" if size > limit else "") + _without_artefacts(text)


def sweep_processes(token: str) -> int:
    """SIGKILL every process whose environment carries ``TRITONGYM_JOB=<token>``.

    Catches descendants that left the worker's process group (``setsid``) when there is no PID
    namespace to contain them. Returns how many were killed.
    """
    marker = f"TRITONGYM_JOB={token}".encode()
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    os.kill(int(entry), signal.SIGKILL)
                    killed += 1
        except (OSError, ProcessLookupError):
            continue
    return killed


def spawn_worker(
    module: str,
    source_path: str | None,
    *,
    device: str,
    mode: str,
    job_dir: Path,
    log_path: Path,
    channel_fd: int,
    token: str,
    limits: ResourceLimits,
    interpret: bool,
    problem_path: str | None = None,
    cgroup: Cgroup | None = None,
    extra_args: tuple[str, ...] = (),
    cap_add: tuple[str, ...] = (),
    ro_binds: tuple[tuple[str, str], ...] = (),
    jail_seccomp: bool = True,
    threads: int | None = None,
    host_proc: bool = False,
) -> WorkerProcess:
    """Start ``python -I -m <module>`` as a worker, jailed when `mode` is ``bwrap``.

    The fork server (`tritongym.execution.forkserver`) is started here too, with no source
    (`source_path` None), `cap_add` and `ro_binds` for its children's set-up, and
    ``jail_seccomp=False``: each child loads the filter itself after its mounts. `threads` caps
    torch's and OpenMP's CPU threads in the worker (a pool runs several workers per core set).

    `source_path` is the module file the worker loads (the candidate or the problem), and
    `problem_path` an optional second one (the candidate worker's timing inputs); with bwrap
    both must lie in `job_dir` and are translated to the jail's paths. With a `cgroup`, the
    process joins it before exec, so it and all its descendants are capped together.
    """
    cuda = device == "cuda" or device.startswith("cuda:")
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "TRITONGYM_JOB": token,
    }
    for name in PASSTHROUGH_ENV:
        if name in os.environ:
            env[name] = os.environ[name]
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(max(1, int(threads)))
    gpu_env = gpu_worker_env(device) if cuda else {}
    env.update(gpu_env)
    def visible(path: str) -> str:
        if mode != "bwrap":
            return path
        inside = os.path.join(JAIL_JOB_DIR, os.path.relpath(path, job_dir))
        if inside.startswith(JAIL_JOB_DIR + "/.."):
            raise EvaluatorError(f"{path} is outside the job directory {job_dir}")
        return inside

    home = JAIL_JOB_DIR if mode == "bwrap" else str(job_dir)
    from tritongym.evaluator.jail import seccomp

    seccomp_fd = seccomp.program_fd() if mode == "bwrap" and jail_seccomp else None
    prefix = bwrap_command(str(job_dir), cuda, gpu_env, job_dir_bytes=limits.job_dir_bytes,
                           seccomp_fd=seccomp_fd, cap_add=cap_add, ro_binds=ro_binds,
                           host_proc=host_proc) if mode == "bwrap" else []
    env.update({"HOME": home, "TMPDIR": "/tmp" if mode == "bwrap" else str(job_dir),
                "TRITON_CACHE_DIR": os.path.join(home, ".triton")})
    argv = [*prefix, sys.executable, "-I", "-u", "-B", "-m", module, "--fd", str(channel_fd)]
    if source_path is not None:
        argv += ["--source", visible(source_path)]
    argv += ["--device", "cuda" if cuda else device]
    if problem_path is not None:
        argv += ["--problem", visible(problem_path)]
    argv += list(extra_args)
    if mode == "bwrap":
        # bwrap must not inherit our environment either: --clearenv, then the allow-list.
        env_args = ["--clearenv"] + [a for k, v in env.items() for a in ("--setenv", k, v)]
        argv = [argv[0], *env_args, *argv[1:]]
    else:
        # Without a PID namespace the worker's parent would be the evaluator itself, and
        # `os.kill(os.getppid(), SIGKILL)` would kill it. A shell that waits (the trailing
        # `exit` stops it from exec-ing the command) stands in between; the shell reports the
        # worker's death by signal N as exit status 128 + N, as bwrap does.
        argv = ["/bin/sh", "-c", '"$@"; exit $?', "tritongym-worker", *argv]
    argv = prelude_argv(limits, cuda, cgroup, argv)
    pass_fds = (channel_fd,) if seccomp_fd is None else (channel_fd, seccomp_fd)
    with open(log_path, "wb") as log:
        try:
            popen = subprocess.Popen(
                argv, env=env, cwd=str(job_dir), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, pass_fds=pass_fds, start_new_session=True,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise EvaluatorError(f"could not start the worker {module}: {exc}") from exc
        finally:
            if seccomp_fd is not None:
                os.close(seccomp_fd)
    return WorkerProcess(popen=popen, log_path=log_path, token=token, mode=mode, cgroup=cgroup)
