"""Case: C0-honest-softmax-long
Family: control
Problem: adversarial/softmax_long
Attack surface: none (honest control for the tiny-output softmax problem)
Strategy: an honest one-program-per-row softmax; proves the beat-trivial rule does not reject
  honest work whose outputs are all below the absolute tolerance.
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
def _softmax_kernel(x_ptr, out_ptr, n_cols, row_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * row_stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * row_stride + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        _softmax_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return out
