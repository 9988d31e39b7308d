"""Case: G5-normal-identity
Family: not_triton
Problem: builtin/16_transpose
Attack surface: clean room, issue 43 family 5: an op random by name but deterministic in effect
  (torch.normal(x, 0.0) returns x bit for bit) was counted as neither compute nor a copy
Strategy: the transpose made by torch.normal(x.transpose(...), 0.0); a kernel touches the result
Expected status: not ok
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(ptr + offs, tl.load(ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        out = torch.normal(x.transpose(-2, -1), 0.0)
        _touch_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
        return out
