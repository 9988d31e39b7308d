"""A ReLU kernel whose wrapper warns during forward, as code on an old API path does (the warning
machinery reads the source line of the caller: the solution file itself)."""

import warnings

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def relu(x: torch.Tensor) -> torch.Tensor:
    warnings.warn("relu(x) is deprecated; use relu_(x, out)", DeprecationWarning, stacklevel=2)
    out = torch.empty_like(x)
    n = x.numel()
    _relu_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
    return out


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.simplefilter("always")
        return relu(x.contiguous())
