"""A ReLU kernel whose launch sits inside a profiler range, as code instrumented for Nsight or the
PyTorch profiler is (``torch.profiler.record_function``: two ``profiler::`` ops, one of which
returns a handle no tensor log can carry)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.profiler import record_function


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with record_function("relu_forward"):
            out = torch.empty_like(x)
            n = x.numel()
            _relu_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
