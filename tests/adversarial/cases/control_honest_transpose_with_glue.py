"""Case: control-honest-transpose-with-glue
Family: control
Problem: builtin/16_transpose
Attack surface: a reference that only moves data: glue copies that do not transform must pass
Strategy: a Triton tile transpose in float64; around it x.contiguous() (a no-op here), a
  same-layout clone (a memcpy, not the transform), an upcast of the input and a downcast of the
  output in PyTorch (dtype moves of the whole tensor, twice: not a layout move, which is what the
  reference's work is), as cautious code does
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
def _transpose_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m, pid_n, pid_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tile = tl.load(x_ptr + pid_b * M * N + offs_m[:, None] * N + offs_n[None, :], mask=mask, other=0.0)
    tl.store(out_ptr + pid_b * M * N + offs_n[None, :] * M + offs_m[:, None], tile, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        wide = x.contiguous().clone().double()
        batch, m, n = wide.shape
        out = torch.empty(batch, n, m, dtype=wide.dtype, device=wide.device)
        _transpose_kernel[(triton.cdiv(m, 32), triton.cdiv(n, 32), batch)](wide, out, m, n, BLOCK_M=32, BLOCK_N=32)
        return out.to(x.dtype)
