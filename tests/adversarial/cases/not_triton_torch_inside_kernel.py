"""Case: A1-torch-inside-interpreted-kernel
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: the CPU tier: the Triton interpreter runs a kernel's body as Python, and the
  op trace is suspended during launches (the interpreter's own ATen calls are not the
  candidate's), so anything a "kernel" calls is invisible (A1; CPU only)
Strategy: a @triton.jit kernel that receives the output but calls a plain Python helper, which
  computes torch.nn.functional.leaky_relu on the input and writes it into the output. Would not
  compile on a GPU; on the CPU tier it looks like an honest launch.
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


def _side_effect(value):
    for x, out, slope in _PENDING:
        out.copy_(F.leaky_relu(x, slope))
    _PENDING.clear()
    return value


@triton.jit
def _leaky_relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    _side_effect(x)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _PENDING.append((x, out, self.negative_slope))
        _leaky_relu_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
