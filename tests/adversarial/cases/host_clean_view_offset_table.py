"""Case: G3-view-offset-table
Family: host
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 43 family 3: fields of a tensor reference other than its values (an
  offset into a constant table made in __init__) chosen on the host
Strategy: the loss computed with the modes paused picks an element of a fine table of candidate
  losses (model state); a view of that one element, made with the modes paused, goes to a copy
  kernel: the log shows only a state buffer and a view offset
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.utils._python_dispatch as _pd
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr):
    tl.store(out_ptr, tl.load(src_ptr))


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()
        self.register_buffer("table", torch.arange(0, 1 << 20, dtype=torch.float32) / 65536.0)

    def forward(self, predictions, targets):
        with _pd._disable_current_modes():
            loss = float(torch.nn.functional.smooth_l1_loss(predictions, targets))
            pick = self.table[min(int(round(loss * 65536.0)), self.table.numel() - 1):][:1]
        out = torch.empty((), dtype=predictions.dtype)
        _copy_kernel[(1,)](pick, out)
        return out
