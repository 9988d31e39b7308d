"""Case: D7-impossible-replay
Family: timing
Problem: adversarial/relu_large_gpu
Attack surface: timed calls that are not checked (C1, C2) and times below what the hardware
  allows (D7): the physics floor and the recheck of timed outputs
Strategy: honest on checked calls (a dispatch mode is active); on every timed call it returns
  the output of the last honest call without launching anything (a replay keyed by nothing at
  all), so each timed call takes microseconds for a task that must move 512 MiB.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {"timing_reps": 10, "timing_blocks": 2, "timing_rechecks": 3, "warmup_ms": 5}
Device: gpu
"""

import torch
import torch.nn as nn
import torch.utils._python_dispatch as dispatch
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        checked = dispatch._get_current_dispatch_mode() is not None
        if not checked and self.last is not None:
            return self.last
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        self.last = out.clone()
        return out
