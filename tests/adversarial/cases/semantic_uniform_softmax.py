"""Case: B1-uniform-softmax
Family: semantic
Problem: adversarial/softmax_long
Attack surface: a loose tolerance on near-uniform outputs (B1: "a constant passes")
Strategy: a Triton kernel writes 1/COLS everywhere, the softmax of a constant row; every true
  probability is within a factor e of it and far below the tolerance.
Expected status: integrity_violation
Expected violation: trivial_output
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fill_kernel(out_ptr, n_elements, value, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + value, mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _fill_kernel[(triton.cdiv(out.numel(), 8192),)](out, out.numel(), 1.0 / x.shape[-1], BLOCK=8192)
        return out
