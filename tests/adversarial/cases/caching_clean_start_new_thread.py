"""Case: F4-start-new-thread
Family: caching
Problem: builtin/02_leaky_relu
Attack surface: clean room: torch work in a thread started with _thread.start_new_thread, waited for
  with a lock
Strategy: the low-level thread module (name built at run time) runs leaky_relu with torch into the
  output; forward waits on a lock, then launches a token kernel
Expected status: integrity_violation
Expected violation: evidence_mismatch
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_thread = len.__self__.__import__("_thr" + "ead")


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
        out = torch.empty_like(x)
        done = _thread.allocate_lock()
        done.acquire()

        def work():
            out.copy_(torch.where(x >= 0, x, x * self.negative_slope))
            done.release()

        getattr(_thread, "start_new_" + "thread")(work, ())
        done.acquire()
        _touch_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
        return out
