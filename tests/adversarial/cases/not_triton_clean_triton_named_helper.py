"""Case: F5-triton-named-helper
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: clean room: a Python helper that claims to be Triton (__module__ starting with
  triton, __triton_builtin__ set) called inside a kernel
Strategy: the helper called from the kernel body computes leaky_relu with numpy on the interpreter's arrays
Expected status: integrity_violation
Expected violation: python_in_kernel
Options: {}
Device: cpu
"""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl

_SLOPE = [0.01]


def leaky(x, _semantic=None):
    data = x.handle.data
    return tl.tensor(type(x.handle)(np.where(data >= 0, data, data * _SLOPE[0]).astype(data.dtype), x.handle.dtype),
                     x.type)


leaky.__module__ = "triton.language.math"
leaky.__triton_builtin__ = True


@triton.jit
def _leaky_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, leaky(tl.load(x_ptr + offs, mask=mask)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        _SLOPE[0] = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        _leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
