"""Sibling isolation: an attacker evaluated at the same time as honest candidates cannot change them.

In RL a candidate that lowers its group peers' rewards raises its own advantage, so reaching a
sibling is an attack. The attacker below runs, for several seconds while honest siblings are
evaluated in the other slot: ``kill(-1)`` and a signal to every PID it can name, a ``/proc`` scan,
``ptrace`` of every PID, a write into every writable place it can find, a fork storm, and an
allocation up to its memory cap. Every honest sibling's verdict must be the one it gets alone,
and the attacker itself must not be rewarded for anything but its own work.
"""

from __future__ import annotations

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM, needs_forkserver
from tests.sandbox.test_escapes import candidate

from tritongym import EvalOptions, Status
from tritongym.execution import EvalRequest, LocalPool

pytestmark = [pytest.mark.sandbox, pytest.mark.slow, needs_forkserver()]

ATTACK = '''
import ctypes
import os
import signal
import time
libc = ctypes.CDLL(None, use_errno=True)
report = {"kill_all": None, "signalled": 0, "proc": None, "traced": 0, "written": [], "forks": 0, "alloc_mb": 0}
deadline = time.time() + 8
while time.time() < deadline:
    try:
        os.kill(-1, signal.SIGKILL)
        report["kill_all"] = "sent"
    except OSError as exc:
        report["kill_all"] = type(exc).__name__
    for pid in range(1, 400):
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, signal.SIGSTOP)
            report["signalled"] += 1
        except OSError:
            pass
        if libc.syscall(101, 16, pid, 0, 0) == 0:  # ptrace(PTRACE_ATTACH) on x86_64
            report["traced"] += 1
    report["proc"] = os.path.exists("/proc/1") or os.path.exists("/proc/self")
    for root in ("/tmp", "/job", "/dev/shm", "/dev", "/run", "/var/tmp", "/jobs", "/usr", "/home", "/root", "/"):
        try:
            with open(os.path.join(root, "sibling-poison.py"), "w") as handle:
                handle.write("raise SystemExit(1)")
            if root not in report["written"]:
                report["written"].append(root)
        except OSError:
            pass
    time.sleep(0.05)
children = []
for _ in range(400):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    children.append(pid)
report["forks"] = len(children)
blocks = []
try:
    for _ in range(4096):
        blocks.append(bytearray(1 << 20))
        report["alloc_mb"] += 1
except MemoryError:
    pass
del blocks
return "report %r" % (report,)
'''


def test_an_attacker_does_not_change_its_siblings_verdicts(tmp_path):
    honest = FIXTURES / "relu_honest.py"
    options = EvalOptions(device="cpu", sandbox="bwrap", num_trials=2, input_families=(), timeout=90.0,
                          memory_limit_gb=2.0, max_processes=64)
    attacker_options = EvalOptions(**{**options.__dict__, "disabled_checks": frozenset({"forbidden_construct"})})
    with LocalPool(2, launcher="forkserver") as pool:
        alone = pool.submit(EvalRequest(RELU_PROBLEM, honest, options)).result(timeout=300)
        assert alone.status == Status.OK, (alone.error, alone.candidate_log)
        attack = pool.submit(EvalRequest(RELU_PROBLEM, candidate(tmp_path, ATTACK, raise_result=True),
                                         attacker_options))
        siblings = [pool.submit(EvalRequest(RELU_PROBLEM, honest, options)) for _ in range(3)]
        results = [future.result(timeout=300) for future in siblings]
        attacked = attack.result(timeout=300)
        stats = pool.stats()
    for result in results:
        assert result.status == alone.status == Status.OK, (result.status, result.error, result.candidate_log)
        assert result.reward == alone.reward
        assert [t.passed for t in result.trials] == [t.passed for t in alone.trials]
    assert stats.restarts == 0 and stats.failed == 0
    # The attacker ran its whole attack (the report is its forward's error) and saw nothing outside.
    assert attacked.status == Status.RUNTIME_ERROR, (attacked.status, attacked.error, attacked.candidate_log)
    text = attacked.error or ""
    assert "report" in text, text
    assert "'traced': 0" in text and "'proc': False" in text, text
    # Only its private folders were writable (each a fresh tmpfs of its own namespace; /dev is read-only).
    assert "'written': ['/tmp', '/job', '/dev/shm']" in text, text
    assert attacked.reward == 0.0


SPIN = '''
import os
import resource
import time
children = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        end = time.time() + 3.0
        while time.time() < end:
            pass
        os._exit(0)
    children.append(pid)
started = time.time()
for pid in children:
    os.waitpid(pid, 0)
wall = time.time() - started
used = resource.getrusage(resource.RUSAGE_CHILDREN)
return "spin cpu %.2f wall %.2f" % (used.ru_utime + used.ru_stime, wall)
'''


def test_a_slot_cannot_take_more_cpu_than_its_share(tmp_path):
    import re

    options = EvalOptions(device="cpu", sandbox="bwrap", num_trials=1, input_families=(), timeout=90.0,
                          disabled_checks=frozenset({"forbidden_construct"}))
    with LocalPool(2, launcher="forkserver", threads=1) as pool:
        result = pool.submit(EvalRequest(RELU_PROBLEM, candidate(tmp_path, SPIN, raise_result=True),
                                         options)).result(timeout=300)
        (launcher,) = [lch for slot in pool._slots for lch in slot.launchers.values()]
        cgroup = launcher.cgroup
    if cgroup is None or "cpu" not in cgroup.limits:
        pytest.skip("no cpu controller for the slot's cgroup here")
    assert cgroup.limits["cpu"] == 100_000  # one core's worth per 100 ms period
    found = re.search(r"spin cpu ([0-9.]+) wall ([0-9.]+)", result.error or "")
    assert found, (result.status, result.error)
    cpu, wall = float(found.group(1)), float(found.group(2))
    # Four spinners for 3 s each: 12 s of CPU wanted, at most one core's worth granted.
    assert cpu <= wall * 1.25 + 0.5, (cpu, wall)
