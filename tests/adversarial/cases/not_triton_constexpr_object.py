"""Case: A1-constexpr-object
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: a plain Python object passed as a tl.constexpr argument: the interpreted kernel
  calls its method as Python
Strategy: the object's method computes F.leaky_relu on tensors it captured and writes the output;
  the kernel body only calls the method
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


class _Work:
    def __init__(self, x, out, slope):
        self.x, self.out, self.slope = x, out, slope

    def run(self, value):
        self.out.copy_(F.leaky_relu(self.x, self.slope))
        return value

    def __hash__(self):
        return 0

    def __eq__(self, other):
        return True


@triton.jit
def _kernel(x_ptr, n, WORK: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    WORK.run(x)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        _kernel[(1,)](x, n, WORK=_Work(x, out, self.negative_slope), BLOCK=64)
        return out
