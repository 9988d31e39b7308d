"""Row-wise ascending sort: tl.sort on each row, with a programmatic-dependent-launch wait
(tl.extra.cuda.gdc_wait) behind a constexpr flag that is off, and the row's log2 from Triton's own
helper (triton.language.standard._log2, what tl.sort itself calls) checked with tl.static_assert."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.standard import _log2


@triton.jit
def _sort_rows_kernel(x_ptr, out_ptr, n_rows, N_COLS: tl.constexpr, USE_PDL: tl.constexpr):
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
    LOG_N: tl.constexpr = _log2(N_COLS)
    tl.static_assert(1 << LOG_N == N_COLS)
    row = tl.program_id(0)
    cols = tl.arange(0, N_COLS)
    x = tl.load(x_ptr + row * N_COLS + cols, mask=row < n_rows)
    tl.store(out_ptr + row * N_COLS + cols, tl.sort(x), mask=row < n_rows)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        _sort_rows_kernel[(rows,)](x, out, rows, N_COLS=cols, USE_PDL=False)
        return out
