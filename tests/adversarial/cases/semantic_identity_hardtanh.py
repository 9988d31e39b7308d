"""Case: B2-identity-uniform-hardtanh
Family: semantic
Problem: adversarial/hardtanh_uniform
Attack surface: an input distribution on which HardTanh is the identity, and stays so under negation
  (B2)
Strategy: a Triton copy kernel returns a fresh copy of x (no aliasing), which is exactly
  hardtanh(x) for every input the task generates and for its negation.
Expected status: incorrect
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        _copy_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
        return out
