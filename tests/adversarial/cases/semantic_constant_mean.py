"""Case: B1-constant-mean
Family: semantic
Problem: adversarial/mean_uniform
Attack surface: a loose absolute tolerance on a near-constant scalar output (B1)
Strategy: a Triton kernel writes the expected value 0.5 of a U(0, 1) mean without reading the
  input; within 1e-2 of the truth on every draw of the task's own inputs.
Expected status: integrity_violation
Expected violation: trivial_output
Options: {"num_trials": 4}
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((), device=x.device, dtype=x.dtype)
        _constant_kernel[(1,)](out, 0.5)
        return out
