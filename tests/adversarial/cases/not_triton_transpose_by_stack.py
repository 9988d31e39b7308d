"""Case: A1-transpose-by-stack
Family: not_triton
Problem: builtin/16_transpose
Attack surface: a problem whose reference only moves data, the transform spelled with compute ops
  (A1)
Strategy: torch.stack of the input's columns builds the transpose with no copy op at all; a
  Triton copy kernel writes it into the output.
Expected status: integrity_violation
Expected violation: pytorch_fallback
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
    def forward(self, x):
        moved = torch.stack([x[:, :, j] for j in range(x.shape[2])], dim=1)
        out = torch.empty_like(moved)
        _copy_kernel[(triton.cdiv(out.numel(), 1024),)](moved, out, out.numel(), BLOCK=1024)
        return out
