"""Which worker strategy a pool uses on a GPU: fresh jailed workers, never a jailed fork server.

On the one GPU tried (an H200), a jailed fork server's children failed CUDA's first call, so the
pool's ``auto`` launcher and the jailed warm references start fresh jailed workers there (those
ran on it). No GPU is touched: the choice is made from the device name.
"""

from __future__ import annotations

import pytest

from tritongym.errors import EvaluatorError
from tritongym.evaluator import parent
from tritongym.evaluator.options import EvalOptions
from tritongym.execution import forkserver
from tritongym.execution.pool import LocalPool, _TrackedSpawn


@pytest.mark.parametrize("device", ["cuda", "cuda:1"])
def test_a_jailed_fork_server_is_refused_on_a_gpu_and_says_why(device):
    assert forkserver.jailed_forkserver_problem(device) == forkserver.GPU_FORK_PROBLEM
    assert "cudaGetDeviceCount" in forkserver.GPU_FORK_PROBLEM


def test_on_a_cpu_the_answer_is_the_namespace_probes(monkeypatch):
    monkeypatch.setattr(forkserver, "forkserver_problem", lambda: "simulated")
    assert forkserver.jailed_forkserver_problem("cpu") == "simulated"
    monkeypatch.setattr(forkserver, "forkserver_problem", lambda: None)
    assert forkserver.jailed_forkserver_problem("cpu") is None


@pytest.mark.parametrize(("kind", "outcome"), [("auto", "spawn"), ("forkserver", "error")])
def test_a_pool_slot_on_a_gpu_starts_fresh_workers_or_refuses_a_required_fork_server(monkeypatch, kind, outcome):
    monkeypatch.setattr(parent, "resolve_device", lambda device: "cuda")
    pool = LocalPool(1, launcher=kind, reference_cache=0)
    try:
        slot = pool._slots[0]
        options = EvalOptions(device="cpu", sandbox="bwrap")
        if outcome == "spawn":
            assert isinstance(slot.launcher_for(options), _TrackedSpawn)
            assert ("bwrap", "cuda") in slot.launchers
        else:
            with pytest.raises(EvaluatorError, match="cudaGetDeviceCount"):
                slot.launcher_for(options)
    finally:
        pool.close()
