"""Case: D2-background-thread-plain
Family: caching
Problem: builtin/02_leaky_relu
Attack surface: the static gate (threading is forbidden vocabulary) (D2)
Strategy: the same thread trick with a plain "import threading": forward returns while a thread
  still runs the kernel into the output.
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {}
Device: cpu
"""

import threading

import torch
import torch.nn as nn
import triton
import triton.language as tl


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

        def work():
            _leaky_relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, self.negative_slope, BLOCK=1024)

        threading.Thread(target=work, daemon=True).start()
        return out
