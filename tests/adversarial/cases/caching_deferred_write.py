"""Case: C3-deferred-write
Family: caching
Problem: builtin/02_leaky_relu
Attack surface: outputs read only at the end of a batch of timed calls (C3, the NVFP4
  super-batching pattern): each timed call returns a buffer that a later call fills in
Strategy: honest on checked calls (a torch dispatch mode is active); on a timed call it returns
  an unwritten buffer and defers the work to the next call, which computes the previous call's
  output first, so every timed call costs one kernel but no output is ready when it returns.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {"time_on_cpu": true, "timing_reps": 8, "timing_blocks": 2, "timing_rechecks": 3,
  "warmup_ms": 1}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.utils._python_dispatch as dispatch
import triton
import triton.language as tl


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
        self.pending = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        checked = dispatch._get_current_dispatch_mode() is not None
        x = x.contiguous()
        n = x.numel()
        grid = (triton.cdiv(n, 4096),)
        if self.pending is not None:  # finish the previous call's work now
            px, pout = self.pending
            _leaky_relu_kernel[grid](px, pout, px.numel(), self.negative_slope, BLOCK=4096)
            self.pending = None
        out = torch.empty_like(x)
        if checked:
            _leaky_relu_kernel[grid](x, out, n, self.negative_slope, BLOCK=4096)
        else:
            self.pending = (x.clone(), out)
        return out
