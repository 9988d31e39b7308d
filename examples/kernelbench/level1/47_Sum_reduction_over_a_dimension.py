"""Triton solution for KernelBench level1/47_Sum_reduction_over_a_dimension: sum over one dim, keepdim.

The input is viewed as (outer, reduced, inner); each program sums one outer index over a block of
inner columns, walking the reduced dimension in blocks (fp32 accumulation).
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _sum_kernel(x_ptr, out_ptr, n_reduce, n_inner, BLOCK_R: tl.constexpr, BLOCK_I: tl.constexpr):
    outer = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    rows = tl.arange(0, BLOCK_R)
    base = x_ptr + outer * n_reduce * n_inner
    acc = tl.zeros([BLOCK_I], tl.float32)
    for start in range(0, n_reduce, BLOCK_R):
        r = start + rows
        block = tl.load(base + r[:, None] * n_inner + cols[None, :],
                        mask=(r[:, None] < n_reduce) & (cols[None, :] < n_inner), other=0.0)
        acc += tl.sum(block, axis=0)
    tl.store(out_ptr + outer * n_inner + cols, acc, mask=cols < n_inner)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        outer = math.prod(x.shape[:dim])
        n_reduce = x.shape[dim]
        n_inner = math.prod(x.shape[dim + 1:])
        out_shape = list(x.shape)
        out_shape[dim] = 1
        out = torch.empty(out_shape, device=x.device, dtype=x.dtype)
        grid = (outer, triton.cdiv(n_inner, 128))
        _sum_kernel[grid](x, out, n_reduce, n_inner, BLOCK_R=32, BLOCK_I=128)
        return out
