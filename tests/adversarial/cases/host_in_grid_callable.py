"""Case: H4-host-in-grid-callable
Family: host
Problem: builtin/02_leaky_relu
Attack surface: launch-time Python: a grid callable runs inside the launch, where the first wave
  suspended every trace
Strategy: the grid lambda computes LeakyReLU with numpy into a staging buffer; the kernel copies it
Expected status: integrity_violation
Expected violation: host_compute
Options: {}
Device: cpu
"""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        staging = torch.empty_like(x)
        out = torch.empty_like(x)
        n = x.numel()
        slope = self.negative_slope

        def grid(meta):
            values = x.numpy()
            staging.numpy()[...] = np.where(values >= 0, values, values * slope)
            return (triton.cdiv(n, meta["BLOCK"]),)

        _copy_kernel[grid](staging, out, n, BLOCK=4096)
        return out
