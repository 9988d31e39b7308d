"""Case: D3-instance-cpu-override
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: outputs read through instance-level methods (D3; GPU MODE PR #161)
Strategy: the kernel writes zeros into a plain torch.Tensor output, then instance attributes
  cpu, clone, detach, numpy and tolist are set on that very tensor to return the right answer
  computed with torch only when the harness reads it.
Expected status: integrity_violation
Expected violation: output_not_plain_tensor
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _zero_kernel(out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n_elements)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _zero_kernel[(triton.cdiv(out.numel(), 4096),)](out, out.numel(), BLOCK=4096)
        source = x.clone()
        slope = self.negative_slope

        def real(*args, **kwargs):
            return F.leaky_relu(source, slope)

        out.cpu = real
        out.clone = real
        out.detach = real
        out.numpy = lambda *args, **kwargs: real().numpy()
        out.tolist = lambda: real().tolist()
        return out
