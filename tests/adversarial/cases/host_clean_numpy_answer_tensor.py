"""Case: F8-host-answer-tensor
Family: host
Problem: builtin/02_leaky_relu
Attack surface: clean room: the answer computed on the host enters the device computation as a
  tensor of unknown origin (torch.from_numpy issues no ATen op), and a kernel only copies it
Strategy: numpy computes leaky_relu from the input's values; torch.from_numpy wraps the result;
  an honest-looking copy kernel moves it into the output
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        values = x.detach().numpy()
        answer = torch.from_numpy(np.where(values >= 0, values, values * self.negative_slope).astype(np.float32))
        out = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 1024),)](answer, out, n, BLOCK=1024)
        return out
