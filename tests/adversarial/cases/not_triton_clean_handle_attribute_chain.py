"""Case: F5-handle-attribute-chain
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: clean room: attribute chains on interpreter values (x.handle.data) reach numpy
  arrays inside a kernel body
Strategy: the kernel body rewrites the loaded block's raw numpy array in place with leaky_relu's
  formula through x.handle.data
Expected status: integrity_violation
Expected violation: python_in_kernel
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    x.handle.data.__imul__((x.handle.data >= 0) + (x.handle.data < 0) * slope.handle.data)
    tl.store(out_ptr + offs, x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        _leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.negative_slope, BLOCK=1024)
        return out
