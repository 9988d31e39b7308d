"""Case: B7-identity-alias
Family: semantic
Problem: adversarial/relu_uniform
Attack surface: output aliasing (B2, B7): the cheapest identity is the input itself
Strategy: launches a no-op kernel on x (so a launch and a kernel-argument output exist) and
  returns x itself.
Expected status: integrity_violation
Expected violation: output_aliases_input
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(x_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _touch_kernel[(1,)](x, x.numel(), BLOCK=1024)
        return x
