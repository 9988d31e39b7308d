"""Triton solution for builtin/17_l2_normalize: x / max(||x_row||_2, eps) for each row."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _l2_normalize_kernel(x_ptr, out_ptr, n_rows, n_cols, eps, stride_x_row, stride_out_row,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0)
    norm = tl.sqrt(tl.sum(x * x, axis=1))
    denom = tl.maximum(norm, eps)
    tl.store(out_ptr + rows[:, None] * stride_out_row + cols[None, :], x / denom[:, None], mask=mask)


class ModelNew(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, min(16, 4096 // block_n))
        grid = (triton.cdiv(n_rows, block_m),)
        _l2_normalize_kernel[grid](x, out, n_rows, n_cols, float(self.eps), x.stride(0), out.stride(0),
                                   BLOCK_M=block_m, BLOCK_N=block_n)
        return out
