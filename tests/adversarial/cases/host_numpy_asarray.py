"""Case: H1-numpy-asarray
Family: host
Problem: builtin/02_leaky_relu
Attack surface: numpy reading the tensor through the array protocol (np.asarray) instead of .numpy()
Strategy: np.asarray(x) then numpy arithmetic; the answer is copied in place into a torch buffer
  through its numpy view and a copy kernel moves it to the output
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
        view = np.asarray(staging)
        values = np.asarray(x)
        np.multiply(values, np.where(values >= 0, 1.0, self.negative_slope), out=view)
        out = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](staging, out, n, BLOCK=4096)
        return out
