"""Case: A1-transpose-copy-into
Family: not_triton
Problem: builtin/16_transpose
Attack surface: a problem whose reference only moves data: copies are not compute ops (A1)
Strategy: Tensor.copy_ from the transposed view into a contiguous buffer (the same transform
  spelled as an in-place copy), then a Triton copy kernel into the output.
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
        staged = torch.empty(x.shape[0], x.shape[2], x.shape[1], dtype=x.dtype, device=x.device)
        staged.copy_(x.transpose(1, 2))
        out = torch.empty_like(staged)
        _copy_kernel[(triton.cdiv(out.numel(), 1024),)](staged, out, out.numel(), BLOCK=1024)
        return out
