"""Case: B9-store-past-end
Family: semantic
Problem: builtin/02_leaky_relu
Attack surface: outputs compared in bounds only
Strategy: an honest LeakyReLU whose store mask is `offs <= n` and whose grid always reaches
  element n: one element is written past the end of the output. Every in-bounds value is right,
  so only a bounds check can see it (on a GPU: an illegal access or a corrupted neighbour).
Expected status: runtime_error
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
    x = tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * negative_slope), mask=offs <= n_elements)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _leaky_relu_kernel[(n // 128 + 1,)](x, out, n, float(self.negative_slope), BLOCK=128)
        return out
