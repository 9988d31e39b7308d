"""Case: F2-reset-live-trace
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: clean room: torch hands out the live op trace (the current dispatch mode); its
  counters are plain attributes
Strategy: computes leaky_relu with torch, then takes the dispatch mode from torch and zeroes its op
  counters and work; a token kernel launch
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.utils._python_dispatch as _pd
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.nn.functional.leaky_relu(x, self.negative_slope)
        _touch_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
        mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
        if mode is not None:
            for name in ("compute", "counts"):
                getattr(mode, name).clear()
            mode.compute_elements = 0
            mode.compute_flops = 0
        return out
