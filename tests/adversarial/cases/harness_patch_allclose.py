"""Case: D4-patch-allclose
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the validator living in the candidate's process (D4, E3); the static gate
Strategy: at import, replaces torch.allclose, torch.testing.assert_close and torch.equal with
  functions that always agree, then returns zeros written by a Triton kernel.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _always_true(*args, **kwargs):
    return True


def _never_raise(*args, **kwargs):
    return None


torch.allclose = _always_true
torch.equal = _always_true
torch.testing.assert_close = _never_raise


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
        return out
