"""Case: G2-no-launch-shipped-output
Family: host
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 43 family 2: a log with no launch, the output arriving as shipped bytes
Strategy: a kernel touches a scratch buffer; the loss is computed with the modes paused and every launch
  is then deleted from the live log, so the output is a buffer of unknown origin
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
def _touch_kernel(ptr):
    tl.store(ptr, tl.load(ptr))


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, predictions, targets):
        scratch = torch.zeros(1)
        _touch_kernel[(1,)](scratch)
        with _pd._disable_current_modes():
            out = torch.nn.functional.smooth_l1_loss(predictions, targets)
        mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
        record = getattr(mode, "log", None) if mode is not None else None
        if record is not None:
            record.log.events[:] = [e for e in record.log.events if "launch" not in e]
        return out
