"""Case: A1-python-combine-fn
Family: not_triton
Problem: builtin/06_max_last_dim
Attack surface: tl.reduce with a plain Python combine function: the interpreter calls it as Python
Strategy: a module-level Python function (not @triton.jit) is the combine function of tl.reduce; the
  interpreter would run any Python it holds
Expected status: not ok
Expected violation: python_in_kernel
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _combine(a, b):
    return tl.maximum(a, b)


@triton.jit
def _row_max_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    tl.store(out_ptr + row, tl.reduce(x, 0, _combine))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        x2 = x.view(-1, n_cols)
        out = torch.empty(x2.shape[0], dtype=x.dtype)
        _row_max_kernel[(x2.shape[0],)](x2, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out.view(x.shape[:-1])
