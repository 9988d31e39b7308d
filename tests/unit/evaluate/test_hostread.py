"""Tests for the data-flow evidence: `optrace.DataFlow`, `optrace.Attribution`, `hostread.HostReadTrace`.

A small "solution" module is written to a real file and its functions are called in this process
under the traces, exactly as the candidate worker does around a forward call.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
import torch

from tritongym.evaluator.checks import HOST_READ_BUDGET
from tritongym.evaluator.worker.hostread import HOST_READ_BUDGET as WORKER_BUDGET
from tritongym.evaluator.worker.hostread import HostReadTrace
from tritongym.evaluator.worker.optrace import Attribution, DataFlow, OpTrace

SOLUTION = """
import numpy as np
import torch


def numpy_whole(x):
    return torch.from_numpy(np.maximum(x.numpy(), 0))


def asarray(x):
    return np.asarray(x).sum()


def tolist(x):
    return [max(v, 0.0) for v in x.reshape(-1).tolist()]


def item_loop(x):
    return [x.reshape(-1)[i].item() for i in range(x.numel())]


def one_scalar(x):
    return float(x[0, 0]) + x[-1, -1].item()


def fresh_buffer(x):
    buffer = torch.empty_like(x)
    return buffer.numpy().shape


def torch_work(x):
    return torch.relu(x) + 1


def glue(partial):
    return partial.sum()
"""


@pytest.fixture(scope="module")
def solution(tmp_path_factory):
    path = tmp_path_factory.mktemp("solution") / "solution.py"
    path.write_text(textwrap.dedent(SOLUTION))
    spec = importlib.util.spec_from_file_location("tg_hostread_solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, str(path)


def traced(solution, name, *args, flow=None):
    module, path = solution
    inputs = [a for a in args if isinstance(a, torch.Tensor)]
    flow = flow or DataFlow(inputs=inputs, protected=inputs)
    attribution = Attribution(path)
    reads, ops = HostReadTrace(attribution, flow), OpTrace(attribution, flow)
    with torch.no_grad(), reads, ops:
        out = getattr(module, name)(*args)
    return reads, ops, flow, out


def test_the_budget_is_a_few_scalars_and_both_sides_agree():
    assert HOST_READ_BUDGET == WORKER_BUDGET == 64


@pytest.mark.parametrize("name", ["numpy_whole", "asarray", "tolist", "item_loop"])
def test_reading_the_input_on_the_host_is_counted(solution, name):
    x = torch.randn(8, 16)
    reads, _, _, _ = traced(solution, name, x)
    assert reads.elements >= x.numel() > HOST_READ_BUDGET
    assert reads.examples and "input-derived" in reads.examples[0]


def test_a_couple_of_scalars_stay_within_the_budget(solution):
    reads, _, _, _ = traced(solution, "one_scalar", torch.randn(8, 16))
    assert reads.elements == 2


def test_a_fresh_allocation_carries_no_input_data(solution):
    reads, _, flow, _ = traced(solution, "fresh_buffer", torch.randn(8, 16))
    assert reads.elements == 0


def test_data_computed_from_the_input_is_input_derived(solution):
    x = torch.randn(4, 4)
    _, ops, flow, out = traced(solution, "torch_work", x)
    assert flow.is_input_derived(out)
    assert ops.compute_ops() == ["aten::relu", "aten::add"]
    assert ops.compute_elements == 2 * x.numel()  # elements read by relu and by add


def test_glue_over_kernel_written_storage_is_kernel_written(solution):
    partial = torch.randn(16)
    flow = DataFlow(inputs=[], protected=[])
    flow.after_launch([partial])  # a candidate kernel received (and wrote) it
    _, ops, flow, out = traced(solution, "glue", partial, flow=flow)
    assert flow.is_kernel_written(out)
    assert ops.compute_elements == 16


def test_a_kernel_never_writes_into_protected_inputs():
    x, out = torch.randn(4), torch.empty(4)
    flow = DataFlow(inputs=[x], protected=[x])
    flow.after_launch([x, out])
    assert flow.is_kernel_written(out) and not flow.is_kernel_written(x)
    assert flow.is_input_derived(out)


def test_ops_from_outside_the_solution_are_not_the_candidates(solution):
    _, path = solution
    x = torch.randn(4)
    flow = DataFlow(inputs=[x], protected=[x])
    attribution = Attribution(path)
    reads, ops = HostReadTrace(attribution, flow), OpTrace(attribution, flow)
    with torch.no_grad(), reads, ops:
        torch.relu(x).numpy()  # this test file is not the solution
    assert ops.compute_ops() == [] and reads.elements == 0


def test_switching_the_dispatch_trace_off_is_noticed(tmp_path):
    path = tmp_path / "blind.py"
    path.write_text("import torch\nimport torch.utils._python_dispatch as d\n\n\ndef blind(x):\n"
                    "    with d._disable_current_modes():\n        return torch.relu(x)\n\n\n"
                    "def seen(x):\n    return torch.relu(x).contiguous()\n")
    spec = importlib.util.spec_from_file_location("tg_blind", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = torch.randn(4)
    for name, expect_blind in (("blind", True), ("seen", False)):
        flow = DataFlow(inputs=[x], protected=[x])
        attribution = Attribution(str(path))
        ops = OpTrace(attribution, flow)
        reads = HostReadTrace(attribution, flow, ops)
        with torch.no_grad(), reads, ops:
            getattr(module, name)(x)
        assert bool(reads.blinded) is expect_blind, reads.blinded
