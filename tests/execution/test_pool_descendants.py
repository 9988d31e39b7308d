"""Under the pool's fork server, nothing a candidate started outlives its verdict.

A forked candidate is PID 2 of a PID namespace whose init is the fork server's grandchild; the
server kills the job's middle process, and the kernel's parent-death signals and the namespace's
end take down the rest. tests/e2e/test_isolation.py and tests/sandbox/test_escapes.py show the
same for fresh workers; here the job runs in a warm `LocalPool(launcher="forkserver")`: one that
times out, and one that ignores the evaluator's exit request (its ``os._exit`` made to sleep, so
that the worker would never leave by itself). Each starts detached grandchildren (fork, setsid,
exec: outside its process group and session) whose command line carries a marker the host can
see; none may be alive once the verdict is back.
"""

from __future__ import annotations

import secrets
import time

import pytest
from tests.e2e.helpers import CANDIDATES, TINY_RELU, kill_all, processes_with
from tests.execution.conftest import RELU_PROBLEM, needs_forkserver
from tests.sandbox.test_escapes import candidate

from tritongym import EvalOptions, Status
from tritongym.execution import EvalRequest, LocalPool

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

#: The namespace's end is asynchronous to the verdict by a few milliseconds; a kill path that does not
#: reach the grandchildren leaves them alive for their whole 600 s sleep.
SETTLE_S = 5.0


@pytest.fixture(scope="module")
def pool():
    with LocalPool(1, launcher="forkserver") as pool:
        yield pool


def survivors_after_settling(marker: str) -> list[int]:
    deadline = time.monotonic() + SETTLE_S
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes_with(marker)


def test_a_timed_out_job_leaves_no_descendant_behind(pool):
    marker = f"tritongym-pool-timeout-{secrets.token_hex(6)}"
    source = (CANDIDATES / "relu_endless_loop.py").read_text().replace("MARKER_PLACEHOLDER", marker)
    timeout = 5.0
    options = EvalOptions(device="cpu", sandbox="bwrap", num_trials=1, input_families=(), timeout=timeout,
                          disabled_checks=frozenset({"forbidden_construct"}))
    try:
        result = pool.submit(EvalRequest(TINY_RELU, source, options)).result(timeout=300)
        survivors = survivors_after_settling(marker)
    finally:
        kill_all(processes_with(marker))
    assert pool.stats().launcher == "forkserver"
    assert result.status == Status.TIMEOUT, (result.status, result.error)
    assert f"exceeded the {timeout:g} s budget" in result.error
    assert f"grandchild started {marker}" in result.candidate_log  # the grandchild did exist
    assert survivors == [], f"processes of a timed-out pool job survived its verdict: {survivors}"


def test_a_job_that_ignores_its_exit_request_leaves_no_descendant_behind(pool, tmp_path):
    marker = f"tritongym-pool-exit-{secrets.token_hex(6)}"
    attempt = f'''
import os, signal, subprocess, sys, time
started = []
for _ in range(2):
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"],
                               start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started.append(process.pid)
pid = os.fork()
if pid == 0:
    os.setsid()
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
# The worker would leave with os._exit after the evaluator's "exit"; now it sleeps instead, deaf to SIGTERM.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os._exit = lambda code: time.sleep(600)
print("started {marker}", started, flush=True)
return started
'''
    options = EvalOptions(device="cpu", sandbox="bwrap", num_trials=2, input_families=(), timeout=60.0,
                          disabled_checks=frozenset({"forbidden_construct"}))
    try:
        result = pool.submit(EvalRequest(RELU_PROBLEM, candidate(tmp_path, attempt), options)).result(timeout=300)
        survivors = survivors_after_settling(marker)
    finally:
        kill_all(processes_with(marker))
    assert result.status == Status.OK, (result.status, result.error, result.candidate_log)  # the honest work
    assert f"started {marker}" in result.candidate_log  # the grandchildren did exist
    assert survivors == [], f"processes of a pool job that ignored its exit request survived: {survivors}"
    # The slot's fork server is not the casualty: the next job runs on it.
    after = pool.submit(EvalRequest(RELU_PROBLEM, candidate(tmp_path, "return None"), options)).result(timeout=300)
    assert after.status == Status.OK, (after.status, after.error)
