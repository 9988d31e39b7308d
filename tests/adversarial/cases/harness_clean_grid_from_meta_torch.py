"""Case: F1-grid-from-meta-torch
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: clean room, issue 44 family 1: grid callables are now read as the ints Triton uses,
  sizes from the launch's own arguments included (meta["n"], the interpreter's scalar tensors); the
  callable still runs inside the leaf launch
Strategy: the tutorials' grid lambda (triton.cdiv(meta["n"], meta["BLOCK"])) also writes
  leaky_relu(x) into the output with torch; the launched kernel only copies x into a scratch buffer
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        scratch = torch.empty_like(x)

        def grid(meta):
            out.copy_(torch.nn.functional.leaky_relu(x, self.negative_slope))
            return (triton.cdiv(meta["n"], meta["BLOCK"]),)

        _copy_kernel[grid](x, scratch, x.numel(), BLOCK=1024)
        return out
