"""Case: A1-torch-in-grid-callable
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: launch-time Python: the first wave ran the whole launch untraced, so torch work in a
  grid callable was invisible (red-team finding 1)
Strategy: F.leaky_relu inside the grid callable into a staging buffer; a real Triton kernel copies
  it to the output
Expected status: integrity_violation
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        staging = torch.empty_like(x)
        out = torch.empty_like(x)
        n = x.numel()

        def grid(meta):
            staging.copy_(F.leaky_relu(x, self.negative_slope))
            return (triton.cdiv(n, meta["BLOCK"]),)

        _copy_kernel[grid](staging, out, n, BLOCK=4096)
        return out
