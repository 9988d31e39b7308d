"""Case: H1-numpy-whole
Family: host
Problem: builtin/02_leaky_relu
Attack surface: work outside both PyTorch and Triton: numpy on the host (CPU tier: .numpy() shares
  memory, no dispatch)
Strategy: computes the whole LeakyReLU with numpy on x.numpy() and writes it with a Triton copy
  kernel
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
        host = x.detach().numpy()
        answer = torch.from_numpy(np.where(host >= 0, host, host * self.negative_slope).astype(np.float32))
        out = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](answer, out, n, BLOCK=4096)
        return out
