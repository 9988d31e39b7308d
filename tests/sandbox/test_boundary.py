"""The process boundary of the second wave: no /proc, seccomp, a read-only solution, a capped disk.

As in test_escapes.py, each candidate does the honest work and tries one thing first, with the
run-time policy in record-only mode (`forbidden_construct` disabled), so the OS layer alone must
stop it. The attempt's observations are raised as the forward's error, so the test reads exactly
what the candidate saw.
"""

from __future__ import annotations

import threading
import time

import pytest

from tritongym import Status
from tritongym.evaluator.jail import seccomp

from .test_escapes import candidate, run

pytestmark = pytest.mark.sandbox


def observed(tmp_path, attempt: str) -> str:
    result = run(candidate(tmp_path, attempt, raise_result=True))
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.error)
    return result.error or ""


def test_there_is_no_proc_in_the_jail(tmp_path):
    text = observed(tmp_path, '''
seen = {}
for path in ("/proc/self/mem", "/proc/self/maps", "/proc/1/environ", "/proc/self/fd"):
    try:
        with open(path, "rb") as handle:
            seen[path] = "read %d bytes" % len(handle.read(64))
    except OSError as exc:
        seen[path] = type(exc).__name__
return seen
''')
    for path in ("/proc/self/mem", "/proc/self/maps", "/proc/1/environ", "/proc/self/fd"):
        assert f"'{path}': 'FileNotFoundError'" in text or f"'{path}': 'IsADirectoryError'" not in text
        assert f"'{path}': 'read" not in text, text


@pytest.mark.skipif(seccomp.machine_arch() not in ("x86_64", "aarch64"), reason="no filter for this architecture")
@pytest.mark.parametrize("name", ["ptrace", "process_vm_readv", "perf_event_open", "bpf", "keyctl", "setns"])
def test_denied_syscalls_fail_with_eperm(tmp_path, name):
    column = 0 if seccomp.machine_arch() == "x86_64" else 1
    number = seccomp.DENIED[name][column]
    text = observed(tmp_path, f'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
result = libc.syscall({number}, 0, 0, 0, 0, 0, 0)
return "syscall {name} returned %d errno %d" % (result, ctypes.get_errno())
''')
    assert f"syscall {name} returned -1 errno 1" in text, text  # EPERM


def test_an_allowed_syscall_still_works_under_the_filter(tmp_path):
    text = observed(tmp_path, '''
import ctypes
import os
libc = ctypes.CDLL(None, use_errno=True)
return "getpid %d" % (libc.syscall(39 if os.uname().machine == "x86_64" else 172) > 0)
''')
    assert "getpid 1" in text


def test_the_solution_file_is_read_only(tmp_path):
    text = observed(tmp_path, '''
outcome = []
for path in ("/job/candidate.py", "/job/problem.py"):
    try:
        with open(path, "a") as handle:
            handle.write("# rewritten")
        outcome.append(path + " written")
    except OSError as exc:
        outcome.append(path + " " + type(exc).__name__)
return outcome
''')
    assert "/job/candidate.py written" not in text and "/job/problem.py written" not in text, text
    assert "OSError" in text or "PermissionError" in text, text


def test_filling_the_disk_stays_in_the_jail_and_a_sibling_is_unaffected(tmp_path):
    filler = candidate(tmp_path, '''
import os
written = 0
try:
    for index in range(10_000):
        with open("/job/fill-%d" % index, "wb") as handle:
            handle.write(b"x" * (8 << 20))
        written += 8
except OSError as exc:
    return "stopped after %d MiB: %s" % (written, type(exc).__name__)
return "wrote %d MiB" % written
''', raise_result=True)
    sibling: list = []

    def honest() -> None:
        time.sleep(1.0)
        honest_dir = tmp_path / "honest"
        honest_dir.mkdir()
        sibling.append(run(candidate(honest_dir, "return None")))

    thread = threading.Thread(target=honest)
    thread.start()
    result = run(filler, disk_limit_mb=64)
    thread.join(timeout=300)
    assert result.reward == 0
    assert "stopped after" in (result.error or "") and "OSError" in (result.error or ""), result.error
    assert int((result.error or "").split("stopped after ")[1].split(" MiB")[0]) <= 64
    assert sibling and sibling[0].status == Status.OK, sibling


def test_the_filter_program_is_well_formed():
    for arch in ("x86_64", "aarch64"):
        program = seccomp.filter_program(arch)
        assert len(program) % 8 == 0
        assert len(program) // 8 == 4 + len({v[0 if arch == "x86_64" else 1] for v in seccomp.DENIED.values()}) + 2
    with pytest.raises(ValueError):
        seccomp.filter_program("mips")


def test_an_honest_candidate_is_ok_under_the_whole_boundary(tmp_path):
    result = run(candidate(tmp_path, "return None"))
    assert result.status == Status.OK and result.sandbox == "bwrap", (result.status, result.error)


def test_the_jail_shows_package_folders_not_the_callers_script_folder(monkeypatch, tmp_path):
    import sys

    from tritongym.evaluator.jail.sandbox import python_paths

    script_folder = tmp_path / "trainer"
    script_folder.mkdir()
    (script_folder / "secrets.env").write_text("API_KEY=...")
    monkeypatch.setattr(sys, "path", [str(script_folder), *sys.path])
    shown = python_paths()
    assert not any(str(script_folder).startswith(folder) for folder in shown), shown
    import torch

    assert any(torch.__file__.startswith(folder) for folder in shown)
