"""Case: F2-erase-live-log
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: clean room: the live trace holds the launch log too; a candidate that erases the ops
  it ran from it hides the PyTorch work from the replay
Strategy: computes leaky_relu with torch, zeroes the trace's counters and deletes every logged op
  from the launch log the trace feeds
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
def _touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.nn.functional.leaky_relu(x, self.negative_slope)
        _touch_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
        mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
        if mode is not None:
            for name in ("compute", "counts"):
                getattr(mode, name).clear()
            mode.compute_elements = 0
            mode.compute_flops = 0
            record = getattr(mode, "log", None)
            if record is not None:
                events = record.log.events
                events[:] = [e for e in events if "launch" in e]
        return out
