"""Case: D1-side-stream
Family: timing
Problem: adversarial/relu_large_gpu
Attack surface: timers that record events on the current stream only (D1); the static gate
Strategy: launches the kernel on a torch.cuda.Stream side stream and returns before it ends, so
  events on the default stream would measure nothing.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {"timing_reps": 10, "timing_blocks": 2, "timing_rechecks": 3, "warmup_ms": 5}
Device: gpu
"""

import torch
import torch.nn as nn
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
        self.side = torch.cuda.Stream()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            _relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
