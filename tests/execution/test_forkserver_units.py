"""The fork server's host side without a fork server: the fast unit layer for mutation testing.

What is faked here, and why: a real jailed fork server costs an interpreter start plus ``import torch,
triton`` and needs bubblewrap with user namespaces, so each mutant of `ForkServerLauncher.__init__` or
`forkserver_problem` would cost minutes against the real-process tests. Here `spawn_worker` is a
recording fake that answers (or not) on the control socket it is given (``channel_fd``, the child end of
the real socket pair), `create_cgroup` returns a recording cgroup, `python_paths` names chosen folders,
and `shutil.which`, `sys.platform`, `bwrap_command` and `subprocess.run` are replaced for the probe. For
the job side, `/proc` is a dictionary answered in place of the module's builtin `open` (`host_pid`: trees
larger than its cap, processes that exit or move during the walk, names that are not ASCII), the module's
`time` is a clock that moves only when a faked `_pump` reads (the 30 s start deadline, the 50 ms reads,
`kill`'s 10 s wait), cgroups report an OOM kill, and `shutil.rmtree` fails like a folder that cannot be
removed; launchers for method-level tests are made with ``object.__new__``. No process is started and no
sandbox is needed; the whole file runs in seconds, so that `benchmarks/mutation.py forkserver_units` can
rerun it for each of forkserver.py's mutants.

The same code with real processes (trusted and jailed servers, their jobs, their death) is tested in
tests/execution/test_forkserver_host.py and tests/execution/test_forkserver.py.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.execution.fake_proc import FakeProc

import tritongym.execution.forkserver as forkserver
from tritongym.errors import EvaluatorError
from tritongym.evaluator.jail.sandbox import ResourceLimits
from tritongym.evaluator.result import Notice, NoticeCode
from tritongym.execution.forkserver import ForkServerLauncher

CANDIDATE = "tritongym.evaluator.worker.candidate"
REFERENCE = "tritongym.evaluator.worker.reference"
CLEANROOM = "tritongym.evaluator.cleanroom.worker"
JAILED_CAPS = ("CAP_SYS_ADMIN", "CAP_SETPCAP")
TAIL = "Traceback: the server's last words"

#: forkserver_problem's probe, as the jail runs it.
PROBE = ("import ctypes, os\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "assert libc.unshare(0x00020000 | 0x20000000 | 0x08000000 | 0x40000000 | 0x04000000) == 0, "
         "os.strerror(ctypes.get_errno())\n"
         "assert libc.mount(b'tmpfs', b'/tmp', b'tmpfs', 0, b'size=1m') == 0, os.strerror(ctypes.get_errno())\n")


class FakeCgroup:
    """Stands for a `Cgroup`: its limits, its ``cgroup.procs`` files, and counted `set_limits` and
    `destroy` calls."""

    def __init__(self, limits: dict[str, int] | None = None, name: str = "fake") -> None:
        self.limits = dict(limits if limits is not None else {"pids": 1, "memory": 1, "cpu": 1})
        self.set_calls: list[tuple[int, int]] = []
        self.destroyed = 0
        self.name = name

    def procs_files(self) -> list[str]:
        return [f"/sys/fs/cgroup/pids/{self.name}/cgroup.procs", f"/sys/fs/cgroup/memory/{self.name}/cgroup.procs"]

    def set_limits(self, max_pids: int, memory_bytes: int) -> None:
        self.set_calls.append((max_pids, memory_bytes))

    def destroy(self) -> None:
        self.destroyed += 1


class CreateCgroup:
    """Replaces `create_cgroup`: records each call and returns a fresh FakeCgroup."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.made: list[FakeCgroup] = []

    def __call__(self, name, *args, **kwargs):
        self.calls.append((name, args, kwargs))
        self.made.append(FakeCgroup())
        return self.made[-1]


class FakeServerProcess:
    """Stands for the server's `WorkerProcess`: a log tail (its limit recorded) and counted kills."""

    def __init__(self) -> None:
        self.tail_limits: list[int] = []
        self.kills = 0

    def log_tail(self, limit: int = 4000) -> str:
        self.tail_limits.append(limit)
        return TAIL

    def kill(self) -> None:
        self.kills += 1


class Spawn:
    """Replaces `spawn_worker`: records its exact arguments, then raises, or writes `reply` (one frame)
    into the control socket's child end it was given, or writes nothing (the channel then just ends)."""

    def __init__(self, reply: bytes | None = b'{"op": "ready"}', raises: BaseException | None = None) -> None:
        self.reply = reply
        self.raises = raises
        self.calls: list[tuple[str, str | None, dict]] = []
        self.process = FakeServerProcess()

    def __call__(self, module, source_path, **kwargs):
        self.calls.append((module, source_path, kwargs))
        if self.raises is not None:
            raise self.raises
        if self.reply is not None:
            os.write(kwargs["channel_fd"], self.reply)
        return self.process


class Pairs:
    """Wraps `socket.socketpair`: the arguments of each call and the pair it made."""

    def __init__(self) -> None:
        self.real = socket.socketpair
        self.calls: list[tuple] = []
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.child_fds: list[int] = []

    def __call__(self, *args):
        self.calls.append(args)
        pair = self.real(*args)
        self.pairs.append(pair)
        self.child_fds.append(pair[1].fileno())
        return pair


@pytest.fixture
def env(monkeypatch, tmp_path):
    """The fakes, put in place; launchers made by ``env.build`` are closed (their homes removed) after."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp's folders go under tmp_path
    spawn, create, pairs = Spawn(), CreateCgroup(), Pairs()
    monkeypatch.setattr(forkserver, "spawn_worker", spawn)
    monkeypatch.setattr(forkserver, "create_cgroup", create)
    monkeypatch.setattr(forkserver, "python_paths", lambda: ["/opt/python", "/usr/lib/python3"])
    monkeypatch.setattr(forkserver.socket, "socketpair", pairs)
    monkeypatch.setattr(forkserver, "FRESH_PROC_ON_CPU", False)
    made: list[ForkServerLauncher] = []

    def build(*args, **kwargs) -> ForkServerLauncher:
        launcher = ForkServerLauncher(*args, **kwargs)
        made.append(launcher)
        return launcher

    state = SimpleNamespace(spawn=spawn, create=create, pairs=pairs, build=build, tmp=tmp_path)
    yield state
    for launcher in made:
        launcher.close()
        assert not launcher._home.exists()
    for parent_end, child_end in pairs.pairs:
        parent_end.close()
        child_end.close()


def spawned(env) -> tuple[str, str | None, dict]:
    assert len(env.spawn.calls) == 1
    return env.spawn.calls[0]


# -- __init__: the roles ---------------------------------------------------------------------------


@pytest.mark.parametrize("roles, unknown", [
    (("candidate", "bogus", "cleanroom", "worker"), "['bogus', 'worker']"),
    (("Candidate",), "['Candidate']"),
])
def test_unknown_roles_are_refused_before_anything_is_made(env, roles, unknown):
    with pytest.raises(ValueError) as info:
        ForkServerLauncher("cpu", roles=roles)
    assert str(info.value) == f"roles must be among candidate, reference, cleanroom, got {unknown}"
    assert env.spawn.calls == [] and env.create.calls == [] and list(env.tmp.iterdir()) == []


@pytest.mark.parametrize("roles", [("candidate",), ("reference", "cleanroom"), ("cleanroom",)])
def test_only_reference_workers_may_run_unjailed(env, roles):
    with pytest.raises(ValueError) as info:
        ForkServerLauncher("cpu", trusted=True, roles=roles)
    assert str(info.value) == "only reference workers (problem code from this machine) may run unjailed"
    assert env.spawn.calls == [] and list(env.tmp.iterdir()) == []


def test_a_trusted_server_runs_references_given_once_or_twice(env):
    launcher = env.build("cpu", trusted=True, roles=["reference", "reference"])
    assert launcher.roles == ("reference", "reference") and launcher.trusted is True
    assert launcher.modules == {REFERENCE: "reference"}


@pytest.mark.parametrize("trusted, roles, expected", [
    (False, None, ("candidate",)),
    (False, (), ("candidate",)),
    (True, None, ("reference",)),
    (True, (), ("reference",)),
    (False, ["candidate", "cleanroom"], ("candidate", "cleanroom")),
    (False, ("reference", "candidate"), ("reference", "candidate")),
])
def test_default_roles_and_the_module_of_each(env, trusted, roles, expected):
    launcher = env.build("cpu", trusted=trusted, roles=roles)
    assert launcher.roles == expected and type(launcher.roles) is tuple
    assert launcher.modules == {forkserver.ROLES[role]: role for role in expected}
    assert launcher.modules == {{"candidate": CANDIDATE, "reference": REFERENCE, "cleanroom": CLEANROOM}[r]: r
                                for r in expected}


# -- __init__: attributes and the spawn -----------------------------------------------------------


def test_a_jailed_slot_server_its_attributes_and_spawn(env):
    launcher = env.build("cpu", 3, 2)
    assert launcher.device == "cpu" and launcher.slot == 3 and launcher.threads == 2
    assert launcher.trusted is False and launcher.roles == ("candidate",)
    assert launcher.joins_job_cgroups is False  # a jailed server's children cannot join a cgroup
    assert launcher.should_cancel() is False
    home = launcher._home
    assert home.parent == env.tmp and home.name.startswith("tritongym-fs3-") and home.is_dir()
    assert launcher._jobs == home / "jobs" and launcher._jobs.is_dir() and list(launcher._jobs.iterdir()) == []
    assert (home / "empty").is_dir() and list((home / "empty").iterdir()) == []
    assert sorted(p.name for p in home.iterdir()) == ["empty", "jobs"]
    assert type(launcher._send_lock) is type(threading.Lock()) and type(launcher._recv_lock) is type(threading.Lock())
    assert launcher._send_lock is not launcher._recv_lock
    assert launcher._send_lock.acquire(blocking=False) and launcher._recv_lock.acquire(blocking=False)
    launcher._send_lock.release()
    launcher._recv_lock.release()
    assert launcher._exits == {} and launcher._started == {} and launcher._failed == {}
    assert launcher._current is None and launcher._dead is None
    assert launcher._rebinds == []
    assert launcher.fresh_proc is False
    assert launcher.process is env.spawn.process and env.spawn.process.tail_limits == []
    # The slot's cgroup: uncapped processes and memory until a job sets them, the CPU capped at `threads`.
    [(name, args, kwargs)] = env.create.calls
    assert re.fullmatch(r"tritongym-slot-[0-9a-f]{12}", name), name
    assert args == (1 << 20, 1 << 62) and kwargs == {"cpu_cores": 2}
    assert launcher.cgroup is env.create.made[0]
    module, source, kwargs = spawned(env)
    assert module == "tritongym.execution.forkserver_main" and source is None
    token = kwargs.pop("token")
    assert re.fullmatch(r"[0-9a-f]{24}", token), token
    assert kwargs == {
        "device": "cpu", "mode": "bwrap", "job_dir": home / "empty", "log_path": home / "server.log",
        "channel_fd": env.pairs.child_fds[0],
        "limits": ResourceLimits(memory_bytes=None, max_processes=None, job_dir_bytes=1 << 20),
        "interpret": True, "cgroup": launcher.cgroup, "cap_add": JAILED_CAPS,
        "ro_binds": ((str(home / "jobs"), "/jobs"),), "jail_seccomp": False, "host_proc": False,
        "extra_args": (), "threads": 2,
    }
    assert kwargs["limits"].max_open_files == 1024 and kwargs["limits"].memory_bytes is None


def test_the_default_slot_is_zero(env):
    launcher = env.build("cpu")
    assert launcher.slot == 0 and launcher.threads is None
    assert launcher._home.name.startswith("tritongym-fs0-")


def test_a_trusted_server_has_no_jail_no_cgroup_and_no_rebinds(env, monkeypatch):
    monkeypatch.setattr(forkserver, "python_paths", lambda: ["/tmp/venv/lib/python3/site-packages"])
    launcher = env.build("cuda:1", 5, None, trusted=True)
    assert launcher.trusted is True and launcher.roles == ("reference",) and launcher.threads is None
    assert launcher.joins_job_cgroups is True  # each child joins the cgroup of its job (its memory cap)
    assert launcher._home.name.startswith("tritongym-fs5-")
    assert launcher.cgroup is None and env.create.calls == []
    assert launcher._rebinds == []
    assert launcher.fresh_proc is False  # a trusted worker is no jail: it sees the host's /proc
    module, source, kwargs = spawned(env)
    assert module == "tritongym.execution.forkserver_main" and source is None
    del kwargs["token"]
    assert kwargs == {
        "device": "cuda:1", "mode": "none", "job_dir": launcher._home / "empty",
        "log_path": launcher._home / "server.log", "channel_fd": env.pairs.child_fds[0],
        "limits": ResourceLimits(memory_bytes=None, max_processes=None, job_dir_bytes=1 << 20),
        "interpret": False, "cgroup": None, "cap_add": (), "ro_binds": (), "jail_seccomp": False,
        "host_proc": False, "extra_args": ("--trusted",), "threads": None,
    }


def test_a_server_with_cgroup_caps_gets_a_cgroup_named_for_its_roles(env):
    launcher = env.build("cpu", threads=4, roles=("candidate", "cleanroom"), cgroup_caps=(77, 5 << 30))
    [(name, args, kwargs)] = env.create.calls
    assert re.fullmatch(r"tritongym-candidate-cleanroom-[0-9a-f]{12}", name), name
    assert args == (77, 5 << 30) and kwargs == {}
    assert launcher.cgroup is env.create.made[0] and spawned(env)[2]["cgroup"] is launcher.cgroup
    other = env.build("cpu", roles=("reference",), cgroup_caps=(9, 1 << 30))
    name, args, kwargs = env.create.calls[1]
    assert re.fullmatch(r"tritongym-reference-[0-9a-f]{12}", name) and args == (9, 1 << 30) and kwargs == {}
    assert other.cgroup is env.create.made[1]


def test_a_trusted_server_ignores_cgroup_caps(env):
    launcher = env.build("cpu", trusted=True, cgroup_caps=(77, 5 << 30))
    assert launcher.cgroup is None and env.create.calls == []


@pytest.mark.parametrize("threads, cores", [(None, 1), (0, 1), (1, 1), (3, 3)])
def test_the_slot_cgroup_caps_the_cpu_at_its_threads(env, threads, cores):
    env.build("cpu", threads=threads)
    [(name, args, kwargs)] = env.create.calls
    assert args == (1 << 20, 1 << 62) and kwargs == {"cpu_cores": cores}
    assert spawned(env)[2]["threads"] == threads


def test_no_cgroup_where_none_can_be_made(env, monkeypatch):
    monkeypatch.setattr(forkserver, "create_cgroup", lambda *args, **kwargs: None)
    launcher = env.build("cpu")
    assert launcher.cgroup is None and spawned(env)[2]["cgroup"] is None


@pytest.mark.parametrize("device, trusted, fresh_on_cpu, fresh, interpret", [
    ("cuda", False, False, True, False),
    ("cuda:1", False, False, True, False),
    ("cpu", False, False, False, True),
    ("cpu", False, True, True, True),
    ("cuda", True, False, False, False),
    ("cpu", True, True, False, True),
    ("cuda:0", True, True, False, False),
])
def test_fresh_proc_and_interpret_by_device(env, monkeypatch, device, trusted, fresh_on_cpu, fresh, interpret):
    monkeypatch.setattr(forkserver, "FRESH_PROC_ON_CPU", fresh_on_cpu)
    launcher = env.build(device, trusted=trusted)
    assert launcher.fresh_proc is fresh
    kwargs = spawned(env)[2]
    assert kwargs["host_proc"] is fresh and kwargs["interpret"] is interpret and kwargs["device"] == device


def test_python_folders_under_tmp_are_bound_again_outside_it(env, monkeypatch):
    monkeypatch.setattr(forkserver, "python_paths", lambda: [
        "/opt/python", "/tmp", "/tmp/venv/lib", "/tmpfoo", "/var/tmp/venv", "/usr/tmp", "/tmp/x/site-packages"])
    launcher = env.build("cpu")
    assert launcher._rebinds == [("/.tritongym-python/0", "/tmp"), ("/.tritongym-python/1", "/tmp/venv/lib"),
                                 ("/.tritongym-python/2", "/tmp/x/site-packages")]
    assert spawned(env)[2]["ro_binds"] == (
        (str(launcher._jobs), "/jobs"), ("/tmp", "/.tritongym-python/0"), ("/tmp/venv/lib", "/.tritongym-python/1"),
        ("/tmp/x/site-packages", "/.tritongym-python/2"))


# -- __init__: the control socket and the ready handshake ----------------------------------------


def test_the_control_socket_is_a_seqpacket_pair_whose_child_end_is_closed(env):
    launcher = env.build("cpu")
    assert env.pairs.calls == [(socket.AF_UNIX, socket.SOCK_SEQPACKET)]
    [(parent_end, child_end)] = env.pairs.pairs
    assert launcher.control is parent_end and parent_end.fileno() != -1
    assert child_end.fileno() == -1  # the server holds its own copy: the parent's is closed
    assert parent_end.type == socket.SOCK_SEQPACKET and parent_end.family == socket.AF_UNIX
    assert launcher.control.gettimeout() == forkserver.START_TIMEOUT == 180.0


@pytest.mark.parametrize("reply", [None, b"not json", b'{"op": "started"}', b'{"op": "Ready"}', b"{}",
                                   b'{"ready": "op"}'])
def test_a_server_that_does_not_say_ready_is_closed_and_reported_with_its_log(env, reply):
    env.spawn.reply = reply
    with pytest.raises(EvaluatorError) as info:
        ForkServerLauncher("cpu", 2)
    assert str(info.value) == f"the fork server did not start: {TAIL}"
    assert env.spawn.process.tail_limits == [2000]
    assert env.spawn.process.kills == 1  # closed: the server killed
    [(parent_end, child_end)] = env.pairs.pairs
    assert parent_end.fileno() == -1 and child_end.fileno() == -1
    assert env.create.made[0].destroyed == 1
    assert list(env.tmp.iterdir()) == []  # its home removed


def test_a_ready_frame_among_other_keys_is_accepted(env):
    env.spawn.reply = b'{"op": "ready", "pid": 7}'
    launcher = env.build("cpu")
    assert env.spawn.process.tail_limits == [] and env.spawn.process.kills == 0
    assert launcher.control.fileno() != -1 and launcher._home.is_dir()
    assert env.create.made[0].destroyed == 0


def test_a_spawn_that_fails_leaves_nothing_behind(env):
    failure = RuntimeError("bwrap: no permissions to create a new namespace")
    env.spawn.raises = failure
    with pytest.raises(RuntimeError) as info:
        ForkServerLauncher("cpu", 1)
    assert info.value is failure
    [(parent_end, child_end)] = env.pairs.pairs
    assert parent_end.fileno() == -1 and child_end.fileno() == -1
    assert env.create.made[0].destroyed == 1
    assert list(env.tmp.iterdir()) == []


def test_a_trusted_spawn_that_fails_leaves_nothing_behind(env):
    env.spawn.raises = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        ForkServerLauncher("cpu", trusted=True)
    [(parent_end, child_end)] = env.pairs.pairs
    assert parent_end.fileno() == -1 and child_end.fileno() == -1
    assert list(env.tmp.iterdir()) == []


# -- start: what a job's frame says of the server's jail -------------------------------------------


@pytest.mark.parametrize("fresh_proc", [True, False])
def test_a_jobs_frame_carries_the_servers_rebinds_and_procfs_choice(tmp_path, fresh_proc):
    """The server's children bind the Python folders back over their /tmp and mount their own procfs as
    the launcher says (the rest of the frame: test_forkserver_host.py, with a real server)."""
    launcher = object.__new__(ForkServerLauncher)
    launcher.modules, launcher.trusted, launcher.device, launcher.threads = {CANDIDATE: "candidate"}, False, "cpu", 1
    launcher.joins_job_cgroups = False
    launcher._jobs = tmp_path / "jobs"
    launcher._jobs.mkdir()
    launcher._rebinds = [("/.tritongym-python/0", "/tmp/venv/lib")]
    launcher.fresh_proc = fresh_proc
    launcher._dead, launcher._current, launcher.cgroup = None, None, None
    launcher._started, launcher._failed, launcher._exits = {}, {}, {}
    launcher.process = SimpleNamespace(popen=SimpleNamespace(poll=lambda: None))
    launcher.should_cancel = lambda: False
    sent: list[tuple[dict, list[int]]] = []

    def send(frame, fds):
        sent.append((frame, fds))
        launcher._started[frame["job"]] = 41

    launcher._send = send
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "candidate.py").write_text("x = 1\n")
    worker = launcher.start(CANDIDATE, str(job_dir / "candidate.py"), job_dir=job_dir, limits=ResourceLimits(),
                            token="t0k", log_path=tmp_path / "job.log", channel_fd=99)
    [(frame, fds)] = sent
    assert frame["rebind"] == [("/.tritongym-python/0", "/tmp/venv/lib")]
    assert frame["fresh_proc"] is fresh_proc
    assert frame["role"] == "candidate" and frame["files"] == ["candidate.py"] and fds[0] == 99
    launcher.forget(worker.job)
    assert list(launcher._jobs.iterdir()) == []


# -- candidate_cgroup -------------------------------------------------------------------------------


def bare(cgroup) -> ForkServerLauncher:
    launcher = object.__new__(ForkServerLauncher)
    launcher.cgroup = cgroup
    return launcher


def weakened(have: str) -> Notice:
    return Notice(NoticeCode.LIMITS_WEAKENED,
                  f"no cgroup with pids and memory caps could be created here (have: {have}); the candidate's "
                  "process count and memory are capped by rlimits only, which do not bind a root user's "
                  "process count or a CUDA process's memory")


@pytest.mark.parametrize("limits, have", [
    (None, "none"),
    ({}, ""),
    ({"pids": 10}, "pids"),
    ({"memory": 1 << 30}, "memory"),
    ({"memory": 1 << 30, "cpu": 100000}, "cpu, memory"),
    ({"pids": 10, "cpu": 100000}, "cpu, pids"),
])
def test_without_pids_and_memory_caps_a_candidate_is_told_its_limits_are_weakened(limits, have):
    cgroup = None if limits is None else FakeCgroup(limits)
    evaluation = SimpleNamespace(notices=[Notice("earlier", "kept")])
    assert bare(cgroup).candidate_cgroup(evaluation, 64, 1 << 30) is None
    assert evaluation.notices == [Notice("earlier", "kept"), weakened(have)]
    assert evaluation.notices[1].code == "limits_weakened"
    if cgroup is not None:
        assert cgroup.set_calls == []


@pytest.mark.parametrize("limits", [{"pids": 1, "memory": 1}, {"pids": 1, "memory": 1, "cpu": 1}])
def test_a_slot_cgroup_is_capped_for_the_job_and_the_server(limits):
    cgroup = FakeCgroup(limits)
    evaluation = SimpleNamespace(notices=[])
    assert bare(cgroup).candidate_cgroup(evaluation, 64, 3 << 30) is None  # the slot's cgroup holds the job
    assert cgroup.set_calls == [(64 + 8, (3 << 30) + (2 << 30))]
    assert forkserver.SERVER_PROCESSES == 8 and forkserver.SERVER_MEMORY_HEADROOM == 2 << 30
    assert evaluation.notices == []


# -- starts_clean_rooms ------------------------------------------------------------------------------


@pytest.mark.parametrize("roles, trusted, starts", [
    (("candidate", "cleanroom"), False, True),
    (("cleanroom",), False, True),
    (("candidate",), False, False),
    (("reference",), False, False),
    (("cleanroom",), True, False),
    (("reference",), True, False),
])
def test_starts_clean_rooms_only_in_a_jailed_server_with_the_cleanroom_role(roles, trusted, starts):
    launcher = object.__new__(ForkServerLauncher)
    launcher.roles, launcher.trusted = roles, trusted
    assert launcher.starts_clean_rooms is starts


def test_a_built_candidate_slot_server_starts_clean_rooms(env):
    assert env.build("cpu", roles=("candidate", "cleanroom")).starts_clean_rooms is True
    assert env.build("cpu").starts_clean_rooms is False


# -- forkserver_problem ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def fresh_probe():
    forkserver.forkserver_problem.cache_clear()
    yield
    forkserver.forkserver_problem.cache_clear()


class Probe:
    """The probe's world: `shutil.which`, `sys.platform`, `bwrap_command` and `subprocess.run` replaced."""

    def __init__(self, monkeypatch, tmp_path, *, which="/usr/bin/bwrap", platform="linux",
                 run=None) -> None:
        self.tmp = tmp_path
        self.which_calls: list[str] = []
        self.command_calls: list[tuple[tuple, dict, bool]] = []
        self.run_calls: list[tuple[list[str], dict]] = []
        self.run_result = run if run is not None else SimpleNamespace(returncode=0, stdout="", stderr="")
        self.command_error: BaseException | None = None
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        monkeypatch.setattr(forkserver.shutil, "which", self.which)
        monkeypatch.setattr(forkserver.sys, "platform", platform)
        monkeypatch.setattr(forkserver, "bwrap_command", self.bwrap_command)
        monkeypatch.setattr(forkserver.subprocess, "run", self.run)
        self.answer = which

    def which(self, name):
        self.which_calls.append(name)
        return self.answer

    def bwrap_command(self, *args, **kwargs):
        self.command_calls.append((args, kwargs, os.path.isdir(args[0])))
        if self.command_error is not None:
            raise self.command_error
        return ["bwrap", "--die-with-parent", "--"]

    def run(self, command, **kwargs):
        self.run_calls.append((command, kwargs))
        if isinstance(self.run_result, BaseException):
            raise self.run_result
        return self.run_result


def test_the_probe_needs_bwrap(monkeypatch, tmp_path):
    probe = Probe(monkeypatch, tmp_path, which=None)
    assert forkserver.forkserver_problem() == "bubblewrap (bwrap) is not installed"
    assert probe.which_calls == ["bwrap"] and probe.command_calls == [] and probe.run_calls == []


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14"])
def test_the_probe_needs_linux(monkeypatch, tmp_path, platform):
    probe = Probe(monkeypatch, tmp_path, platform=platform)
    assert forkserver.forkserver_problem() == "fork servers need Linux namespaces"
    assert probe.which_calls == ["bwrap"] and probe.command_calls == [] and probe.run_calls == []


@pytest.mark.parametrize("platform", ["linux", "linux2"])
def test_the_probe_runs_in_the_servers_jail_and_passes(monkeypatch, tmp_path, platform):
    probe = Probe(monkeypatch, tmp_path, platform=platform)
    assert forkserver.forkserver_problem() is None
    [(args, kwargs, existed)] = probe.command_calls
    assert len(args) == 2 and args[1] is False
    empty = Path(args[0])
    assert existed and empty.parent == tmp_path and empty.name.startswith("tritongym-probe-")
    assert kwargs == {"job_dir_bytes": 1 << 20, "cap_add": ("CAP_SYS_ADMIN", "CAP_SETPCAP")}
    assert probe.run_calls == [(["bwrap", "--die-with-parent", "--", sys.executable, "-I", "-S", "-c", PROBE],
                                {"capture_output": True, "text": True, "timeout": 60})]
    assert list(tmp_path.iterdir()) == []  # the empty job folder removed


def test_the_probe_is_asked_once(monkeypatch, tmp_path):
    probe = Probe(monkeypatch, tmp_path)
    assert forkserver.forkserver_problem() is None and forkserver.forkserver_problem() is None
    assert len(probe.run_calls) == 1


def test_the_probes_folder_is_removed_when_its_command_cannot_be_built(monkeypatch, tmp_path):
    probe = Probe(monkeypatch, tmp_path)
    probe.command_error = RuntimeError("no seccomp")
    with pytest.raises(RuntimeError, match="no seccomp"):
        forkserver.forkserver_problem()
    assert probe.command_calls[0][2] and probe.run_calls == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("error, message", [
    (OSError(2, "No such file or directory"), "bwrap failed: [Errno 2] No such file or directory"),
    (subprocess.TimeoutExpired(["bwrap"], 60), "bwrap failed: Command '['bwrap']' timed out after 60 seconds"),
])
def test_a_probe_that_cannot_run_says_why(monkeypatch, tmp_path, error, message):
    Probe(monkeypatch, tmp_path, run=error)
    assert forkserver.forkserver_problem() == message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code", [1, 2, -9])
def test_a_failing_probe_says_the_end_of_its_error(monkeypatch, tmp_path, code):
    digits = "".join(str(i % 10) for i in range(450)) + "EOF"
    Probe(monkeypatch, tmp_path, run=SimpleNamespace(returncode=code, stdout="ignored",
                                                     stderr=f"  \n{digits}\n  \n"))
    assert forkserver.forkserver_problem() == f"nested namespaces are not available in the jail: {digits[-300:]}"
    assert len(digits[-300:]) == 300 and digits[-300:].startswith("3456") and digits[-300:].endswith("89EOF")


def test_a_failing_probe_with_a_short_error_says_all_of_it(monkeypatch, tmp_path):
    Probe(monkeypatch, tmp_path,
          run=SimpleNamespace(returncode=1, stdout="", stderr="unshare: Operation not permitted\n"))
    assert forkserver.forkserver_problem() == \
        "nested namespaces are not available in the jail: unshare: Operation not permitted"


# -- jailed_forkserver_problem -----------------------------------------------------------------------


@pytest.mark.parametrize("device, flag, gpu_problem", [
    ("cuda", None, True),
    ("cuda:0", None, True),
    ("cuda:3", None, True),
    ("cuda", "0", True),
    ("cuda:1", "true", True),
    ("cuda", "", True),
    ("cuda", "1", False),
    ("cuda:2", "1", False),
    ("cpu", None, False),
    ("cpu", "1", False),
    ("cudax", None, False),
])
def test_a_gpu_gets_a_jailed_fork_server_only_when_opted_in(monkeypatch, device, flag, gpu_problem):
    monkeypatch.setattr(forkserver, "forkserver_problem", lambda: "the probe's answer")
    if flag is None:
        monkeypatch.delenv("TRITONGYM_GPU_FORKSERVER", raising=False)
    else:
        monkeypatch.setenv("TRITONGYM_GPU_FORKSERVER", flag)
    expected = forkserver.GPU_FORK_PROBLEM if gpu_problem else "the probe's answer"
    assert forkserver.jailed_forkserver_problem(device) == expected


def test_a_cpu_fork_server_needs_only_the_probe(monkeypatch):
    monkeypatch.setattr(forkserver, "forkserver_problem", lambda: None)
    monkeypatch.delenv("TRITONGYM_GPU_FORKSERVER", raising=False)
    assert forkserver.jailed_forkserver_problem("cpu") is None
    assert forkserver.jailed_forkserver_problem("cuda").startswith("a jailed fork server's children could not use")


# -- host_pid: a /proc of chosen processes --------------------------------------------------------


class HostProc(FakeProc):
    """Processes with their nested-namespace PIDs (``NSpid``), as `host_pid` reads them."""

    def add(self, pid: int, inner: tuple[int, ...] | None = None, children: tuple[int, ...] = (),
            name: bytes = b"python3", rss_kb: int | None = None) -> None:
        lines = [b"Name:\t" + name, b"State:\tS (sleeping)", f"Pid:\t{pid}".encode()]
        if inner is not None:  # NSpid: the host's PID, then its PID in each nested namespace
            lines.append("\t".join(["NSpid:", str(pid), *map(str, inner)]).encode())
        if rss_kb is not None:
            lines.append(f"VmRSS:\t{rss_kb:8} kB".encode())
        self.put(pid, lines, children)


@pytest.fixture
def proc(monkeypatch) -> HostProc:
    fake = HostProc()
    monkeypatch.setattr(forkserver, "open", fake.open, raising=False)
    return fake


def test_host_pid_finds_a_nested_worker_and_stops_reading_there(proc):
    proc.add(100, (), (101,))
    proc.add(101, (1,), (102,))  # the server's middle: PID 1 of the jail's namespace
    proc.add(102, (1, 1), (103,))
    proc.add(103, (5, 2))
    assert forkserver.host_pid(100, ["5", "2"]) == 103 and forkserver.host_pid(100, ["*", "2"]) == 103
    assert forkserver.host_pid(100, ["1"]) == 101
    assert forkserver.host_pid(100, ["2"]) is None and forkserver.host_pid(100, ["5", "2", "1"]) is None


@pytest.mark.parametrize("size, found", [(4096, True), (4097, False)])
def test_host_pid_reads_at_most_4096_processes(proc, size, found):
    """A runaway tree (a fork bomb in the jail) costs at most 4096 reads: the walk stops there."""
    for pid in range(1, size):
        proc.add(pid, (), (pid + 1,))
    proc.add(size, (7,))
    assert forkserver.host_pid(1, ["7"]) == (size if found else None)
    assert proc.statuses() == list(range(1, min(size, 4096) + 1))


def test_host_pid_goes_on_past_a_process_that_exited_during_the_walk(proc):
    proc.add(10, (), (12, 11))  # 11 is read first (the stack's top): it exited, its files are gone
    proc.add(12, (3,))
    assert forkserver.host_pid(10, ["3"]) == 12
    proc.files["/proc/13/status"] = proc.files.pop("/proc/12/status").replace(b"\t12\t3", b"\t13\t3")
    proc.add(14, (), (13, 11))  # 13 exited between its status and its children: its status counts
    assert forkserver.host_pid(14, ["3"]) == 13


def test_host_pid_reads_a_process_listed_twice_once_and_goes_on(proc):
    """A process reparented while the tree is walked shows under its old and its new parent."""
    proc.add(20, (), (23, 22, 21))
    proc.add(21, (), (22,))
    proc.add(22, ())
    proc.add(23, (4,))
    assert forkserver.host_pid(20, ["4"]) == 23
    assert proc.statuses() == [20, 21, 22, 23]


@pytest.mark.parametrize("name", [b"\xe2\x98\x83 worker", b"\xff\xfe", b"caf\xc3\xa9"])
def test_host_pid_finds_a_worker_whose_name_is_not_ascii(proc, name):
    """A worker names itself (prctl PR_SET_NAME takes any bytes): it is still found, not skipped."""
    proc.add(30, (), (31,))
    proc.add(31, (6,), name=name)
    assert forkserver.host_pid(30, ["6"]) == 31


# -- ForkedWorker: its description, waits and log ----------------------------------------------------


class MemoryCgroup:
    """A cgroup whose memory.events says (or not) that its OOM killer ran."""

    def __init__(self, limits: dict[str, int], exceeded: bool = True) -> None:
        self.limits = limits
        self.exceeded = exceeded

    def memory_exceeded(self) -> bool:
        return self.exceeded


class WorkerServer:
    """Stands for the worker's `ForkServerLauncher`: scripted exit codes, each call recorded."""

    def __init__(self, code: int | None = None, trusted: bool = False) -> None:
        self.code = code
        self.trusted = trusted
        self.calls: list[tuple] = []

    def exit_code(self, job, wait):
        self.calls.append(("exit_code", job, wait))
        return self.code

    def lost(self):
        self.calls.append(("lost",))
        return False

    def kill(self, job):
        self.calls.append(("kill", job))

    def forget(self, job):
        self.calls.append(("forget", job))


@pytest.mark.parametrize("limits, words", [
    ({"pids": 72, "memory": 3 << 30}, "3"),
    ({"memory": 3 << 29}, "1.5"),
    ({"memory": (10 << 30) + (1 << 28)}, "10.25"),
    ({"pids": 72}, "0"),  # a cgroup without a memory cap: nothing to name
])
def test_a_worker_its_cgroup_killed_for_memory_says_so_with_the_limit_in_gib(tmp_path, limits, words):
    server = WorkerServer(code=-9)
    cgroup = MemoryCgroup(limits)
    worker = forkserver.ForkedWorker(server, "job1", tmp_path / "log", cgroup, pid=3)
    assert worker.cgroup is cgroup
    assert worker.exit_description() == f"exceeded the memory limit of {words} GiB and was killed"
    assert server.calls == []  # the cgroup's word is enough: the server is not asked


@pytest.mark.parametrize("cgroup", [None, MemoryCgroup({"memory": 1 << 30}, exceeded=False)])
@pytest.mark.parametrize("code, words", [(None, "still running"), (0, "exited with code 0"), (-9, "killed by SIGKILL")])
def test_a_worker_not_killed_for_memory_is_described_by_its_exit_asked_without_waiting(tmp_path, cgroup, code, words):
    server = WorkerServer(code=code)
    worker = forkserver.ForkedWorker(server, "job2", tmp_path / "log", cgroup)
    assert worker.exit_description() == words
    assert server.calls == [("exit_code", "job2", 0.0)]


def test_alive_asks_for_the_exit_without_waiting(tmp_path):
    server = WorkerServer(code=None)
    worker = forkserver.ForkedWorker(server, "job3", tmp_path / "log", None)
    assert worker.alive() is True
    assert server.calls == [("exit_code", "job3", 0.0), ("lost",)]


def test_a_workers_log_tail_is_its_last_4000_bytes_by_default(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("".join(f"{i % 10}" for i in range(5000)) + "END")
    worker = forkserver.ForkedWorker(WorkerServer(), "job4", log, None)
    text = log.read_text()
    assert worker.log_tail() == "…" + text[-4000:] and len(text[-4000:]) == 4000
    assert worker.log_tail(10) == "…" + text[-10:]


# -- exit_code and kill: the waits, with a fake clock ---------------------------------------------------


class Clock:
    """`time` for the module: a monotonic clock that moves only when `advance` says."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


def waiting_launcher(monkeypatch, step: float) -> tuple[ForkServerLauncher, Clock, list[float]]:
    """A launcher whose server never answers: each `_pump` records its timeout and moves the clock by `step`."""
    clock = Clock()
    monkeypatch.setattr(forkserver, "time", clock)
    launcher = object.__new__(ForkServerLauncher)
    launcher._dead, launcher._current, launcher.cgroup, launcher.trusted = None, None, None, False
    launcher.joins_job_cgroups = False
    launcher._started, launcher._failed, launcher._exits = {}, {}, {}
    launcher.process = SimpleNamespace(popen=SimpleNamespace(poll=lambda: None))
    pumps: list[float] = []

    def pump(timeout):
        pumps.append(timeout)
        clock.now += step

    launcher._pump = pump
    return launcher, clock, pumps


def test_exit_code_reads_in_steps_of_50_ms_until_its_wait_ends_and_not_once_more(monkeypatch):
    launcher, clock, pumps = waiting_launcher(monkeypatch, 0.0625)
    assert launcher.exit_code("j", wait=0.25) is None
    assert pumps == [0.05] * 4 and clock.now == 1000.25  # the deadline met exactly: no read of 0 s after it


def test_exit_code_reads_no_longer_than_what_is_left_of_its_wait(monkeypatch):
    launcher, clock, pumps = waiting_launcher(monkeypatch, 0.03125)
    assert launcher.exit_code("j", wait=0.09375) is None
    assert pumps == [0.05, 0.05, 0.03125]


def test_kill_sends_the_kill_and_waits_up_to_10_s_for_the_exit(monkeypatch):
    launcher, _, _ = waiting_launcher(monkeypatch, 1.0)
    sent, waits = [], []
    launcher._send = lambda frame: sent.append(frame)
    launcher.exit_code = lambda job, wait: waits.append((job, wait))
    launcher.kill("j")
    assert sent == [{"op": "kill", "job": "j"}] and waits == [("j", 10.0)]


def test_kill_sends_nothing_for_a_job_that_already_exited(monkeypatch):
    launcher, _, pumps = waiting_launcher(monkeypatch, 1.0)
    launcher._exits["j"] = 0
    sent = []
    launcher._send = lambda frame: sent.append(frame)
    launcher.kill("j")
    assert sent == [] and pumps == []


# -- start: the CUDA branch, and a server that never answers ---------------------------------------


def start_launcher(tmp_path, device: str, trusted: bool = False) -> ForkServerLauncher:
    launcher = object.__new__(ForkServerLauncher)
    launcher.modules, launcher.trusted, launcher.device, launcher.threads = {CANDIDATE: "candidate"}, trusted, device, 1
    launcher.joins_job_cgroups = trusted  # as __init__ sets it
    launcher._jobs = tmp_path / "jobs"
    launcher._jobs.mkdir()
    launcher._rebinds, launcher.fresh_proc = [], False
    launcher._dead, launcher._current, launcher.cgroup = None, None, None
    launcher._started, launcher._failed, launcher._exits = {}, {}, {}
    launcher.process = SimpleNamespace(popen=SimpleNamespace(poll=lambda: None))
    launcher.should_cancel = lambda: False
    return launcher


def start_job(launcher, tmp_path, limits: ResourceLimits):
    job_dir = tmp_path / "job"
    job_dir.mkdir(exist_ok=True)
    (job_dir / "candidate.py").write_text("x = 1\n")
    return launcher.start(CANDIDATE, str(job_dir / "candidate.py"), job_dir=job_dir, limits=limits, token="t0k",
                          log_path=tmp_path / "job.log", channel_fd=99)


@pytest.fixture
def no_passthrough(monkeypatch):
    for name in forkserver.PASSTHROUGH_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("device, visible, cuda", [
    ("cuda:1", "3", True),
    ("cuda", "2,3", True),
    ("cpu", "2,3", False),
])
def test_a_jobs_frame_on_a_gpu_names_the_device_its_variables_and_no_address_space_cap(
        tmp_path, monkeypatch, no_passthrough, device, visible, cuda):
    """A CUDA worker gets ``--device cuda``, the visible devices narrowed to its GPU as a fresh worker's
    are, and no RLIMIT_AS (CUDA reserves far more address space than it uses; its memory is the cgroup's)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    launcher = start_launcher(tmp_path, device)
    sent = []

    def send(frame, fds):
        sent.append(frame)
        launcher._started[frame["job"]] = 5

    launcher._send = send
    limits = ResourceLimits(memory_bytes=3 << 30, max_processes=64)
    start_job(launcher, tmp_path, limits)
    [frame] = sent
    assert frame["argv"] == ["--source", "/job/candidate.py", "--device", "cuda" if cuda else "cpu"]
    gpu = {"CUDA_VISIBLE_DEVICES": visible, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"} if cuda else {
        "CUDA_VISIBLE_DEVICES": "2,3"}
    assert {k: v for k, v in frame["env"].items() if k.startswith("CUDA")} == gpu
    caps = [("RLIMIT_NPROC", 64), ("RLIMIT_NOFILE", 1024), ("RLIMIT_FSIZE", 64 << 20)]
    assert frame["limits"] == (caps if cuda else [*caps, ("RLIMIT_AS", 3 << 30)])


def test_a_server_silent_for_30_s_is_reported_after_30_s_of_50_ms_reads(tmp_path, monkeypatch, no_passthrough):
    launcher, clock, pumps = waiting_launcher(monkeypatch, 1.0)
    launcher.modules, launcher.device, launcher.threads = {CANDIDATE: "candidate"}, "cpu", 1
    launcher._jobs = tmp_path / "jobs"
    launcher._jobs.mkdir()
    launcher._rebinds, launcher.fresh_proc = [], False
    launcher._send = lambda frame, fds: None
    with pytest.raises(EvaluatorError) as info:
        start_job(launcher, tmp_path, ResourceLimits())
    assert str(info.value) == "the fork server did not start the job (no reply in 30 s)"
    # read until the clock passed the deadline: at 30 s exactly it still reads once more
    assert pumps == [0.05] * 31 and clock.now == 1031.0


# -- forget, close and _cleanup: removing what a job or server leaves -----------------------------------


def forgetting_launcher(tmp_path, trusted: bool) -> ForkServerLauncher:
    launcher = object.__new__(ForkServerLauncher)
    launcher.trusted = trusted
    launcher._jobs = tmp_path / "jobs"
    launcher._jobs.mkdir()
    launcher._exits, launcher._current = {"j": 0, "other": 1}, "j"
    return launcher


def test_forget_removes_a_jailed_jobs_read_only_folder_and_is_harmless_twice(tmp_path):
    launcher = forgetting_launcher(tmp_path, trusted=False)
    folder = launcher._jobs / "j"
    folder.mkdir()
    (folder / "candidate.py").write_text("x = 1\n")
    os.chmod(folder / "candidate.py", 0o444)
    os.chmod(folder, 0o555)  # as start leaves it
    launcher.forget("j")
    assert not folder.exists() and launcher._exits == {"other": 1} and launcher._current is None
    launcher.forget("j")  # its folder is gone already
    assert list(launcher._jobs.iterdir()) == [] and launcher._exits == {"other": 1}


def test_forget_leaves_the_current_job_of_another_and_a_trusted_servers_folders(tmp_path):
    launcher = forgetting_launcher(tmp_path, trusted=True)
    (launcher._jobs / "j").mkdir()
    launcher._current = "other"
    launcher.forget("j")
    assert launcher._current == "other" and launcher._exits == {"other": 1}
    assert (launcher._jobs / "j").is_dir()  # a trusted server's jobs have no folder of the server's


class StuckRmtree:
    """`shutil.rmtree` for a folder that cannot be removed (a busy mount, a file made immutable): it
    fails unless told to ignore errors; each call recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[Path, dict]] = []

    def __call__(self, path, **kwargs):
        self.calls.append((Path(path), kwargs))
        if not kwargs.get("ignore_errors"):
            raise PermissionError(1, "Operation not permitted", str(path))


def test_forget_shrugs_off_a_job_folder_that_cannot_be_removed(tmp_path, monkeypatch):
    rmtree = StuckRmtree()
    monkeypatch.setattr(forkserver.shutil, "rmtree", rmtree)
    launcher = forgetting_launcher(tmp_path, trusted=False)
    (launcher._jobs / "j").mkdir()
    launcher.forget("j")
    assert rmtree.calls == [(launcher._jobs / "j", {"ignore_errors": True})]
    assert launcher._exits == {"other": 1} and launcher._current is None


def test_closing_a_server_whose_home_cannot_be_removed_still_closes_it_once(tmp_path, monkeypatch):
    rmtree = StuckRmtree()
    monkeypatch.setattr(forkserver.shutil, "rmtree", rmtree)
    launcher = object.__new__(ForkServerLauncher)
    launcher._home = tmp_path / "home"
    launcher.cgroup = cgroup = FakeCgroup()
    launcher.process = FakeServerProcess()
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child_end.close()
    launcher.control = parent_end
    launcher._send_lock = threading.Lock()
    launcher._dead = None
    launcher.close()
    launcher.close()  # twice (a pool and its references both close it): harmless
    assert rmtree.calls == [(tmp_path / "home", {"ignore_errors": True})] * 2
    assert cgroup.destroyed == 1 and launcher.cgroup is None and launcher.process.kills == 2
    assert parent_end.fileno() == -1


# -- the control channel: what the host sends and how long it waits ------------------------------------


@pytest.mark.parametrize("current, exits, sent", [
    (None, {}, []),  # no job runs: nothing to kill
    ("j", {"j": 0}, []),  # it exited already
    ("j", {"other": 0}, [{"op": "kill", "job": "j"}]),
])
def test_kill_current_sends_a_kill_only_for_a_running_job(monkeypatch, current, exits, sent):
    launcher, _, _ = waiting_launcher(monkeypatch, 1.0)
    launcher._current, launcher._exits = current, dict(exits)
    frames = []
    launcher._send = lambda frame: frames.append(frame)
    launcher.kill_current()
    assert frames == sent


def test_close_asks_the_server_to_exit_then_kills_it(tmp_path):
    launcher = object.__new__(ForkServerLauncher)
    launcher._home = tmp_path / "home"
    launcher._home.mkdir()
    launcher.cgroup = FakeCgroup()
    launcher.process = FakeServerProcess()
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    launcher.control, launcher._send_lock, launcher._dead = parent_end, threading.Lock(), None
    launcher.close()
    assert json.loads(child_end.recv(1 << 16)) == {"op": "exit"}  # what forkserver_main reads
    child_end.close()
    assert launcher.process.kills == 1 and parent_end.fileno() == -1 and not launcher._home.exists()


def test_a_trusted_jobs_frame_in_full(tmp_path, monkeypatch, no_passthrough):
    """The start frame as forkserver_main reads it (test_forkserver_host.py runs it against a real server)."""
    launcher = start_launcher(tmp_path, "cpu", trusted=True)
    launcher.modules, launcher.threads = {REFERENCE: "reference"}, 3
    sent = []

    def send(frame, fds):
        sent.append(frame)
        launcher._started[frame["job"]] = 5

    launcher._send = send
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    worker = launcher.start(REFERENCE, str(job_dir / "ref.py"), job_dir=job_dir, limits=ResourceLimits(max_processes=9),
                            token="t0k", log_path=tmp_path / "job.log", channel_fd=99, problem_path="/p/problem.py")
    [frame] = sent
    job = frame.pop("job")
    assert re.fullmatch(r"[0-9a-f]{16}", job) and worker.job == job
    home = str(job_dir)
    assert frame == {
        "op": "start", "role": "reference", "dir": home, "files": [],
        "argv": ["--source", str(job_dir / "ref.py"), "--device", "cpu", "--problem", "/p/problem.py"],
        "limits": [("RLIMIT_NPROC", 9), ("RLIMIT_NOFILE", 1024), ("RLIMIT_FSIZE", 64 << 20), ("RLIMIT_AS", 8 << 30)],
        "job_bytes": 256 << 20,
        "env": {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "USER": "sandbox",
                "LOGNAME": "sandbox", "TRITONGYM_JOB": "t0k", "HOME": home, "TMPDIR": home,
                "TRITON_CACHE_DIR": os.path.join(home, ".triton")},
        "threads": 3, "rebind": [], "fresh_proc": False,
    }


def start_reference(launcher, tmp_path, cgroup) -> tuple[forkserver.ForkedWorker, dict]:
    """Starts a reference job given `cgroup` (as `ReferenceRunner` passes its own); the worker and the frame sent."""
    launcher.modules = {REFERENCE: "reference"}
    sent = []

    def send(frame, fds):
        sent.append(frame)
        launcher._started[frame["job"]] = 5

    launcher._send = send
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "ref.py").write_text("x = 1\n")
    worker = launcher.start(REFERENCE, str(job_dir / "ref.py"), job_dir=job_dir, limits=ResourceLimits(), token="t0k",
                            log_path=tmp_path / "job.log", channel_fd=99, cgroup=cgroup)
    [frame] = sent
    return worker, frame


def test_a_trusted_servers_child_joins_the_cgroup_of_its_job_and_its_worker_owns_it(tmp_path, no_passthrough):
    """The reference's memory cap: the child writes its PID into the job's cgroup before the problem's code
    runs (forkserver_main reads ``cgroup_procs``), and the worker reports and removes that cgroup."""
    launcher = start_launcher(tmp_path, "cpu", trusted=True)
    launcher.cgroup = FakeCgroup(name="server")  # what the worker must not be judged by
    job_cgroup = FakeCgroup({"pids": 64, "memory": 3 << 30}, name="tritongym-ref-1")
    worker, frame = start_reference(launcher, tmp_path, job_cgroup)
    assert frame["cgroup_procs"] == ["/sys/fs/cgroup/pids/tritongym-ref-1/cgroup.procs",
                                     "/sys/fs/cgroup/memory/tritongym-ref-1/cgroup.procs"]
    assert worker.cgroup is job_cgroup and worker.own_cgroup is True
    assert job_cgroup.destroyed == 0 and launcher.cgroup.destroyed == 0


@pytest.mark.parametrize("cgroup", [None, FakeCgroup(name="tritongym-ref-2")])
def test_a_jailed_servers_child_joins_no_job_cgroup_and_its_worker_has_the_servers(tmp_path, no_passthrough, cgroup):
    """A jailed child cannot write the host's cgroup files: the server's own cgroup caps its whole tree."""
    launcher = start_launcher(tmp_path, "cpu", trusted=False)
    launcher.cgroup = server_cgroup = FakeCgroup(name="server")
    worker, frame = start_reference(launcher, tmp_path, cgroup)
    assert "cgroup_procs" not in frame
    assert worker.cgroup is server_cgroup and worker.own_cgroup is False
    launcher.forget(worker.job)


def test_a_trusted_job_without_a_cgroup_joins_none(tmp_path, no_passthrough):
    launcher = start_launcher(tmp_path, "cpu", trusted=True)
    worker, frame = start_reference(launcher, tmp_path, None)
    assert "cgroup_procs" not in frame and worker.cgroup is None and worker.own_cgroup is False


@pytest.mark.parametrize("own, destroyed", [(True, 1), (False, 0)])
def test_releasing_a_worker_removes_its_cgroup_only_when_it_owns_it(tmp_path, own, destroyed):
    """A trusted child's cgroup is the worker's alone; a jailed server's cgroup outlives each worker."""
    server, cgroup = WorkerServer(code=0, trusted=own), FakeCgroup()
    worker = forkserver.ForkedWorker(server, "job5", tmp_path / "log", cgroup, pid=7, own_cgroup=own)
    worker.release()
    assert server.calls == [("kill", "job5"), ("forget", "job5")] and cgroup.destroyed == destroyed


class StuckPopen:
    """A server process that closed its channel but does not exit: each wait's timeout recorded."""

    def __init__(self) -> None:
        self.waits: list[float | None] = []

    def wait(self, timeout=None):
        self.waits.append(timeout)
        raise subprocess.TimeoutExpired(["forkserver_main"], timeout)


def test_at_the_channels_end_the_servers_exit_is_awaited_for_1_s_at_most():
    launcher = object.__new__(ForkServerLauncher)
    launcher._recv_lock, launcher._dead = threading.Lock(), None
    popen = StuckPopen()
    launcher.process = SimpleNamespace(popen=popen, exit_description=lambda: "still running")
    parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    child_end.close()
    launcher.control = parent_end
    try:
        launcher._pump(0.5)
    finally:
        parent_end.close()
    assert popen.waits == [1.0]
    assert launcher._dead == "the fork server exited (still running)"
