"""Case: A1-torch-in-pre-run-hook
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: a kernel's pre-run hook (public Triton API) runs candidate Python inside the launch
Strategy: add_pre_run_hook registers a function that writes F.leaky_relu(x) into the kernel's
  destination argument before the (no-op) kernel runs
Expected status: integrity_violation
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(dst_ptr + offs, mask=mask), mask=mask)


_SLOPE = [0.0]


def _hook(src, dst, *args, **kwargs):
    dst.copy_(F.leaky_relu(src, _SLOPE[0]))


_touch_kernel.add_pre_run_hook(_hook)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        _SLOPE[0] = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        _touch_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
