"""An attack: the candidate's own exec of text, reached by a computed name (the static gate cannot
see it; the run-time policy must refuse it)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_run = getattr(len.__self__, "ex" + "ec")


@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(y_ptr + offsets, tl.maximum(tl.load(x_ptr + offsets, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scope = {"x": x, "torch": torch}
        _run("y = torch.relu(x)", scope)
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x.contiguous(), y, x.numel(), BLOCK=1024)
        return scope["y"]
