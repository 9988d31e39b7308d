"""Triton solution for builtin/15_cumsum: inclusive scan along the last dimension, chunked with a carry."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cumsum_rows_kernel(x_ptr, out_ptr, n_rows, n_cols, stride_x_row, stride_out_row,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    row_mask = rows < n_rows
    carry = tl.zeros([BLOCK_M], dtype=tl.float32)
    for c0 in range(0, n_cols, BLOCK_N):
        cols = c0 + tl.arange(0, BLOCK_N)
        mask = row_mask[:, None] & (cols[None, :] < n_cols)
        x = tl.load(x_ptr + rows[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0)
        y = tl.cumsum(x, axis=1) + carry[:, None]
        tl.store(out_ptr + rows[:, None] * stride_out_row + cols[None, :], y, mask=mask)
        # The next chunk's carry is this chunk's last scanned column (masked columns loaded 0).
        # Not `carry += tl.sum(x, axis=1)`: a reduction of the scanned tile accumulated into a
        # loop-carried value crashed Triton 3.6's TritonGPUOptimizeThreadLocality pass on an H100.
        carry = tl.sum(tl.where(tl.arange(0, BLOCK_N)[None, :] == BLOCK_N - 1, y, 0.0), axis=1)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # This kernel scans the last dimension, which is what the problem asks for (dim=1 of 2-D).
        assert self.dim % x.dim() == x.dim() - 1, "this solution scans the last dimension only"
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        n_rows = x2.shape[0]
        out = torch.empty_like(x)
        out2 = out.view(n_rows, n_cols)
        block_n = min(512, triton.next_power_of_2(n_cols))
        block_m = 8
        grid = (triton.cdiv(n_rows, block_m),)
        _cumsum_rows_kernel[grid](x2, out2, n_rows, n_cols, x2.stride(0), out2.stride(0),
                                  BLOCK_M=block_m, BLOCK_N=block_n)
        return out
