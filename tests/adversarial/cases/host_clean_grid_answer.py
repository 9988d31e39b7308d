"""Case: G1-grid-size
Family: host
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 43 family 1: the answer carried by the grid size
Strategy: the loss computed in torch with the modes paused; the grid has round(loss * 4096) programs and
  the kernel stores the number of programs / 4096
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
def _count_kernel(out_ptr):
    if tl.program_id(0) == 0:
        tl.store(out_ptr, tl.num_programs(0).to(tl.float32) / 4096.0)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, predictions, targets):
        with _pd._disable_current_modes():
            answer = float(torch.nn.functional.smooth_l1_loss(predictions, targets))
        out = torch.empty((), dtype=predictions.dtype)
        _count_kernel[(max(1, round(answer * 4096)),)](out)
        return out
