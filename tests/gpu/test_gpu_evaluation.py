"""The CUDA paths, run for real: timing, physics floor, coverage, the jail's device binding.

Marked `gpu`: skipped without CUDA, run on any GPU machine (see docs/benchmarks.md for the
command and the figures recorded from such a run).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tritongym
from tritongym import Status

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SUITE = {p.name: p for p in tritongym.builtin_suite()}


def solution(name: str) -> Path:
    return ROOT / "examples" / "builtin" / f"{name}.py"


@pytest.mark.parametrize("name", ["07_softmax", "10_matmul", "12_linear_gelu"])
def test_honest_solutions_are_timed_profiled_and_rewarded(name):
    result = tritongym.evaluate(SUITE[name], solution(name), device="cuda", timing_reps=12, timing_blocks=3)
    assert result.status == Status.OK, (result.error, result.candidate_log)
    timing = result.timing
    assert timing is not None and timing.meaningful
    assert timing.reference_median_ms > 0 and timing.candidate_median_ms > 0
    assert timing.floor_ms is not None and timing.candidate_median_ms >= timing.floor_ms
    assert timing.bandwidth_gbps is not None and timing.bandwidth_gbps > 100
    assert result.speedup == pytest.approx(timing.reference_median_ms / timing.candidate_median_ms)
    # The clean room timed 12 replays of the logged work; the charged time is the larger median,
    # and an honest forward's own time is within 25 % of its replay (the same kernels).
    assert timing.replay_reps == 12 and timing.replay_median_ms > 0
    assert timing.candidate_median_ms == max(timing.reported_median_ms, timing.replay_median_ms)
    assert timing.replay_median_ms == pytest.approx(timing.reported_median_ms, rel=0.25)
    assert result.coverage is not None and 0.5 < result.coverage <= 1.0
    assert any(k.candidate for k in result.kernel_profile)
    expected = 0.5 + 0.5 * min(result.speedup, 3.0) + 0.5 * result.coverage
    assert result.reward == pytest.approx(expected)
    assert tritongym.evaluator.prs_keep_probability(result) is not None


PARTIAL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        h = x @ self.linear.weight.t() + self.linear.bias   # the GEMM stays in PyTorch
        y = torch.empty_like(h)
        n = h.numel()
        gelu_kernel[(triton.cdiv(n, 1024),)](h, y, n, BLOCK=1024)
        return y
'''


def test_lazy_partial_triton_is_a_fallback_and_its_coverage_is_low(tmp_path):
    # The GEMM, all of the reference's FLOPs, stays in PyTorch: the work-based fallback rule
    # rejects it. With that check turned off, coverage shows how little the candidate's kernel does.
    path = tmp_path / "partial.py"
    path.write_text(PARTIAL)
    problem = SUITE["12_linear_gelu"]
    rejected = tritongym.evaluate(problem, path, device="cuda", timing_reps=6, timing_blocks=2)
    assert rejected.status == Status.INTEGRITY_VIOLATION
    assert "pytorch_fallback" in [v.code for v in rejected.violations]
    result = tritongym.evaluate(problem, path, device="cuda", timing_reps=6, timing_blocks=2,
                                disabled_checks={"pytorch_fallback"})
    assert result.status == Status.OK, (result.error, result.violations)
    assert result.coverage is not None and result.coverage < 0.9
    assert any(not k.candidate for k in result.kernel_profile)  # cuBLAS/ATen kernels are listed


SIDE_STREAM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, x):
        y = torch.empty_like(x)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):   # returns before the work is done
            for _ in range(50):
                softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
'''


def test_side_stream_work_is_inside_the_measured_time(tmp_path):
    path = tmp_path / "side_stream.py"
    path.write_text(SIDE_STREAM)
    problem = SUITE["07_softmax"]
    sneaky = tritongym.evaluate(problem, path, device="cuda", disabled_checks={"forbidden_construct"},
                                timing_reps=9, timing_blocks=3)
    honest = tritongym.evaluate(problem, solution("07_softmax"), device="cuda", timing_reps=9, timing_blocks=3)
    assert sneaky.status == Status.OK and honest.status == Status.OK
    # 50 launches on a side stream cannot look faster than 1 launch. Dispatched while the main
    # stream is held they may finish before its start event (on the H200 they did); the clean
    # room replays all 50 and the charged time is never below its replay.
    assert sneaky.timing.replay_median_ms > 10 * honest.timing.replay_median_ms
    assert sneaky.timing.candidate_median_ms >= sneaky.timing.replay_median_ms
    assert sneaky.timing.candidate_median_ms > 5 * honest.timing.candidate_median_ms
    assert honest.timing.charged_reps < honest.timing.candidate_reps // 2


def test_the_static_gate_still_rejects_side_streams(tmp_path):
    path = tmp_path / "side_stream.py"
    path.write_text(SIDE_STREAM)
    result = tritongym.evaluate(SUITE["07_softmax"], path, device="cuda")
    assert result.status == Status.INTEGRITY_VIOLATION
    assert "forbidden_construct" in [v.code for v in result.violations]
