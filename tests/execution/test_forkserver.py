"""The jail of a fork server's child: each property a fresh bwrap worker has, checked from inside.

The candidates are the sandbox tests' (tests/sandbox/test_escapes.py): honest ReLU work plus one
attempt whose observations are raised as the forward's error, with the run-time policy in
record-only mode so that the OS layer alone must hold. Every attempt runs in a child forked by a
warm fork server (`LocalPool(launcher="forkserver")`).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM, needs_forkserver
from tests.sandbox.test_escapes import candidate

from tritongym import EvalOptions, Status
from tritongym.evaluator.jail import seccomp
from tritongym.evaluator.jail.sandbox import python_paths
from tritongym.execution import EvalRequest, LocalPool

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

OPTIONS = EvalOptions(device="cpu", sandbox="bwrap", num_trials=2, input_families=(), timeout=60.0,
                      disabled_checks=frozenset({"forbidden_construct"}))


@pytest.fixture(scope="module")
def pool():
    with LocalPool(1, launcher="forkserver") as pool:
        yield pool


def run(pool, solution, **overrides):
    options = OPTIONS if not overrides else EvalOptions(**{**OPTIONS.__dict__, **overrides})
    return pool.submit(EvalRequest(RELU_PROBLEM, solution, options)).result(timeout=300)


def observed(pool, tmp_path, attempt: str) -> str:
    result = run(pool, candidate(tmp_path, attempt, raise_result=True))
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.error, result.candidate_log)
    return result.error or ""


def test_an_honest_candidate_is_ok_through_the_fork_server(pool, tmp_path):
    result = run(pool, FIXTURES / "relu_honest.py")
    assert result.status == Status.OK, (result.error, result.candidate_log)
    assert result.sandbox == "bwrap"
    assert pool.stats().launcher == "forkserver"
    assert set(result.phase_seconds) >= {"queue", "startup", "import", "build", "trials"}


def test_the_child_is_pid_2_of_its_own_namespace_and_sees_no_proc(pool, tmp_path):
    text = observed(pool, tmp_path, '''
import os
seen = [os.getpid(), os.getppid(), os.path.exists("/proc/self"), os.path.exists("/proc/1")]
return "seen %r" % (seen,)
''')
    assert "seen [2, 1, False, False]" in text, text


def test_the_child_holds_no_capability(pool, tmp_path):
    text = observed(pool, tmp_path, '''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
data = (Data * 2)()
libc.capget(ctypes.byref(Header(0x20080522, 0)), ctypes.byref(data))
bounding = [cap for cap in range(41) if libc.prctl(23, cap, 0, 0, 0) == 1]
return "caps %d %d %d %d bounding %r" % (data[0].effective, data[0].permitted, data[1].effective,
                                         data[1].permitted, bounding)
''')
    assert "caps 0 0 0 0 bounding []" in text, text


@pytest.mark.skipif(seccomp.machine_arch() not in ("x86_64", "aarch64"), reason="no filter for this architecture")
@pytest.mark.parametrize("name", ["ptrace", "mount", "setns", "process_vm_readv"])
def test_the_seccomp_filter_binds_the_child(pool, tmp_path, name):
    column = 0 if seccomp.machine_arch() == "x86_64" else 1
    number = seccomp.DENIED[name][column]
    text = observed(pool, tmp_path, f'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
result = libc.syscall({number}, 0, 0, 0, 0, 0, 0)
return "syscall {name} returned %d errno %d" % (result, ctypes.get_errno())
''')
    assert f"syscall {name} returned -1 errno 1" in text, text


def test_job_files_are_read_only_and_the_servers_job_folder_is_covered(pool, tmp_path):
    text = observed(pool, tmp_path, '''
import os
outcome = []
for path in ("/job/candidate.py", "/job/problem.py"):
    try:
        with open(path, "a") as handle:
            handle.write("# rewritten")
        outcome.append("written")
    except OSError as exc:
        outcome.append(type(exc).__name__)
outcome.append(sorted(os.listdir("/jobs")))
with open("/job/scratch", "w") as handle:
    handle.write("the job folder itself is writable")
outcome.append(sorted(os.listdir("/job")))
return "outcome %r" % (outcome,)
''')
    assert "outcome ['OSError', 'OSError', [], ['candidate.py', 'problem.py', 'scratch']]" in text, text


def test_nothing_of_one_candidate_survives_into_the_next(pool, tmp_path):
    first = observed(pool, tmp_path, '''
import os
with open("/tmp/left-behind", "w") as handle:
    handle.write("x")
with open("/job/left-behind", "w") as handle:
    handle.write("x")
with open("/dev/shm/left-behind", "w") as handle:
    handle.write("x")
import torch
torch.left_behind = True
return "planted"
''')
    assert "planted" in first
    second = observed(pool, tmp_path, '''
import os
import torch
return "found %r %r %r %r" % (sorted(os.listdir("/tmp")), "left-behind" in os.listdir("/job"), os.listdir("/dev/shm"),
                               hasattr(torch, "left_behind"))
''')
    # A virtual environment under /tmp (as in CI) is bound back, read-only, over each child's
    # private /tmp, so the top folders leading to it are all a fresh /tmp may hold.
    python_under_tmp = sorted({Path(folder).parts[2] for folder in python_paths() if folder.startswith("/tmp/")})
    assert f"found {python_under_tmp!r} False [] False" in second, second


@pytest.mark.parametrize("fixture, expected", [
    ("relu_segfault", "SIGSEGV"),
    ("relu_os_exit", "exited with code"),
    ("relu_kill_parent", None),
])
def test_a_dying_candidate_is_a_verdict_and_the_server_lives_on(pool, fixture, expected):
    result = run(pool, FIXTURES / f"{fixture}.py")
    assert result.status in (Status.CRASHED, Status.RUNTIME_ERROR), (result.status, result.error)
    if expected is not None:
        assert expected in (result.error or ""), result.error
    restarts = pool.stats().restarts
    after = run(pool, FIXTURES / "relu_honest.py")
    assert after.status == Status.OK, (after.error, after.candidate_log)
    assert pool.stats().restarts == restarts


WARMED = '''
import sys
import tritongym.evaluator.cleanroom.worker, tritongym.evaluator.worker.candidate
before = "triton.compiler.code_generator" in sys.modules
import tritongym.execution.forkserver_main
print(before, "triton.compiler.code_generator" in sys.modules)
'''


def test_the_server_makes_tritons_first_launch_imports_before_it_forks():
    # Triton 3.9 imports ~50 modules at its first argument specialisation; made in the server,
    # forked candidates and clean rooms skip them (first launch in a forked child: 40-47 ms cold,
    # 8-21 ms warm, medians of 15, 2-core machine, 2026-11-26).
    done = subprocess.run([sys.executable, "-c", WARMED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]
