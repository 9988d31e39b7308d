"""An attack: dynamo's rand_strided makes the output (a kernel launches, but the answer is random)."""

import torch.nn as nn
import triton
import triton.language as tl
from torch._dynamo.testing import rand_strided


@triton.jit
def touch_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def forward(self, x):
        out = rand_strided(tuple(x.shape), tuple(x.stride()), device=x.device, dtype=x.dtype)
        touch_kernel[(1,)](out, out.numel(), BLOCK=1024)
        return out
