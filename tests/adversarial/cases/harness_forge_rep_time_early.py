"""Case: D4-forge-reported-time-early
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the parent's wall-clock cross-check, which times only the "rep" round trip
  (D4, D7); the worker's channel reachable from candidate code (E1)
Strategy: an honest but slow kernel; the worker's channel (found through the garbage collector)
  gets an instance-level send. On each timed call the forward first sends its own "rep_done"
  claiming 10 ms (the real call takes ~70 ms; any claim above the parent's estimate, which is
  near zero, passes its cross-check), then does the work; the real "rep_done" is swallowed. The
  parent's round trip ends at the early claim, and the real cost moves into the keep/drop round
  trip that follows, which nobody times.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {"time_on_cpu": true, "timing_reps": 8, "timing_blocks": 2, "timing_rechecks": 3,
  "warmup_ms": 1}
Device: cpu
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
def _leaky_relu_kernel(x_ptr, out_ptr, n_elements, negative_slope, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.where(x >= 0, x, x * negative_slope), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _STATE["timing"] and _STATE["send"] is not None:
            _STATE["send"]("rep_done", {"ms": 10.0, "host_ms": 10.0})
            _STATE["swallow"] += 1
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _leaky_relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, self.negative_slope, BLOCK=4096)
        return out
