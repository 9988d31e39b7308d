"""Case: F6-tuple-subclass-iter
Family: not_triton
Problem: adversarial/relu_and_double
Attack surface: clean room: an output container whose __iter__ computes the outputs with torch while
  the harness walks it, after tracing stopped
Strategy: forward returns a tuple subclass of two zero-filled tensors a token kernel touched;
  iterating it fills them with relu(x) and 2x computed by torch.
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)


class _Late(tuple):
    def __iter__(self):
        relu, double = tuple.__getitem__(self, 0), tuple.__getitem__(self, 1)
        relu.copy_(torch.relu(self.x))
        double.copy_(self.x * 2)
        return iter((relu, double))


class ModelNew(nn.Module):
    def forward(self, x):
        relu, double = torch.zeros_like(x), torch.zeros_like(x)
        for out in (relu, double):
            _touch_kernel[(triton.cdiv(out.numel(), 1024),)](out, out.numel(), BLOCK=1024)
        late = _Late((relu, double))
        late.x = x
        return late
