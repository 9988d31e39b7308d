"""Which step of a jailed fork server's child set-up stops CUDA: one short run on a lent GPU.

Answered on an H100 (2026-11-26): the child's new PID namespace alone (``only:unshare-pid``:
cuInit 304; IPC, network and UTS namespaces alone pass), where ``getpid()`` and ``/proc/self``
disagree (every line prints both). tests/execution/test_gpu_fork_cause.py pins the cause and the
fix to try next (a fully visible procfs in the jail, so each child can mount its own).

On an H200 (2026-11-26) every candidate forked by a jailed fork server failed its GPU probe
("Unexpected error from cudaGetDeviceCount"), while fresh jailed workers ran, so GPU pools start
fresh workers (`forkserver.jailed_forkserver_problem`). A nested PID namespace alone with the
outer /proc was ruled out there (`unshare -p -f`, as root, outside any jail).

This script starts one jail exactly as a GPU fork server's (`bwrap_command` with the GPU binds,
``CAP_SYS_ADMIN``/``CAP_SETPCAP`` kept, ``--remount-ro /``), imports what the server imports
(`forkserver_main`), becomes non-dumpable like it, and then forks one child per variant. Each
child repeats the set-up of `forkserver_main._child` and `_grandchild` up to a step (cumulative
variants ``upto:<step>``) or that step alone (``only:<step>``), then calls ``cuInit`` through
libcuda and ``torch.cuda.device_count()``, and prints one line. The first cumulative variant that
fails names the step. Every variant has a mount namespace of its own, as the server's children do.
Steps, in the server's order: ``unshare`` (new PID, IPC, network and UTS namespaces, then a fork:
PID 1 there), ``tmp`` (a private /tmp), ``dev``
(`forkserver_main._private_dev`), ``rlimits`` (the candidate's, as for a GPU job), ``caps``
(`drop_capabilities`), ``seccomp`` (`seccomp.install_filter`), ``fork`` (the worker is PID 2);
then ``upto:fork+exec``: all of them and a fresh Python (nothing inherited from the server).

Usage (on the GPU machine, from the repository root): ``python benchmarks/gpu_fork_diagnosis.py``.
Without CUDA every line says so; the machinery still runs (tests/unit/bench/test_gpu_fork_diagnosis.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = ("unshare", "tmp", "dev", "rlimits", "caps", "seccomp", "fork")
#: The namespaces the ``unshare`` step makes, one at a time in the ``only:unshare-<kind>`` variants.
NAMESPACES = ("pid", "ipc", "net", "uts")
#: The probe in a freshly executed Python (`variants`' ``upto:fork+exec``): the same set-up, none of
#: the server's imported state. If it passes where ``upto:fork`` fails, the culprit is inherited.
EXEC_PROBE = ("import os, sys, runpy; sys.path.insert(0, sys.argv[2]); "
              "probe = runpy.run_path(sys.argv[3])['_probe_cuda']; os.write(int(sys.argv[1]), probe().encode())")
#: The jail's seconds per variant at most (cuInit takes 1–2 s on a GPU).
VARIANT_TIMEOUT_S = 60


def variants() -> list[tuple[str, tuple[str, ...]]]:
    """``upto:<step>`` for every prefix of `STEPS` (``upto:none`` first), then ``only:<step>``."""
    cumulative = [("upto:none", ())] + [(f"upto:{step}", STEPS[:i + 1]) for i, step in enumerate(STEPS)]
    cumulative.append(("upto:fork+exec", (*STEPS, "exec")))
    alone = [(f"only:{step}", (step,)) for step in STEPS if step not in ("unshare", "fork")]
    # ``unshare`` failed on an H100 (cuInit 304) and every step without it passed: which namespace?
    split = [(f"only:unshare-{kind}", (f"unshare-{kind}",)) for kind in NAMESPACES]
    return cumulative + alone + split


def _probe_cuda() -> str:
    """``cuInit`` and torch's device count in this process, as one line."""
    import ctypes

    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        init = f"cuInit={libcuda.cuInit(0)}"
    except OSError as exc:
        init = f"no libcuda ({exc})"
    try:
        import torch

        count = f"device_count={torch.cuda.device_count()}"
    except Exception as exc:  # noqa: BLE001 - the failure is what this script reports
        count = f"device_count raised {type(exc).__name__}: {str(exc)[:160]}"
    # A child of a nested PID namespace under the jail's /proc is PID 1 to itself and another PID
    # to /proc: a driver that pairs getpid() with /proc reads the wrong process.
    try:
        self_link = os.readlink("/proc/self")
    except OSError as exc:
        self_link = type(exc).__name__
    return f"{init} {count} getpid={os.getpid()} /proc/self={self_link}"


def _rebinds() -> list[tuple[str, str]]:
    """(jail path, folder) of the Python folders under /tmp, bound a second time as the server does
    (`forkserver.REBIND_ROOT`): a private /tmp hides them (a virtual environment in /tmp, as in CI)."""
    from tritongym.evaluator.jail.sandbox import python_paths
    from tritongym.execution.forkserver import REBIND_ROOT

    folders = [*python_paths(), str(Path(__file__).resolve().parent)]  # and this script's folder
    under_tmp = list(dict.fromkeys(f for f in folders if f == "/tmp" or f.startswith("/tmp/")))
    return [(f"{REBIND_ROOT}/{index}", folder) for index, folder in enumerate(under_tmp)]


def _apply(steps: tuple[str, ...]) -> None:
    """The set-up of a fork server's middle and PID 1 processes, limited to `steps`."""
    import resource

    from tritongym.evaluator.jail import seccomp
    from tritongym.evaluator.jail.sandbox import ResourceLimits
    from tritongym.execution import forkserver_main as server

    rebinds = _rebinds()  # imports first: a private /tmp may hide the package until they are rebound
    # Every variant mounts in a namespace of its own (the next variants must find the jail as it was).
    server._check(server._libc.unshare(server.CLONE_NEWNS), "unshare(mount)")
    server._mount("none", "/", None, server.MS_REC | server.MS_PRIVATE)
    flags = {"pid": server.CLONE_NEWPID, "ipc": server.CLONE_NEWIPC, "net": server.CLONE_NEWNET,
             "uts": server.CLONE_NEWUTS}
    chosen = [flag for kind, flag in flags.items() if "unshare" in steps or f"unshare-{kind}" in steps]
    if chosen:
        server._check(server._libc.unshare(sum(chosen)), "unshare")
        if os.fork():  # the middle process waits for PID 1 of the new namespace
            _, status = os.waitpid(-1, 0)
            os._exit(os.waitstatus_to_exitcode(status))
    if "tmp" in steps:
        server._mount("tmpfs", "/tmp", "tmpfs", server.MS_NOSUID | server.MS_NODEV, "size=67108864,mode=1777")
        for alternate, folder in rebinds:  # Python under /tmp comes back, as in `_grandchild`
            os.makedirs(folder, exist_ok=True)
            server._mount(alternate, folder, None, server.MS_BIND | server.MS_REC)
    if "dev" in steps:
        server._private_dev(64 << 20)
    if "rlimits" in steps:
        limits = ResourceLimits(memory_bytes=8 << 30, max_processes=512, job_dir_bytes=64 << 20,
                                cpu_seconds=600)
        for name, value in limits.pairs(True):
            limit = getattr(resource, name)
            _, hard = resource.getrlimit(limit)
            new = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (new, new))
    if "caps" in steps:
        server.drop_capabilities()
    if "seccomp" in steps and not seccomp.install_filter():
        raise RuntimeError("the seccomp filter could not be loaded")
    if "fork" in steps and os.fork():
        _, status = os.waitpid(-1, 0)
        os._exit(os.waitstatus_to_exitcode(status))


def inside() -> None:
    """In the jail: import as the server does, then one forked child per variant."""
    from tritongym.evaluator.jail import seccomp
    from tritongym.execution import forkserver_main  # noqa: F401 - the server's imports and warm-up

    seccomp.make_non_dumpable()
    for name, steps in variants():
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                _apply(steps)
                if "exec" in steps:
                    os.set_inheritable(write, True)
                    src = str(Path(__file__).resolve().parents[1] / "src")
                    os.execv(sys.executable, [sys.executable, "-I", "-c", EXEC_PROBE, str(write), src,
                                              str(Path(__file__).resolve())])
                line = _probe_cuda()
            except BaseException as exc:  # noqa: BLE001 - a set-up step that fails is a result too
                line = f"set-up failed: {type(exc).__name__}: {str(exc)[:160]}"
            os.write(write, line.encode()[:4000])
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as pipe:
            text = pipe.read().decode(errors="replace")
        os.waitpid(pid, 0)
        print(f"{name:16s} {text or '(no answer: the child died)'}", flush=True)


def main() -> int:
    from tritongym.evaluator.jail.sandbox import bwrap_command, gpu_worker_env

    if "--inside" in sys.argv:
        inside()
        return 0
    gpu_env = gpu_worker_env("cuda")
    empty = tempfile.mkdtemp(prefix="tritongym-diag-")
    here = str(Path(__file__).resolve().parent)
    jail = bwrap_command(empty, True, gpu_env, job_dir_bytes=1 << 20, cap_add=("CAP_SYS_ADMIN", "CAP_SETPCAP"))
    at = jail.index("--remount-ro")  # this folder's bind must come before the root turns read-only
    extra = [arg for alternate, folder in _rebinds() for arg in ("--ro-bind", folder, alternate)]
    command = [*jail[:at], "--ro-bind", here, here, *extra, *jail[at:],
               *[arg for key, value in gpu_env.items() for arg in ("--setenv", key, value)],
               sys.executable, "-I", "-c",
               "import sys, runpy; sys.path.insert(0, sys.argv[1]); sys.argv = [sys.argv[2], '--inside']; "
               "runpy.run_path(sys.argv[0], run_name='__main__')",
               str(Path(__file__).resolve().parents[1] / "src"), str(Path(__file__).resolve())]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=VARIANT_TIMEOUT_S * len(variants()))
    finally:
        os.rmdir(empty)
    print(done.stdout, end="")
    if done.returncode != 0:
        print(f"the jail exited with {done.returncode}: {done.stderr[-2000:]}")
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
