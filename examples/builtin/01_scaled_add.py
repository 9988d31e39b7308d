"""Triton solution for builtin/01_scaled_add: alpha * x + beta * y with y broadcast over rows."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scaled_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, n_cols, alpha, beta, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    # y is a row vector: element (i, j) of the broadcast reads y[j].
    y = tl.load(y_ptr + offs % n_cols, mask=mask, other=0.0)
    tl.store(out_ptr + offs, alpha * x + beta * y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = y.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        block = 2048
        grid = (triton.cdiv(n_elements, block),)
        _scaled_add_kernel[grid](x, y, out, n_elements, y.numel(), float(self.alpha), float(self.beta),
                                 BLOCK=block)
        return out
