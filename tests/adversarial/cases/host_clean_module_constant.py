"""Case: G3-module-constant
Family: host
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 43 family 3: module constants captured into the kernel table at a kernel's
  first launch; a fresh kernel per call carries that call's value
Strategy: the loss computed with the modes paused is written to a module global, and a new jit kernel
  object reading that global is made and launched on every call. Each call first launches one with the
  global at -1 into a scratch buffer, so the constant the kernel table holds from the first launch is
  never within tolerance of a loss (a loss is at least 0): without it, a trial whose loss happened to lie
  within 1 % of the first trial's was stopped by the trivial-output check (the replay gave the previous
  trial's value) instead of the replay's mismatch, about 2 runs in 300
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

ANSWER = 0.0


def _store_answer(out_ptr):
    tl.store(out_ptr, ANSWER)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, predictions, targets):
        global ANSWER
        ANSWER = -1.0
        triton.jit(_store_answer)[(1,)](torch.empty((), dtype=predictions.dtype))
        with _pd._disable_current_modes():
            ANSWER = float(torch.nn.functional.smooth_l1_loss(predictions, targets))
        kernel = triton.jit(_store_answer)
        out = torch.empty((), dtype=predictions.dtype)
        kernel[(1,)](out)
        return out
