"""Case: D4-forge-reported-time-early-gpu
Family: timing
Problem: adversarial/relu_large_gpu
Attack surface: the parent's wall-clock cross-check, which times only the "rep" round trip
  (D4, D7), and the physics floor; the worker's channel reachable from candidate code (E1)
Strategy: an honest kernel; the worker's channel (found through the garbage collector) gets an
  instance-level send. On each timed call the forward first sends its own "rep_done" claiming
  0.09 ms (just above the physics floor of this problem on an H100), then launches the kernel;
  the real "rep_done" is swallowed, so the real cost lands in the untimed keep/drop round trip.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {"timing_reps": 10, "timing_blocks": 2, "timing_rechecks": 3, "warmup_ms": 5}
Device: gpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_gc = len.__self__.__import__("g" + "c")
_STATE = {"timing": False, "swallow": 0, "send": None}


def _install():
    for channel in _gc.get_objects():
        if type(channel).__name__ != "Channel" or not callable(getattr(channel, "send", None)):
            continue
        original = channel.send

        def send(kind, payload=None, _original=original):
            if kind == "time_ready":
                _STATE["timing"] = True
            if kind == "rep_done" and _STATE["swallow"]:
                _STATE["swallow"] -= 1
                return 0
            return _original(kind, payload)

        channel.send = send
        _STATE["send"] = original


_install()


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _STATE["timing"] and _STATE["send"] is not None:
            _STATE["send"]("rep_done", {"ms": 0.09, "host_ms": 0.09})
            _STATE["swallow"] += 1
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
