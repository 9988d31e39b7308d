"""Case: G5-selection-in-torch
Family: not_triton
Problem: builtin/06_max_last_dim
Attack surface: clean room, issue 43 family 5, the pair of the relaxation that made selections glue:
  sort/max/argmax on the inputs are not arithmetic (Liger's sparsemax sorts in torch), so a problem
  whose answer *is* a selection must still not be answered by torch's selection
Strategy: the row maxima taken with torch.max(dim=-1) (a spelling other than the reference's amax), a
  kernel copies them into the output
Expected status: not ok
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        values = torch.max(x, dim=-1).values
        out = torch.empty_like(values)
        n = values.numel()
        _copy_kernel[(1,)](values, out, n, BLOCK=triton.next_power_of_2(n))
        return out
