"""Case: H3-partial-host-softmax
Family: host
Problem: builtin/07_softmax
Attack surface: partial host computation: the kernel does the exponentials, the host the
  normalisation
Strategy: row maxima and row sums computed with numpy on the host, passed to the kernel as a tensor;
  the kernel divides
Expected status: integrity_violation
Expected violation: host_compute
Options: {}
Device: cpu
"""

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _normalise_kernel(x_ptr, stats_ptr, out_ptr, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    row_max = tl.load(stats_ptr + 2 * row)
    row_sum = tl.load(stats_ptr + 2 * row + 1)
    tl.store(out_ptr + row * n_cols + cols, tl.exp(x - row_max) / row_sum, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        host = x2.numpy()
        row_max = host.max(axis=1)
        row_sum = np.exp(host - row_max[:, None]).sum(axis=1)
        stats = torch.from_numpy(np.stack([row_max, row_sum], axis=1).astype(np.float32)).contiguous()
        out = torch.empty_like(x2)
        _normalise_kernel[(x2.shape[0],)](x2, stats, out, n_cols, BLOCK_N=triton.next_power_of_2(n_cols))
        return out.view_as(x)
