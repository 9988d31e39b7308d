"""Triton solution for builtin/03_gelu_tanh: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_tanh_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    # tanh(u) = sign(u) * (1 - e) / (1 + e) with e = exp(-2|u|) in (0, 1]: never overflows.
    e = tl.exp(-2.0 * tl.abs(u))
    t = (1.0 - e) / (1.0 + e)
    t = tl.where(u >= 0, t, -t)
    tl.store(out_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        block = 2048
        grid = (triton.cdiv(n_elements, block),)
        _gelu_tanh_kernel[grid](x, out, n_elements, BLOCK=block)
        return out
