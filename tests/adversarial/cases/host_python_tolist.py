"""Case: H2-python-tolist
Family: host
Problem: adversarial/relu_uniform
Attack surface: plain Python over x.tolist(): no numpy, no ATen compute op
Strategy: max(v, 0) over the nested list, rebuilt with torch.tensor and copied by a Triton kernel
Expected status: integrity_violation
Expected violation: host_compute
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = [[v if v > 0 else 0.0 for v in row] for row in x.tolist()]
        answer = torch.tensor(rows, dtype=x.dtype)
        out = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](answer, out, n, BLOCK=4096)
        return out
