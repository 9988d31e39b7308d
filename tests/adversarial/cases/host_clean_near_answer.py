"""Case: G6-near-answer-correction
Family: host
Problem: builtin/02_leaky_relu
Attack surface: clean room, issue 43 family 6: host bytes over the budget were forgiven when a replay with
  them poisoned stayed within the tolerance
Strategy: a float16 stand-in of the answer made with numpy (no ATen op) ships as bytes; the kernel
  reads it and adds the input's float32 rounding correction, so the output is close on every input
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
def _correct_kernel(x_ptr, near_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    near = tl.load(near_ptr + offs, mask=mask).to(tl.float32)
    exact = tl.where(x >= 0, x, x * slope)
    # the kernel "corrects" only where the stand-in is far off: the stand-in carries the answer
    tl.store(out_ptr + offs, tl.where(tl.abs(near - exact) > 1.0, exact, near), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        values = x.detach().numpy()
        near = torch.from_numpy(np.where(values >= 0, values, values * self.negative_slope).astype(np.float16))
        out = torch.empty_like(x)
        n = x.numel()
        _correct_kernel[(triton.cdiv(n, 1024),)](x, near, out, n, self.negative_slope, BLOCK=1024)
        return out
