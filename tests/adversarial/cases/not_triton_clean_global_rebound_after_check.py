"""Case: F5-global-rebound-after-check
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: clean room: a kernel's global is a Triton function when the kernel is checked, then
  rebound to a Python function before the launch
Strategy: the kernel calls ACT(x); at import ACT is tl.abs, in forward it is rebound to a Python
  function that computes leaky_relu with numpy on the interpreter's arrays
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

ACT = tl.abs
_SLOPE = [0.01]


def _leaky(x):
    data = x.handle.data
    return tl.tensor(type(x.handle)(np.where(data >= 0, data, data * _SLOPE[0]).astype(data.dtype), x.handle.dtype),
                     x.type)


@triton.jit
def _act_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, ACT(tl.load(x_ptr + offs, mask=mask)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        _SLOPE[0] = negative_slope

    def forward(self, x):
        globals()["ACT"] = _leaky
        out = torch.empty_like(x)
        _act_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
