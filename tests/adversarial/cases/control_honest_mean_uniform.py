"""Case: C0-honest-mean-uniform
Family: control
Problem: adversarial/mean_uniform
Attack surface: none (honest control for the degenerate uniform-mean problem)
Strategy: an honest two-stage mean (per-block partial sums, then one program sums the partials
  and divides); proves the beat-trivial rule does not reject honest float32 work on a scalar.
Expected status: ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _partial_sum_kernel(x_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


@triton.jit
def _finish_mean_kernel(partial_ptr, out_ptr, n_partials, n_elements, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
    tl.store(out_ptr, tl.sum(p, axis=0) / n_elements)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n = x.numel()
        block = 4096
        n_partials = triton.cdiv(n, block)
        partial = torch.empty(n_partials, device=x.device, dtype=torch.float32)
        out = torch.empty((), device=x.device, dtype=x.dtype)
        _partial_sum_kernel[(n_partials,)](x, partial, n, BLOCK=block)
        _finish_mean_kernel[(1,)](partial, out, n_partials, n, BLOCK=triton.next_power_of_2(n_partials))
        return out
