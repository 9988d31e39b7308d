"""Case: A1-untraced-fallback
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: the ATen dispatch trace, which lives in the candidate's process (A1, E3)
Strategy: runs torch.nn.functional.leaky_relu inside torch's own "disable the current dispatch
  modes" context, so the op trace never sees it, then copies the result into the output with a
  Triton copy kernel. Uses no forbidden vocabulary: no import beyond torch and triton.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._python_dispatch as dispatch
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with dispatch._disable_current_modes():
            result = F.leaky_relu(x, self.negative_slope).contiguous()
        out = torch.empty_like(result)
        _copy_kernel[(triton.cdiv(out.numel(), 4096),)](result, out, out.numel(), BLOCK=4096)
        return out
