"""Nothing writable survives from one candidate of a slot to the next, ``/dev`` included.

bwrap's ``--dev`` gives the fork server's jail one writable, uncapped tmpfs at ``/dev`` for its
whole life (``--remount-ro /`` does not reach it). Before each child covered it with a read-only
``/dev`` of its own, a candidate left 286 MiB there, written from C, and the next candidates of
the slot found it. Here the child's mount table is read from the host (the jail has no
``/proc``) while it runs, and a candidate writes through libc into every place it can, for the
next candidate of the same slot to look for.
"""

from __future__ import annotations

import time

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM, needs_forkserver
from tests.execution.jail_probe import visible_mounts, wait_for_depth, writable_places
from tests.sandbox.test_escapes import candidate

from tritongym import EvalOptions, Status
from tritongym.execution import EvalRequest, LocalPool

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

OPTIONS = EvalOptions(device="cpu", sandbox="bwrap", num_trials=1, input_families=(), timeout=60.0,
                      disabled_checks=frozenset({"forbidden_construct"}))
#: Fork server (bwrap, bwrap's init, the server), then the middle, the namespace's init, the worker.
WORKER_DEPTH = 5
PRIVATE = {"/tmp", "/job", "/dev/shm"}
DEVICE_NODES = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

# Written through libc (no Python ``open``): 4 MiB per place, and a marker file.
PLANT = '''
import ctypes
import os
libc = ctypes.CDLL(None, use_errno=True)
written = []
for folder in ("/dev", "/dev/shm", "/tmp", "/job", "/", "/jobs", "/usr", "/run", "/var/tmp"):
    path = os.path.join(folder, "left-by-candidate-1").encode()
    fd = libc.open(path, 0o1 | 0o100, 0o644)  # O_WRONLY | O_CREAT
    if fd < 0:
        continue
    block = ctypes.create_string_buffer(b"x" * (1 << 20))
    total = sum(max(0, libc.write(fd, block, 1 << 20)) for _ in range(4))
    libc.close(fd)
    written.append((folder, total))
return "planted %r" % (written,)
'''

LOOK = '''
import os
found = []
for folder in ("/dev", "/dev/shm", "/tmp", "/job", "/", "/jobs", "/usr", "/run", "/var/tmp"):
    try:
        names = os.listdir(folder)
    except OSError:
        continue
    found += [os.path.join(folder, name) for name in names if name.startswith("left-by")]
return "found %r dev %r" % (sorted(found), sorted(os.listdir("/dev")))
'''

SLEEP = '''
import time
time.sleep(3)
return "slept"
'''


@pytest.fixture(scope="module")
def pool():
    with LocalPool(1, launcher="forkserver") as pool:
        yield pool


def _observed(pool, path) -> str:
    result = pool.submit(EvalRequest(RELU_PROBLEM, path, OPTIONS)).result(timeout=300)
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.error, result.candidate_log)
    return result.error or ""


def test_a_childs_only_writable_places_are_its_own_capped_tmpfs(pool, tmp_path):
    future = pool.submit(EvalRequest(RELU_PROBLEM, candidate(tmp_path, SLEEP, raise_result=True), OPTIONS))
    deadline = time.monotonic() + 120
    while not pool._slots[0].launchers and time.monotonic() < deadline:
        time.sleep(0.05)
    server = next(iter(pool._slots[0].launchers.values()))
    worker = wait_for_depth(server.process.pid, WORKER_DEPTH)
    places = writable_places(worker)
    mounts = visible_mounts(worker)
    assert future.result(timeout=300).status == Status.RUNTIME_ERROR
    assert set(places) == PRIVATE, {t: (m.fstype, m.options) for t, m in places.items()}
    for target, mount in places.items():
        assert mount.fstype == "tmpfs" and "size=" in mount.super_options, (target, mount)
    dev = next(m for m in mounts if m.target == "/dev")
    assert not dev.writable and dev.fstype == "tmpfs", dev
    # Device-node binds are the jail's usual nodes (writes to them store nothing).
    nodes = {m.target for m in mounts if m.fstype == "devtmpfs"}
    assert nodes == DEVICE_NODES, nodes


def test_nothing_written_from_c_anywhere_survives_into_the_next_candidate(pool, tmp_path):
    planted = _observed(pool, candidate(tmp_path, PLANT, raise_result=True))
    assert "planted" in planted, planted
    # Only the child's own private tmpfs took the writes.
    written = eval(planted.split("planted ", 1)[1].splitlines()[0])  # noqa: S307 - our own repr of a list
    assert {folder for folder, _ in written} == PRIVATE, planted
    assert all(total == 4 << 20 for _, total in written), planted
    seen = _observed(pool, candidate(tmp_path, LOOK, raise_result=True))
    assert "found [] dev" in seen, seen
    for name in ("null", "zero", "urandom", "shm"):
        assert repr(name) in seen, seen


def test_an_honest_candidate_still_uses_dev_null_and_dev_shm(pool, tmp_path):
    attempt = '''
import os
with open("/dev/null", "w") as sink:
    sink.write("discarded")
with open("/dev/urandom", "rb") as source:
    assert len(source.read(16)) == 16
with open("/dev/shm/scratch", "wb") as scratch:
    scratch.write(b"x" * 1024)
os.unlink("/dev/shm/scratch")
return "devices fine"
'''
    assert "devices fine" in _observed(pool, candidate(tmp_path, attempt, raise_result=True))
    result = pool.submit(EvalRequest(RELU_PROBLEM, FIXTURES / "relu_honest.py", OPTIONS)).result(timeout=300)
    assert result.status == Status.OK, (result.error, result.candidate_log)
