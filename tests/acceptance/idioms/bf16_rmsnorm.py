"""RMSNorm on bf16 rows in Hugging Face Llama's order: fp32 statistics, the normalised row cast to the
input dtype, then scaled by the weight and rounded again (two bf16 roundings where the reference
rounds once: within one bf16 ulp, 0.3 % relative, of a reference that ends in bf16)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rmsnorm_bf16_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean_square = tl.sum(x * x, axis=0) / n_cols
    inv_rms = 1.0 / tl.sqrt(mean_square + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    normed = (x * inv_rms).to(tl.bfloat16)  # HF Llama's order: normalise, cast to the input dtype, then scale
    tl.store(y_ptr + row * n_cols + cols, (normed.to(tl.float32) * w).to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int = 1024, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden) + 0.1 * torch.randn(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        rmsnorm_bf16_kernel[(rows,)](x, self.weight, y, cols, self.eps, BLOCK=triton.next_power_of_2(cols))
        return y
