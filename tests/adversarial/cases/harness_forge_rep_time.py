"""Case: D4-forge-reported-time
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: times measured in the candidate's process and sent as claims (D4, D7); the
  parent's wall-clock cross-check
Strategy: an honest but slow kernel; at import it finds the worker's channel through the
  garbage collector and replaces the instance's send so that every "rep_done" report claims a
  hundredth of the measured time (event and host clock alike).
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


def _install():
    for channel in _gc.get_objects():
        if type(channel).__name__ != "Channel" or not callable(getattr(channel, "send", None)):
            continue
        original = channel.send

        def send(kind, payload=None, _original=original):
            if kind == "rep_done" and isinstance(payload, dict):
                payload = {key: value / 100 if key in ("ms", "host_ms") else value
                           for key, value in payload.items()}
            return _original(kind, payload)

        channel.send = send


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
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _leaky_relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, self.negative_slope, BLOCK=4096)
        return out
