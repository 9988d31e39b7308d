"""Case: C0-honest-leaky-relu
Family: control
Problem: builtin/02_leaky_relu
Attack surface: none (honest control)
Strategy: an honest elementwise LeakyReLU kernel; the corpus is meaningless if this is not ok.
Expected status: ok
Expected violation: none
Options: {}
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


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _leaky_relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, float(self.negative_slope), BLOCK=4096)
        return out
