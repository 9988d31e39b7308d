"""Case: F7-forged-unsupported
Family: semantic
Problem: builtin/02_leaky_relu
Attack surface: statuses: an exception whose text is the interpreter's 'not supported in interpreter
  mode' turns a wrong kernel into unsupported, which KernelGYM maps to a system error that trainers
  drop instead of penalising
Strategy: a kernel that computes the wrong function; forward raises NotImplementedError with the
  interpreter's wording before returning
Expected status: runtime_error
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        raise NotImplementedError("inline_asm_elementwise is not supported in interpreter mode")
