"""Triton solution for builtin/09_rms_norm: x * rsqrt(mean(x^2) + eps) * weight over the last dimension."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_rows, n_cols, eps, stride_x_row, stride_out_row,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0)
    mean_sq = tl.sum(x * x, axis=1) / n_cols
    inv_rms = 1.0 / tl.sqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0)
    y = x * inv_rms[:, None] * w[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out_row + cols[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        # Same parameter, created the same way as the reference's.
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        n_rows = x2.shape[0]
        out = torch.empty_like(x)
        out2 = out.view(n_rows, n_cols)
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, min(16, 4096 // block_n))
        grid = (triton.cdiv(n_rows, block_m),)
        _rms_norm_kernel[grid](x2, self.weight, out2, n_rows, n_cols, float(self.eps),
                               x2.stride(0), out2.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
        return out
