"""Triton solution for builtin/13_cross_entropy: per-row logsumexp - target logit, then a mean.

Targets are assumed to lie in [0, CLASSES) (the problem never draws ignore_index = -100).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cross_entropy_rows_kernel(logits_ptr, targets_ptr, row_loss_ptr, n_rows, n_cols, stride_row,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # One tile holds BLOCK_M whole rows (BLOCK_N >= n_cols).
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols[None, :] < n_cols)
    x = tl.load(logits_ptr + rows[:, None] * stride_row + cols[None, :], mask=mask, other=float("-inf"))
    row_max = tl.max(x, axis=1)
    row_max = tl.where(row_mask, row_max, 0.0)
    sum_exp = tl.sum(tl.exp(x - row_max[:, None]), axis=1)
    sum_exp = tl.where(row_mask, sum_exp, 1.0)
    lse = row_max + tl.log(sum_exp)
    tgt = tl.load(targets_ptr + rows, mask=row_mask, other=0)
    hit = (cols[None, :] == tgt[:, None]) & mask
    tgt_logit = tl.sum(tl.where(hit, x, 0.0), axis=1)
    tl.store(row_loss_ptr + rows, lse - tgt_logit, mask=row_mask)


@triton.jit
def _mean_kernel(values_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # A single program: deterministic summation order.
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(values_ptr + offs, mask=offs < n, other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr, total / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = logits.contiguous()
        targets = targets.contiguous()
        n_rows, n_cols = logits.shape
        row_loss = torch.empty((n_rows,), device=logits.device, dtype=logits.dtype)
        out = torch.empty((), device=logits.device, dtype=logits.dtype)
        block_n = triton.next_power_of_2(n_cols)
        block_m = max(1, min(16, 4096 // block_n))
        grid = (triton.cdiv(n_rows, block_m),)
        _cross_entropy_rows_kernel[grid](logits, targets, row_loss, n_rows, n_cols, logits.stride(0),
                                         BLOCK_M=block_m, BLOCK_N=block_n)
        _mean_kernel[(1,)](row_loss, out, n_rows, BLOCK=1024)
        return out
