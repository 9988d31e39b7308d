"""Case: E2-os-exit-obfuscated
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: a harness that reads a missing result as success, or exit code 0 as a pass
  (E2); the positive attestation of every stage
Strategy: reaches os._exit through getattr and a built string (no forbidden name in the
  source) and exits with status 0 in the middle of the first forward.
Expected status: crashed
Expected violation: none
Options: {}
Device: cpu
"""

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

_leave = getattr(os, "_ex" + "it")


@triton.jit
def _zero_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _zero_kernel[(triton.cdiv(out.numel(), 4096),)](out, out.numel(), BLOCK=4096)
        _leave(0)
        return out
