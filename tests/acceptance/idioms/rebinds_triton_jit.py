"""An attack: triton.jit rebound for real at import (a wrapper around the real decorator, so the
kernels still work and the static gate, which leaves triton.jit assignments to the run time, lets
it through). The worker's identity checks must name it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_real_jit = triton.jit


def _jit(fn=None, **options):
    if fn is None:
        return lambda f: _real_jit(f, **options)
    return _real_jit(fn, **options)


triton.jit = _jit


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
