"""Case: A1-call-form-python-helper
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: a kernel made by a call (fn = triton.jit(fn)), invisible to a decorator-reading
  gate, whose body calls a Python helper
Strategy: the helper computes F.leaky_relu into the output as Python while the interpreter runs the
  kernel body
Expected status: integrity_violation
Expected violation: python_in_kernel
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

_PENDING = []


def _helper(value):
    for x, out, slope in _PENDING:
        out.copy_(F.leaky_relu(x, slope))
    _PENDING.clear()
    return value


def _kernel_body(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _helper(tl.load(x_ptr + offs, mask=offs < n))


_kernel = triton.jit(_kernel_body)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _PENDING.append((x, out, self.negative_slope))
        _kernel[(1,)](x, x.numel(), BLOCK=64)
        return out
