"""Triton solution for builtin/06_max_last_dim: torch.amax(x, dim=-1)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_max_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_row,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    acc = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_row + cols[None, :], mask=mask, other=float("-inf"))
        acc = tl.maximum(acc, tl.max(x, axis=1))
    tl.store(out_ptr + rows, acc, mask=row_mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        n_rows = x2.shape[0]
        out = torch.empty(tuple(x.shape[:-1]), device=x.device, dtype=x.dtype)
        block_m = 16
        block_n = min(1024, triton.next_power_of_2(n_cols))
        grid = (triton.cdiv(n_rows, block_m),)
        _row_max_kernel[grid](x2, out, n_rows, n_cols, x2.stride(0), BLOCK_M=block_m, BLOCK_N=block_n)
        return out
