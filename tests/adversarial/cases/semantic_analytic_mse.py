"""Case: B3-analytic-mse
Family: semantic
Problem: adversarial/mse_uniform
Attack surface: a predictable input distribution (B3, the KernelBench "analytical hack")
Strategy: a Triton kernel writes E[(a - b)^2] = 1/6 for independent U(0, 1) inputs, the
  closed-form value of the loss, without reading the inputs.
Expected status: not ok
Expected violation: none
Options: {"num_trials": 3}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _constant_kernel(out_ptr, value):
    tl.store(out_ptr, value)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty((), device=a.device, dtype=a.dtype)
        _constant_kernel[(1,)](out, 1.0 / 6.0)
        return out
