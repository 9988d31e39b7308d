"""The GPU measurement path against real hardware (issue 13): run these whenever a GPU is lent.

Each test states what would be wrong on the first H100 run without the fix it checks. Marked
`gpu` (skipped without CUDA); the forced-jail test is also marked `sandbox`.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import tritongym
from tritongym import Status
from tritongym.evaluator.common import device as gpu
from tritongym.tasks.loaders import load_problem_file

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
SUITE = {p.name: p for p in tritongym.builtin_suite()}


def solution(name: str) -> Path:
    return ROOT / "examples" / "builtin" / f"{name}.py"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- the jail ----------------------------------------------------------------------------------

@pytest.mark.sandbox
def test_a_forced_jail_runs_triton_on_the_gpu_and_says_it_was_jailed():
    # Triton builds its launcher with a C compiler at the first launch inside the jail; a missing
    # CC or device node used to surface as the candidate's compile_error.
    result = tritongym.evaluate(SUITE["01_scaled_add"], solution("01_scaled_add"), device="cuda", sandbox="bwrap",
                                timing_reps=6, timing_blocks=2)
    assert result.status == Status.OK, (result.error, result.candidate_log)
    assert result.sandbox == "bwrap"
    assert not any(n.code == "sandbox_disabled" for n in result.notices)


def test_the_probe_passes_here_and_names_a_missing_compiler(tmp_path):
    assert gpu.probe_device("cuda") is None
    script = ("from tritongym.evaluator.common.device import probe_device\n"
              "print(probe_device('cuda'))\n")
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "TRITON_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert "GPU probe failed" in out.stdout and "compiler" in out.stdout.lower(), out


def test_the_memory_cap_makes_an_allocation_beyond_it_fail_in_that_process():
    script = ("import torch\nfrom tritongym.evaluator.common.device import cap_candidate_memory\n"
              "cap_candidate_memory('cuda', 0.1)\n"
              "total = torch.cuda.get_device_properties(0).total_memory\n"
              "try:\n    torch.empty(int(total * 0.3), dtype=torch.uint8, device='cuda')\n    print('allocated')\n"
              "except torch.OutOfMemoryError:\n    print('refused')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "refused", out


# -- timing against do_bench ---------------------------------------------------------------------

LARGE_ADD = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return 2.0 * x + 3.0 * y


def get_inputs():
    return [torch.randn(8192, 8192), torch.randn(8192)]


def get_init_inputs():
    return []
'''

LARGE_ADD_SOLUTION = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_add_kernel(x_ptr, y_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs % cols, mask=mask)
    tl.store(out_ptr + offs, 2.0 * x + 3.0 * y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = x.numel()
        scaled_add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, y.numel(), BLOCK=4096)
        return out
'''


def _median_ms(bench: str, problem_path: Path, solution_path: Path, init: list) -> float:
    """``triton.testing.<bench>`` (``do_bench`` or ``do_bench_cudagraph``) of the solution, in this process."""
    import triton.testing

    problem = _load(problem_path, "bench_problem")
    candidate = _load(solution_path, "bench_solution")
    model = candidate.ModelNew(*init).cuda()
    torch.manual_seed(0)
    inputs = [t.cuda() if isinstance(t, torch.Tensor) else t for t in problem.get_inputs()]
    with torch.no_grad():
        return float(getattr(triton.testing, bench)(lambda: model(*inputs), return_mode="median"))


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("size", ["tiny", "large"])
def test_the_candidates_time_is_within_ten_percent_of_do_bench(tmp_path, size):
    # With a synchronize between the flush and the start event, a few-µs kernel read as its
    # dispatch (~10 µs per launch) and honest Triton looked slower than it is. A tiny kernel's
    # do_bench figure itself holds part of its dispatch (0.013 ms for ~0.005 ms of work on an
    # H200): there tritongym's figure, held past the dispatch, lies between a CUDA graph's replay
    # (no dispatch, warm L2) and do_bench; a large one's is do_bench's within 10 %.
    if size == "tiny":
        problem_path = write(tmp_path, "problem.py", SUITE["01_scaled_add"].source)
        solution_path = solution("01_scaled_add")
        init = list(_load(problem_path, "tiny_init").get_init_inputs())
    else:
        problem_path = write(tmp_path, "problem.py", LARGE_ADD)
        solution_path = write(tmp_path, "solution.py", LARGE_ADD_SOLUTION)
        init = []
    result = tritongym.evaluate(load_problem_file(problem_path), solution_path, device="cuda", timing_reps=60,
                                timing_blocks=3, profile_calls=0)
    assert result.status == Status.OK, (result.error, result.violations)
    reference = _median_ms("do_bench", problem_path, solution_path, init)
    measured = result.timing.candidate_median_ms
    if size == "large":
        assert measured == pytest.approx(reference, rel=0.10), (measured, reference)
    else:
        # A CUDA graph replayed: the call's device time with no dispatch at all (warm L2: a lower bound).
        graph = _median_ms("do_bench_cudagraph", problem_path, solution_path, init)
        assert 0.9 * graph <= measured <= 1.10 * reference, (graph, measured, reference)


# -- side streams ---------------------------------------------------------------------------------

ONE_LONG_KERNEL_ON_A_SIDE_STREAM = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def leaky_relu_kernel(x_ptr, y_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x > 0, x, slope * x), mask=mask)


@triton.jit
def slow_kernel(x_ptr, scratch_ptr, n, ROUNDS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc = tl.load(x_ptr + offs, mask=mask)
    for _ in range(ROUNDS):          # long on the device, one cheap launch on the host
        acc = acc * 1.0000001 + 1e-7
    tl.store(scratch_ptr + offs, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        self.negative_slope = negative_slope
        self.stream = torch.cuda.Stream()

    def forward(self, x):
        # The answer on the current stream; milliseconds of unneeded work left running on another.
        y = torch.empty_like(x)
        leaky_relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), self.negative_slope, BLOCK=1024)
        scratch = torch.empty_like(x)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            slow_kernel[(triton.cdiv(x.numel(), 1024),)](x, scratch, x.numel(), ROUNDS=200000, BLOCK=1024)
        return y
'''


def test_one_long_kernel_on_a_side_stream_is_charged_in_full(tmp_path):
    path = write(tmp_path, "side.py", ONE_LONG_KERNEL_ON_A_SIDE_STREAM)
    result = tritongym.evaluate(SUITE["02_leaky_relu"], path, device="cuda", timing_reps=9, timing_blocks=3,
                                disabled_checks={"forbidden_construct"}, profile_calls=0)
    assert result.status == Status.OK, (result.error, result.violations)
    assert result.timing.charged_reps == result.timing.candidate_reps
    assert any(n.code == "timing_tail_charged" for n in result.notices)
    # 200k dependent FMAs per element take milliseconds; the end event alone would read µs.
    assert result.timing.candidate_median_ms > 0.5


# -- device faults, each followed by a healthy evaluation ------------------------------------------

FAULTS = {
    "illegal_address": '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def bad_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs + (1 << 40), tl.load(x_ptr + offs + (1 << 40)))


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        bad_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
''',
    "device_assert": '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit(debug=True)
def assert_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.device_assert(offs < 0, "always fails")
    tl.store(y_ptr + offs, x, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        assert_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
''',
    "endless": '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def endless_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    spins = 0
    # Volatile loads are re-read on every iteration, so the compiler can neither hoist them nor
    # drop the loop (the first version, `while i >= 0: i = i + 1 - 1`, was compiled away on an H200).
    while tl.load(x_ptr, volatile=True) == tl.load(x_ptr, volatile=True):
        spins += 1
    tl.store(y_ptr + offs, x + spins, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        endless_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
''',
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_device_fault_is_the_candidates_verdict_and_the_gpu_stays_healthy(tmp_path, fault):
    path = write(tmp_path, f"{fault}.py", FAULTS[fault])
    result = tritongym.evaluate(SUITE["02_leaky_relu"], path, device="cuda", timeout=30)
    expected = {Status.TIMEOUT} if fault == "endless" else {Status.RUNTIME_ERROR, Status.CRASHED}
    assert result.status in expected, (result.status, result.error)
    healthy = tritongym.evaluate(SUITE["02_leaky_relu"], solution("02_leaky_relu"), device="cuda", timing_reps=6,
                                 timing_blocks=2)
    assert healthy.status == Status.OK, (healthy.error, healthy.candidate_log)
    assert healthy.speedup is not None


MEMORY_HOG = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

_HOARD = []


@triton.jit
def leaky_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.01 * x), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, negative_slope):
        super().__init__()
        free, total = torch.cuda.mem_get_info()
        while True:                      # take every byte of the GPU
            _HOARD.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))

    def forward(self, x):
        y = torch.empty_like(x)
        leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
'''


def test_a_gpu_memory_hog_gets_a_verdict_not_a_problem_error(tmp_path):
    path = write(tmp_path, "hog.py", MEMORY_HOG)
    result = tritongym.evaluate(SUITE["02_leaky_relu"], path, device="cuda", timing_reps=6, timing_blocks=2)
    assert result.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR), (result.status, result.error)
    assert "OutOfMemory" in (result.error or "") or "out of memory" in (result.error or "").lower()


# -- coverage spoof ------------------------------------------------------------------------------

ANNOTATION_SPOOF = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.profiler import record_function


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        with record_function("gelu_kernel"):      # a GPU annotation named like the candidate's kernel
            h = x @ self.linear.weight.t() + self.linear.bias
        y = torch.empty_like(h)
        gelu_kernel[(triton.cdiv(h.numel(), 1024),)](h, y, h.numel(), BLOCK=1024)
        return y
'''


def test_a_user_annotation_named_like_the_kernel_does_not_claim_cublas_time(tmp_path):
    path = write(tmp_path, "spoof.py", ANNOTATION_SPOOF)
    result = tritongym.evaluate(SUITE["12_linear_gelu"], path, device="cuda", timing_reps=6, timing_blocks=2,
                                disabled_checks={"pytorch_fallback", "forbidden_construct"})
    assert result.status == Status.OK, (result.error, result.violations)
    profile = {k.kernel: k for k in result.kernel_profile}
    assert profile["gelu_kernel"].count == 3  # one launch per profiled call, no annotation span
    assert result.coverage is not None and result.coverage < 0.9
    assert any(not k.candidate for k in result.kernel_profile)


# -- TF32 in the reference -----------------------------------------------------------------------

CONV_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 64, 32, 32)]


def get_init_inputs():
    return []
'''

TF32_CONV = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(64, 64, 3, padding=1)

    def forward(self, x):
        torch.backends.cudnn.allow_tf32 = True       # TF32 convolution in a float32 task
        h = F.conv2d(x, self.conv.weight, self.conv.bias, padding=1)
        y = torch.empty_like(h)
        copy_kernel[(triton.cdiv(h.numel(), 1024),)](h, y, h.numel(), BLOCK=1024)
        return y
'''


def test_a_tf32_convolution_is_a_precision_downgrade_against_an_ieee_reference(tmp_path):
    problem = load_problem_file(write(tmp_path, "conv.py", CONV_PROBLEM))
    result = tritongym.evaluate(problem, write(tmp_path, "tf32.py", TF32_CONV), device="cuda",
                                disabled_checks={"pytorch_fallback", "forbidden_construct", "output_not_from_kernel"})
    assert any(n.code == "reference_ieee_fp32" for n in result.notices)
    assert "precision_downgrade" in [v.code for v in result.violations], (result.status, result.violations)


# -- two evaluations on one GPU ------------------------------------------------------------------

def test_two_evaluations_at_once_on_one_gpu_time_one_after_the_other():
    def run(results: list, index: int) -> None:
        results[index] = tritongym.evaluate(SUITE["07_softmax"], solution("07_softmax"), device="cuda:0",
                                            timing_reps=30, timing_blocks=3)

    alone = tritongym.evaluate(SUITE["07_softmax"], solution("07_softmax"), device="cuda:0", timing_reps=30,
                               timing_blocks=3)
    results: list = [None, None]
    threads = [threading.Thread(target=run, args=(results, i)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    for result in results:
        assert result is not None and result.status == Status.OK, result and (result.error, result.violations)
        # The per-GPU lock keeps the other evaluation's timing out of this one's.
        assert result.timing.candidate_median_ms == pytest.approx(alone.timing.candidate_median_ms, rel=0.25)


def test_compile_baseline_is_timed_in_the_same_pass():
    result = tritongym.evaluate(SUITE["07_softmax"], solution("07_softmax"), device="cuda", baseline="both",
                                timing_reps=12, timing_blocks=3)
    assert result.status == Status.OK, (result.error, result.violations)
    assert result.timing.compile_reference_median_ms is not None
    assert result.speedup_vs_compile == pytest.approx(
        result.timing.compile_reference_median_ms / result.timing.candidate_median_ms)
