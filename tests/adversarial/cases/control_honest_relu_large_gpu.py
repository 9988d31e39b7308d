"""Case: C0-honest-relu-large-gpu
Family: control
Problem: adversarial/relu_large_gpu
Attack surface: none (honest control for the GPU timing cases)
Strategy: an honest elementwise ReLU kernel, timed on the GPU; proves the physics floor and the
  timing checks do not reject honest work on the problem the timing attacks use.
Expected status: ok
Expected violation: none
Options: {"timing_reps": 10, "timing_blocks": 2, "timing_rechecks": 3, "warmup_ms": 5}
Device: gpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
