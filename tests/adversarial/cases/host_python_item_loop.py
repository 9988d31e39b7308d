"""Case: H2-python-item-loop
Family: host
Problem: adversarial/relu_small
Attack surface: element-wise .item() reads (each a legitimate scalar read, together the whole input)
Strategy: reads every element with float(x[i, j]), computes in Python, writes through a numpy view
  of a fresh buffer, copies with a kernel
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
        staging = torch.empty_like(x)
        flat_out = staging.view(-1)
        flat_in = x.reshape(-1)
        for i in range(flat_in.numel()):
            value = flat_in[i].item()
            flat_out[i] = value if value > 0 else 0.0
        out = torch.empty_like(x)
        n = x.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](staging, out, n, BLOCK=4096)
        return out
