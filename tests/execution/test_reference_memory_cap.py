"""Issue 45 (3): the memory cap holds for the reference worker too, fresh or forked by a fork server.

A problem whose reference allocates past `memory_limit_gb` ends as a `ProblemError` that names the
cap (never a raw crash, never a retry as if the machine had lost the worker), and nothing outside
the reference's own processes is touched: a plain sleeper started beside it and an honest evaluation
running at the same time are unharmed. The caps here are small (1.5-2 GiB) and each test allocates at
most ~3 GiB in all, so they cannot endanger the shared machine they run on.

Each over-cap case has its honest control: the same cap with a small reference still gives ``ok``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import tritongym
from tritongym import ProblemError, Status
from tritongym.evaluator import EvalOptions
from tritongym.evaluator.jail.cgroups import create_cgroup
from tritongym.execution import EvalRequest, LocalPool

from .conftest import FIXTURES, needs_forkserver

HONEST = FIXTURES / "relu_honest.py"

SMALL_REFERENCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
'''

#: 3 GiB of touched pages in the reference's own process, in 1 GiB steps.
GREEDY_REFERENCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.held = []
        for _ in range(3):
            chunk = torch.empty(1 << 28, dtype=torch.float32)
            chunk.fill_(1.0)
            self.held.append(chunk)

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
'''

#: 2.25 GiB spread over three helper processes: each stays under the address-space cap on its own,
#: so only the reference's cgroup (the sum of its tree) can stop them.
GREEDY_TREE_REFERENCE = '''
import os
import time

import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        helpers = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                held = b"\\x01" * (768 << 20)
                time.sleep(5)
                os._exit(len(held) & 0)
            helpers.append(pid)
        statuses = [os.waitpid(pid, 0)[1] for pid in helpers]
        killed = sum(os.WIFSIGNALED(status) for status in statuses)
        if killed:
            raise RuntimeError(f"{killed} helper processes were killed")

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
'''


def _problem(tmp_path, name: str, source: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return path


def _options(memory_limit_gb: float) -> EvalOptions:
    return EvalOptions(device="cpu", num_trials=1, input_families=(), timeout=90.0, reference_timeout=120.0,
                       memory_limit_gb=memory_limit_gb)


@pytest.fixture
def sleeper():
    """A plain process beside the evaluation: the cap must never reach it."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def _memory_cgroup_here() -> bool:
    cgroup = create_cgroup("tritongym-probe-memory", None, 1 << 30)
    try:
        return cgroup is not None and "memory" in cgroup.limits
    finally:
        if cgroup is not None:
            cgroup.destroy()


def test_a_fresh_reference_over_the_cap_is_a_problem_error_naming_it(tmp_path, sleeper):
    started = time.monotonic()
    with pytest.raises(ProblemError) as raised:
        tritongym.evaluate(_problem(tmp_path, "greedy", GREEDY_REFERENCE), HONEST, _options(1.5))
    text = str(raised.value)
    assert "memory limit of 1.5 GiB" in text and "--memory-limit-gb" in text, text
    assert type(raised.value).__name__ == "ReferenceOverMemory"
    assert sleeper.poll() is None, "a process outside the reference was killed"
    assert time.monotonic() - started < 120
    # The control: the same cap leaves a small reference alone.
    result = tritongym.evaluate(_problem(tmp_path, "small", SMALL_REFERENCE), HONEST, _options(1.5))
    assert result.status == Status.OK, (result.status, result.error)


def test_a_reference_whose_processes_together_pass_the_cap_is_stopped_by_its_cgroup(tmp_path, sleeper):
    if not _memory_cgroup_here():
        pytest.skip("no memory cgroup can be made here: the address-space cap is the only one")
    with pytest.raises(ProblemError) as raised:
        tritongym.evaluate(_problem(tmp_path, "tree", GREEDY_TREE_REFERENCE), HONEST, _options(2.0))
    text = str(raised.value)
    assert "memory limit of 2 GiB" in text and "killed" in text, text
    assert sleeper.poll() is None, "a process outside the reference's cgroup was killed"


@needs_forkserver()
def test_forked_references_over_the_cap_leave_a_concurrent_honest_evaluation_alone(tmp_path, sleeper):
    greedy = _problem(tmp_path, "greedy", GREEDY_REFERENCE)
    honest_problem = _problem(tmp_path, "small", SMALL_REFERENCE)
    with LocalPool(2, launcher="forkserver") as pool:
        # A trusted problem's reference is a child of the trusted fork server (its own cgroup and
        # rlimits); a client's is a child of the jailed reference server (rlimits, the server's cgroup).
        over = [pool.submit(EvalRequest(greedy, HONEST, _options(1.5), trusted_problem=trusted))
                for trusted in (True, False)]
        honest = pool.submit(EvalRequest(honest_problem, HONEST, _options(1.5)))
        result = honest.result(timeout=300)
        errors = []
        for future in over:
            with pytest.raises(ProblemError) as raised:
                future.result(timeout=300)
            errors.append(str(raised.value))
        stats = pool.stats()
    assert result.status == Status.OK, (result.status, result.error)
    for text in errors:
        assert "memory limit of 1.5 GiB" in text, text
    assert stats.restarts == 0, "an over-cap reference was retried as if the machine had lost it"
    assert sleeper.poll() is None


#: 640 MiB of float32 weights: the float32 forward fits a 2.5 GiB cap, the float64 copy made for the
#: precision check (deep copy, then twice the bytes) does not.
WIDE_WEIGHTS_REFERENCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(160 << 20) / 1000)

    def forward(self, x):
        return x * self.weight[: x.numel()].view_as(x)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
'''


def test_a_float64_check_over_the_cap_names_the_cap_instead_of_going_unchecked():
    from tritongym.evaluator.reference import ReferenceOverMemory, ReferenceRunner

    problem = tritongym.Problem.from_source(WIDE_WEIGHTS_REFERENCE, name="wide")
    with ReferenceRunner(problem, device="cpu", timeout=120, memory_limit_bytes=int(2.5 * (1 << 30))) as runner:
        runner.setup(weight_seed=1)
        # The control: without the float64 check the same worker answers under the same cap.
        assert runner.trial(seed=2, truth=False).truth is None
        with pytest.raises(ReferenceOverMemory) as raised:
            runner.trial(seed=3, truth=True)
    assert "memory limit of 2.5 GiB" in str(raised.value)


@needs_forkserver()
def test_the_jailed_reference_servers_tree_cap_grows_to_hold_every_slots_worker_at_its_cap(tmp_path):
    """A client's reference runs in forks of one jailed server whose cgroup caps the whole tree: were
    that cap below what the slots' workers may each hold under their own caps, the kernel would pick
    a victim among siblings. It grows to fit (and never shrinks for a smaller request)."""
    from tritongym.execution.references import WarmReferences

    problem = tritongym.Problem.from_source(SMALL_REFERENCE, name="small")
    gib = 1 << 30
    cache = WarmReferences(max_idle=2, max_idle_bytes=gib, slots=2, jail_memory_bytes=3 * gib)
    runners = []
    try:
        runners.append(cache.acquire(problem, "cpu", 60.0, jailed=True, memory_limit_bytes=2 * gib))
        server_cgroup = runners[0].process.server.cgroup
        if server_cgroup is None or "memory" not in server_cgroup.limits:
            pytest.skip("no memory cgroup for the jailed reference server here")
        assert server_cgroup.limits["memory"] == gib + 2 * 2 * gib
        written = int((server_cgroup.memory_dir / "memory.limit_in_bytes").read_text()) \
            if server_cgroup.version == 1 else int((server_cgroup.memory_dir / "memory.max").read_text())
        assert written == 5 * gib
        runners[0].setup(1)
        assert runners[0].trial(2).finite
        runners.append(cache.acquire(problem, "cpu", 60.0, jailed=True, memory_limit_bytes=gib // 2))
        assert server_cgroup.limits["memory"] == 5 * gib
    finally:
        for runner in runners:
            runner.close()
        cache.close()
