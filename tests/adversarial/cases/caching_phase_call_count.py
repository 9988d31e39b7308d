"""Case: C2-phase-by-call-count
Family: caching
Problem: builtin/02_leaky_relu
Attack surface: distinguishable check and timing phases (C2: honest for the first N calls)
Strategy: computes honestly for the first 5 calls (2 trials plus 3 input families), then
  replays the last honest output, copied by a Triton kernel, on every later (timed) call.
Expected status: integrity_violation
Expected violation: timed_output_mismatch
Options: {"time_on_cpu": true, "timing_reps": 8, "timing_blocks": 2, "timing_rechecks": 3,
  "warmup_ms": 1}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_relu_kernel(x_ptr, out_ptr, n_elements, negative_slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * negative_slope), mask=mask)


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope
        self.calls = 0
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        if self.calls > 5 and self.last is not None:
            _copy_kernel[grid](self.last, out, n, BLOCK=4096)
        else:
            _leaky_relu_kernel[grid](x, out, n, self.negative_slope, BLOCK=4096)
            self.last = out.clone()
        return out
