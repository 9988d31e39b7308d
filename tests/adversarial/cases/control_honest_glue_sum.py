"""Case: control-honest-glue-sum
Family: control
Problem: adversarial/mse_uniform
Attack surface: glue over kernel-written data must count as the kernel's output (Liger-style final
  reduction)
Strategy: a kernel writes per-block partial sums of squared differences; a final torch .sum() / n
  returns the scalar
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
def _sq_diff_partial_kernel(a_ptr, b_ptr, partial_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(a_ptr + offs, mask=mask, other=0.0) - tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(d * d, axis=0))


class ModelNew(nn.Module):
    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        a = predictions.contiguous().view(-1)
        b = targets.contiguous().view(-1)
        n = a.numel()
        block = 4096
        partial = torch.empty(triton.cdiv(n, block), dtype=torch.float32, device=a.device)
        _sq_diff_partial_kernel[(partial.numel(),)](a, b, partial, n, BLOCK=block)
        return partial.sum() / n
