"""Case: B1-zeros-tiny-softmax
Family: semantic
Problem: adversarial/softmax_long
Attack surface: an absolute tolerance larger than every output (KernelBench issue #165)
Strategy: a Triton kernel fills the output with zeros; every softmax probability is below 1e-3,
  so zeros pass atol = 1e-2 on the task's inputs and on every perturbed family.
Expected status: integrity_violation
Expected violation: trivial_output
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _zero_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _zero_kernel[(triton.cdiv(out.numel(), 8192),)](out, out.numel(), BLOCK=8192)
        return out
