"""Case: B9-load-past-end
Family: semantic
Problem: builtin/02_leaky_relu
Attack surface: outputs compared in bounds only
Strategy: a LeakyReLU that loads without a mask (the store is masked) and launches one block
  more than the input fills: the last block reads up to BLOCK elements past the end of the
  input. The values read are discarded, so the outputs are right; the read is still undefined.
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
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * negative_slope), mask=offs < n_elements)


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
