"""Case: B8-input-mutation
Family: semantic
Problem: builtin/02_leaky_relu
Attack surface: inputs shared between the candidate and a later check (B8; KernelBench PR #82
  zero-out-inputs kernel)
Strategy: computes the right output, but the kernel also overwrites its input with zeros, so a
  reference computed afterwards on the same tensor (or a second check) would see another problem.
Expected status: integrity_violation
Expected violation: input_mutation
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_relu_clobber_kernel(x_ptr, out_ptr, n_elements, negative_slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * negative_slope), mask=mask)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        _leaky_relu_clobber_kernel[(triton.cdiv(n, 4096),)](x, out, n, self.negative_slope, BLOCK=4096)
        return out
