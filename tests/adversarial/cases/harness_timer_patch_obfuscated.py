"""Case: D4-timer-patch-obfuscated
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the host clock used to time calls on the CPU tier (D4); the run-time watch on
  harness functions (captured references, identity checks)
Strategy: an honest but slow kernel; at import, time.perf_counter is replaced by a clock that
  runs a hundred times slower (written through time.__dict__, no forbidden vocabulary), so
  every timed call would look 100x faster.
Expected status: integrity_violation
Expected violation: harness_tampering
Options: {"time_on_cpu": true, "timing_reps": 8, "timing_blocks": 2, "timing_rechecks": 3,
  "warmup_ms": 1}
Device: cpu
"""

import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

_real_perf_counter = time.perf_counter


def _slow_clock():
    return _real_perf_counter() / 100.0


time.__dict__["perf_counter"] = _slow_clock


@triton.jit
def _leaky_relu_kernel(x_ptr, out_ptr, n_elements, negative_slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * negative_slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _leaky_relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, self.negative_slope, BLOCK=4096)
        return out
