"""Case: F5-module-chain-to-builtins
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: clean room: a chain of real attributes from an allowed module (tl.core imports
  Python's builtins) reaches getattr, and through it the interpreter value's raw numpy array
Strategy: the kernel body fetches x.handle.data with tl.core.builtins.getattr and a name built at
  run time (no .handle in the text, no dunder string), and applies leaky_relu's formula in numpy
Expected status: integrity_violation
Expected violation: python_in_kernel
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_kernel(x_ptr, out_ptr, n, slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    raw = tl.core.builtins.getattr(tl.core.builtins.getattr(x, "han" + "dle"), "da" + "ta")
    factor = tl.core.builtins.getattr(tl.core.builtins.getattr(slope, "han" + "dle"), "da" + "ta")
    raw *= (raw >= 0) + (raw < 0) * factor
    tl.store(out_ptr + offs, x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        _leaky_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), self.negative_slope, BLOCK=1024)
        return out
