"""A ReLU exposed as a torch.library.triton_op whose kernel is launched through wrap_triton
(ExecuTorch's and torch.export's way of making a Triton kernel a PyTorch operator)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


@triton_op("tritongym_idioms::relu", mutates_args={})
def relu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    wrap_triton(_relu_kernel)[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
    return out


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu(x.contiguous())
