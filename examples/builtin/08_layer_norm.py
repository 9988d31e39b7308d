"""Triton solution for builtin/08_layer_norm: LayerNorm over the last dimension with weight and bias."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_rows, n_cols, eps, stride_x_row, stride_out_row,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One tile holds BLOCK_M whole rows (BLOCK_N >= n_cols); two-pass mean and variance.
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    mask = (rows[:, None] < n_rows) & col_mask[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0)
    mean = tl.sum(x, axis=1) / n_cols
    xc = tl.where(mask, x - mean[:, None], 0.0)
    var = tl.sum(xc * xc, axis=1) / n_cols
    rstd = 1.0 / tl.sqrt(var + eps)
    w = tl.load(w_ptr + cols, mask=col_mask, other=0.0)
    b = tl.load(b_ptr + cols, mask=col_mask, other=0.0)
    y = xc * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(out_ptr + rows[:, None] * stride_out_row + cols[None, :], y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        # Same layer and same initialisation order as the reference, so that a shared seed
        # gives identical parameters.
        self.norm = nn.LayerNorm(hidden, eps=eps)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.5)
        nn.init.normal_(self.norm.bias, mean=0.0, std=0.5)

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
        _layer_norm_kernel[grid](x2, self.norm.weight, self.norm.bias, out2, n_rows, n_cols,
                                 float(self.norm.eps), x2.stride(0), out2.stride(0),
                                 BLOCK_M=block_m, BLOCK_N=block_n)
        return out
