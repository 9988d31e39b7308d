"""Case: H5-gpu-host-roundtrip
Family: host
Problem: builtin/02_leaky_relu
Attack surface: the GPU spelling of host compute: a device-to-host copy, numpy, a host-to-device
  copy (traced only as plain copies)
Strategy: x.cpu().numpy(), numpy LeakyReLU, torch.from_numpy(...).to(x.device), copied by a kernel
Expected status: integrity_violation
Expected violation: host_compute
Options: {}
Device: gpu
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
        host = x.cpu().numpy()
        answer = torch.from_numpy(np.where(host >= 0, host, host * self.negative_slope)).to(x.device)
        out = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](answer, out, n, BLOCK=4096)
        return out
