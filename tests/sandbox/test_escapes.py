"""Escape attempts against the candidate sandbox (bubblewrap): each must be contained.

Every candidate here does the honest work (a Triton ReLU) *and* tries one escape. The static
gate, which would reject these sources before they run, is disabled (`forbidden_construct`
becomes a notice) so that the attempt really executes and the OS sandbox alone must stop it.
After each: the verdict is produced, the honest work was unaffected (status ok) unless the
attempt itself is the failure, and the host shows no trace of the attempt.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path

import pytest

import tritongym
from tritongym import Status

pytestmark = pytest.mark.sandbox

PROBLEM = Path(__file__).resolve().parent / "relu_problem.py"

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(y_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


def honest_relu(x):
    y = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
    return y
'''


def candidate(tmp_path: Path, attempt: str, *, raise_result: bool = False) -> Path:
    """A solution whose first forward runs `attempt` (a function body) before the honest work."""
    body = "\n".join("        " + line for line in attempt.strip().splitlines())
    source = KERNEL + f'''

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.tried = False

    def attempt(self):
{body}

    def forward(self, x):
        if not self.tried:
            self.tried = True
            outcome = self.attempt()
            {"raise RuntimeError(str(outcome))" if raise_result else "pass"}
        return honest_relu(x)
'''
    path = tmp_path / "candidate.py"
    path.write_text(source)
    return path


def run(solution: Path, **options) -> tritongym.EvalResult:
    options.setdefault("num_trials", 2)
    options.setdefault("input_families", ())
    return tritongym.evaluate(PROBLEM, solution, device="cpu", sandbox="bwrap",
                              disabled_checks={"forbidden_construct"}, **options)


def assert_honest_ok(result: tritongym.EvalResult) -> None:
    assert result.status == Status.OK, (result.status, result.error, result.candidate_log)
    assert result.sandbox == "bwrap"
    # The static gate saw the attempt and says so, even though it was told not to reject it.
    assert any(n.code == "check_disabled" and "forbidden_construct" in n.message for n in result.notices)


def processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("where", ["tmp", "home", "cwd"])
def test_writing_a_file_on_the_host_is_contained(tmp_path, monkeypatch, where):
    marker = f"tritongym-escape-{secrets.token_hex(6)}"
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    targets = {"tmp": Path("/tmp") / marker, "home": home / marker, "cwd": cwd / marker}
    target = targets[where]
    attempt = f'''
import os
written = []
for path in ({str(target)!r}, os.path.expanduser("~/{marker}"), "{marker}"):
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        written.append(path)
    except OSError as exc:
        written.append(repr(exc))
return written
'''
    result = run(candidate(tmp_path, attempt))
    assert_honest_ok(result)
    assert not target.exists(), f"the candidate wrote {target} on the host"
    assert not (cwd / marker).exists()
    assert not (home / marker).exists()


def test_connecting_to_the_host_loopback_is_contained(tmp_path):
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    connections = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            connections.append(conn.recv(100))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    attempt = f'''
import socket
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    s.sendall(b"stolen")
    return "connected"
except OSError as exc:
    return repr(exc)
'''
    try:
        result = run(candidate(tmp_path, attempt))
    finally:
        stop.set()
        thread.join(timeout=2)
        server.close()
    assert_honest_ok(result)
    assert connections == [], "the candidate reached a server on the host's loopback"


def test_secrets_of_the_host_do_not_leak_into_the_verdict(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    secret_file = home / ".secret_token"
    file_secret = f"file-secret-{secrets.token_hex(8)}"
    secret_file.write_text(file_secret)
    env_secret = f"env-secret-{secrets.token_hex(8)}"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TRITONGYM_TEST_SECRET", env_secret)
    attempt = f'''
import os
found = [os.environ.get("TRITONGYM_TEST_SECRET", "no-env"), repr(sorted(os.environ))]
for path in ({str(secret_file)!r}, os.path.expanduser("~/.secret_token")):
    try:
        found.append(open(path).read())
    except OSError as exc:
        found.append(repr(exc))
print("exfiltrate:", found)
return found
'''
    result = run(candidate(tmp_path, attempt, raise_result=True))
    assert result.status == Status.RUNTIME_ERROR  # the candidate raised to put what it found in the error
    text = json.dumps(result.to_dict())
    assert file_secret not in text
    assert env_secret not in text
    assert "TRITONGYM_TEST_SECRET" not in text
    assert "no-env" in result.error  # it ran, and found nothing


def test_killing_the_parent_is_contained(tmp_path):
    evaluator_pid = os.getpid()
    attempt = f'''
import os, signal
outcomes = []
for pid in (os.getppid(), 1, {evaluator_pid}):
    try:
        os.kill(pid, signal.SIGKILL)
        outcomes.append(("sent", pid))
    except OSError as exc:
        outcomes.append((repr(exc), pid))
return outcomes
'''
    result = run(candidate(tmp_path, attempt))
    assert_honest_ok(result)  # and this test process is still alive to assert it


def test_children_that_outlive_the_candidate_are_killed(tmp_path):
    marker = f"tritongym-orphan-{secrets.token_hex(6)}"
    attempt = f'''
import os, subprocess, sys
started = []
for _ in range(3):
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(process.pid)
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
return started
'''
    result = run(candidate(tmp_path, attempt))
    assert_honest_ok(result)
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == [], "processes started by the candidate survived the evaluation"


def test_holding_12_gib_of_memory_is_contained(tmp_path):
    attempt = '''
import torch
held = []
try:
    for _ in range(12):
        chunk = torch.empty(1 << 28, dtype=torch.float32)  # 1 GiB
        chunk.fill_(1.0)  # touch every page
        held.append(chunk)
except (RuntimeError, MemoryError) as exc:
    held.clear()
    return f"stopped after {len(held)} GiB: {type(exc).__name__}"
return "held 12 GiB"
'''
    started = time.monotonic()
    result = run(candidate(tmp_path, attempt, raise_result=True), memory_limit_gb=4.0)
    # The allocation fails inside the jail (address-space cap) or the worker is OOM-killed
    # (cgroup); either way a verdict comes back and nothing reached 12 GiB.
    assert result.status in (Status.RUNTIME_ERROR, Status.CRASHED), (result.status, result.error)
    assert "held 12 GiB" not in (result.error or "")
    assert time.monotonic() - started < 120


def test_a_bounded_fork_storm_is_contained(tmp_path):
    marker = f"tritongym-storm-{secrets.token_hex(6)}"
    attempt = f'''
import os, sys, time
children = 0
for _ in range(1500):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        try:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
        finally:
            os._exit(0)
    children += 1
print(f"forks: {{children}}")
return children
'''
    result = run(candidate(tmp_path, attempt), max_processes=128, timeout=120)
    assert result.status == Status.OK, (result.status, result.error)
    forks = int(result.candidate_log.split("forks: ")[1].split()[0])
    if not any(n.code == "limits_weakened" for n in result.notices):
        assert forks < 128, f"{forks} forks passed a process cap of 128"  # the pids cgroup held
    assert forks <= 1500
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == []


def test_the_static_gate_rejects_escape_attempts_before_running(tmp_path):
    path = candidate(tmp_path, 'import os\nos.kill(os.getppid(), 9)\nreturn 0')
    started = time.monotonic()
    result = tritongym.evaluate(PROBLEM, path, device="cpu")
    assert result.status == Status.INTEGRITY_VIOLATION
    assert [v.code for v in result.violations] == ["forbidden_construct"]
    assert "os.kill" in result.violations[0].message
    assert time.monotonic() - started < 5  # decided from the source alone
