"""Case: B9-uninitialised-output
Family: semantic
Problem: builtin/02_leaky_relu
Attack surface: stale memory (B9; KernelBench result_reuse, Sakana TriLower): torch.empty may
  hand out a freed block that still holds an expected output when the reference runs in the
  same process
Strategy: passes a torch.empty_like output to a kernel that never stores into it and returns
  it, hoping the allocator recycled the block of a reference output (here the reference runs in
  another process, so only the candidate's own stale data can be there).
Expected status: incorrect
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _touch_kernel[(1,)](x, out, x.numel(), BLOCK=1024)
        return out
