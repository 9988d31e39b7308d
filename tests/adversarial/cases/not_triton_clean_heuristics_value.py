"""Case: F1-heuristics-value
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: clean room: PyTorch work in a @triton.heuristics value callable
Strategy: the heuristic computing BLOCK also writes the answer with torch into the output; the
  kernel writes a scratch buffer
Expected status: integrity_violation
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_STATE = {}


def _block(args):
    _STATE["out"].copy_(torch.where(args["x_ptr"] >= 0, args["x_ptr"], args["x_ptr"] * _STATE["slope"]))
    return 1024


@triton.heuristics({"BLOCK": _block})
@triton.jit
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        scratch = torch.empty_like(x)
        _STATE.update(out=out, slope=self.negative_slope)
        _copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, scratch, x.numel())
        return out
