"""Issue 45 (3): the pre-flight errs on the side of refusing, and its estimate holds against a real worker.

KernelBench's level1/47 (a sum over one axis of a 4 GiB input) passed the old pre-flight under the
8 GiB limit (its inputs + parameters + forward peak are 8.0 GiB on the meta device) and its reference
worker then grew to ~22 GB. The pre-flight now estimates the reference worker itself (the copies and
float64 check a trial makes, the worker's own address space) and the time of an evaluation's forwards
in Triton's CPU interpreter at its measured rate.
"""

from __future__ import annotations

import json

import pytest

from tritongym import Problem
from tritongym.evaluator.reference import ReferenceRunner
from tritongym.tasks import preflight as pf
from tritongym.tasks.problem import Problem as ProblemType

GiB = 1 << 30
#: A problem's text for the checks that only read its id and name.
STUB = "class Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n"


def _kernelbench(kernelbench_jsonl, number: int) -> ProblemType:
    from tritongym.tasks.loaders import load_problems

    wanted = f"kernelbench/level1/{number}"
    return next(p for p in load_problems(kernelbench_jsonl, levels=[1]) if p.problem_id == wanted)


def test_the_sum_reduction_that_took_the_machine_is_refused_with_the_cap_named(kernelbench_jsonl):
    problem = _kernelbench(kernelbench_jsonl, 47)
    check = pf.preflight([problem], memory_limit_gb=8, timeout=180, size="original")[problem.problem_id]
    assert check.total_bytes is not None and check.total_bytes <= 8 * GiB  # what let it through before
    assert check.reference_bytes is not None and check.reference_bytes > 16 * GiB
    assert check.refusal is not None and "--memory-limit-gb" in check.refusal and "--size cpu" in check.refusal
    assert "caps every evaluator process" in check.refusal


def test_the_original_size_matmul_that_timed_out_is_refused_for_time(kernelbench_jsonl):
    problem = _kernelbench(kernelbench_jsonl, 1)  # 4096 x 4096 x 4096: 137 GFLOP per forward
    check = pf.preflight([problem], memory_limit_gb=8, timeout=180, size="original")[problem.problem_id]
    assert check.refusal is not None and "--timeout" in check.refusal and "interpreter" in check.refusal
    assert check.expected_s is not None and check.expected_s > 180


def test_the_cpu_size_variants_of_the_same_problems_pass_the_same_model(kernelbench_jsonl):
    """The control: the estimate that refuses them at their original size lets their CPU-size
    variants through (were it refusing everything, the tests above would prove nothing)."""
    from tritongym.bench.audit.probe import estimate_sizes
    from tritongym.tasks.sizing import at_size

    sized = at_size([_kernelbench(kernelbench_jsonl, n) for n in (1, 47)], "cpu").problems
    estimates = estimate_sizes(sized)
    for problem in sized:
        check = pf.check_estimate(problem, estimates[problem.content_hash], memory_limit_gb=8, timeout=180,
                                  size="cpu")
        assert check.refusal is None, check
        assert check.expected_s is not None and check.expected_s < 60


def test_an_unfollowable_forward_is_assumed_as_large_as_its_inputs_and_parameters():
    from tritongym.bench.audit.model import SizeEstimate

    problem = Problem.from_source(STUB, name="rnn")
    followed = SizeEstimate(input_bytes=GiB, param_bytes=GiB, output_bytes=0, forward_peak_bytes=0, flops=0)
    unfollowed = SizeEstimate(input_bytes=GiB, param_bytes=GiB, forward_error="too slow on the meta device")
    low = pf.check_estimate(problem, followed, memory_limit_gb=64, timeout=1e9, size="original")
    high = pf.check_estimate(problem, unfollowed, memory_limit_gb=64, timeout=1e9, size="original")
    assert high.reference_bytes == low.reference_bytes + pf.FORWARD_COPIES * 2 * GiB


#: 64 MiB of input summed over one axis, with a float64 check: the shape of level1/47, small.
SUM_REDUCTION = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return torch.sum(x, dim=self.dim, keepdim=True)

batch_size = 64
dim1 = 512
dim2 = 512

def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]

def get_init_inputs():
    return [1]
'''


def _peak_vm(pid: int) -> int:
    peak, stack, seen = 0, [pid], set()
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            with open(f"/proc/{current}/status") as handle:
                for line in handle:
                    if line.startswith("VmPeak:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
            with open(f"/proc/{current}/task/{current}/children") as handle:
                stack.extend(int(child) for child in handle.read().split())
        except OSError:
            continue
    return peak


def test_the_estimate_is_above_what_a_real_reference_worker_takes():
    from tritongym.bench.audit.probe import estimate_sizes

    problem = Problem.from_source(SUM_REDUCTION, name="sum_small")
    estimate = estimate_sizes([problem])[problem.content_hash]
    check = pf.check_estimate(problem, estimate, memory_limit_gb=8, timeout=180, size="original")
    assert check.refusal is None and check.reference_bytes is not None
    # The worker runs under that very estimate as its cap: were the estimate low, the trial would fail.
    with ReferenceRunner(problem, device="cpu", timeout=120, memory_limit_bytes=check.reference_bytes) as runner:
        runner.setup(weight_seed=1)
        trial = runner.trial(seed=2, truth=True)
        measured = _peak_vm(runner.process.pid)
    assert trial.truth is not None  # the float64 check ran too
    assert 0 < measured <= check.reference_bytes, json.dumps({"measured": measured, "estimate": check.reference_bytes})
    # The meta-device total alone (what the old pre-flight compared) is far below the real need.
    assert estimate.total_bytes < measured


def test_check_without_an_estimate_of_the_worker_assumes_the_most_copies():
    problem = Problem.from_source(STUB, name="p")
    check = pf.check(problem, GiB, 0, memory_limit_gb=4, timeout=180, size="original")
    assert check.reference_bytes == pf.REFERENCE_BASE_BYTES + pf.INPUT_COPIES * GiB
    assert check.refusal is not None


@pytest.mark.parametrize("limit,refused", [(2, True), (64, False)])
def test_the_memory_refusal_follows_the_limit(limit, refused):
    from tritongym.bench.audit.model import SizeEstimate

    problem = Problem.from_source(STUB, name="p")
    estimate = SizeEstimate(input_bytes=256 << 20, param_bytes=0, output_bytes=256 << 20,
                            forward_peak_bytes=256 << 20, flops=0)
    check = pf.check_estimate(problem, estimate, memory_limit_gb=limit, timeout=1e9, size="original")
    assert (check.refusal is not None) is refused


#: A 3x3 convolution over a batch of 8: im2col columns of 8 x (4 x 3 x 3) x (30 x 30) float32 values.
CONV = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 16, 3)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.randn(8, 4, 32, 32)]

def get_init_inputs():
    return []
'''


def test_a_convolutions_hidden_im2col_buffer_is_estimated_and_counted():
    from tritongym.bench.audit.probe import estimate_sizes

    problem = Problem.from_source(CONV, name="conv")
    estimate = estimate_sizes([problem])[problem.content_hash]
    assert estimate.workspace_bytes == 8 * (4 * 3 * 3) * (30 * 30) * 4
    check = pf.check_estimate(problem, estimate, memory_limit_gb=8, timeout=1e9, size="original")
    without = pf.reference_bytes(estimate.input_bytes, estimate.param_bytes,
                                 max(estimate.output_bytes, estimate.forward_peak_bytes))
    assert check.reference_bytes == without + pf.WORKSPACE_COPIES * estimate.workspace_bytes
    # The meta total (what sizing compares with its budget) is unchanged by it.
    assert estimate.total_bytes == estimate.input_bytes + estimate.param_bytes + max(
        estimate.output_bytes, estimate.forward_peak_bytes)
