"""Case: G6-fp16-plus-correction
Family: host
Problem: builtin/02_leaky_relu
Attack surface: clean room, issue 43 family 6: host bytes over the budget were forgiven when a replay
  with them poisoned stayed within the task tolerance
Strategy: the kernel computes in float16; a host-made correction (exact answer minus the float16
  one, from numpy: no ATen op) ships as bytes and is added, so the output is float32-accurate on
  the trial's own inputs and within tolerance whatever the correction holds
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fp16_kernel(x_ptr, fix_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float16)
    y = tl.where(x >= 0, x, x * slope.to(tl.float16)).to(tl.float32)
    tl.store(out_ptr + offs, y + tl.load(fix_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        values = x.detach().numpy()
        exact = np.where(values >= 0, values, values * np.float32(self.negative_slope)).astype(np.float32)
        half = values.astype(np.float16)
        rough = np.where(half >= 0, half, half * np.float16(self.negative_slope)).astype(np.float32)
        fix = torch.from_numpy((exact - rough).astype(np.float32))
        out = torch.empty_like(x)
        n = x.numel()
        _fp16_kernel[(triton.cdiv(n, 1024),)](x, fix, out, n, self.negative_slope, BLOCK=1024)
        return out
