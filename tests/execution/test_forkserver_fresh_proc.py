"""A GPU fork server's procfs set-up, run on a CPU: each child sees a procfs of its own namespace.

A GPU jail needs a /proc (CUDA reads it), and a fork server's child lives in a nested PID
namespace, where the jail's procfs disagrees with ``getpid()``: ``cuInit`` failed with 304 on an
H200 and an H100 (`forkserver.GPU_FORK_PROBLEM`). So a GPU server's jail binds the host's procfs
(fully visible, which the kernel requires before a new procfs may be mounted in a user namespace)
and each child mounts a procfs of its own PID namespace over it before any candidate code runs
(`forkserver_main._grandchild`). CPU jails have no /proc; `FRESH_PROC_ON_CPU` runs the GPU set-up
here, where the candidate, with the run-time policy recording only, reports what it sees: its own
PID agreeing with ``/proc/self``, no process of the host or of the server, and the host's procfs
out of reach. Not yet run on a GPU (``TRITONGYM_GPU_FORKSERVER=1`` turns it on there).
"""

from __future__ import annotations

import pytest
from tests.execution.conftest import RELU_PROBLEM, needs_forkserver
from tests.sandbox.test_escapes import candidate

from tritongym import EvalOptions, Status
from tritongym.execution import EvalRequest, LocalPool, forkserver

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

OPTIONS = EvalOptions(device="cpu", sandbox="bwrap", num_trials=2, input_families=(), timeout=60.0,
                      disabled_checks=frozenset({"forbidden_construct"}))


@pytest.fixture(scope="module")
def pool():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(forkserver, "FRESH_PROC_ON_CPU", True)
        with LocalPool(1, launcher="forkserver") as pool:
            yield pool


def test_each_child_sees_a_procfs_of_its_own_namespace_only(pool, tmp_path):
    attempt = '''
import os
pids = sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit())
return "seen %r" % ([os.getpid(), os.readlink("/proc/self"), pids, os.path.exists("/proc/self/status")],)
'''
    result = pool.submit(EvalRequest(RELU_PROBLEM, candidate(tmp_path, attempt, raise_result=True),
                                     OPTIONS)).result(timeout=300)
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.error, result.candidate_log)
    # PID 2 of its namespace (PID 1 is the job's init), agreeing with /proc; nothing else listed
    # but the job's own processes (the host's PIDs run to the thousands).
    assert "seen [2, '2', [1, 2], True]" in (result.error or ""), result.error


def test_an_honest_candidate_is_ok_with_the_fresh_procfs(pool):
    from tests.execution.conftest import FIXTURES

    result = pool.submit(EvalRequest(RELU_PROBLEM, FIXTURES / "relu_honest.py", OPTIONS)).result(timeout=300)
    assert result.status == Status.OK, (result.error, result.candidate_log)
    assert pool.stats().launcher == "forkserver"


def test_gpu_pools_use_fork_servers_only_when_asked(monkeypatch):
    monkeypatch.delenv(forkserver.GPU_FORKSERVER_ENV, raising=False)
    assert forkserver.jailed_forkserver_problem("cuda:0") == forkserver.GPU_FORK_PROBLEM
    monkeypatch.setenv(forkserver.GPU_FORKSERVER_ENV, "1")
    assert forkserver.jailed_forkserver_problem("cuda:0") == forkserver.forkserver_problem()
    assert forkserver.jailed_forkserver_problem("cpu") == forkserver.forkserver_problem()
