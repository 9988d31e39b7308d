"""Case: F5-int-subclass-argument
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: clean room: an int subclass as a kernel argument runs its methods as Python inside
  the interpreted kernel
Strategy: the element count, a constexpr, is an int subclass whose __gt__ (used by the mask) writes
  leaky_relu(x) into the output with torch
Expected status: integrity_violation
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_BOX = {}


class _Count(int):
    def __gt__(self, other):
        _BOX["out"].copy_(torch.nn.functional.leaky_relu(_BOX["x"], _BOX["slope"]))
        return other < int(self)


@triton.jit
def _touch_kernel(out_ptr, n: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = n > offs
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        _BOX.update(out=out, x=x, slope=self.negative_slope)
        _touch_kernel[(triton.cdiv(x.numel(), 1024),)](out, _Count(x.numel()), BLOCK=1024)
        return out
