"""ReLU launched with the Triton tutorials' grid: a callable that sizes the grid from the launch's own
arguments (``meta["n_elements"]``), which Triton's CPU interpreter hands it as scalar tensors."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = out.numel()
        grid = lambda meta: (triton.cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),)  # noqa: E731
        _relu_kernel[grid](x, out, n_elements, BLOCK_SIZE=256)
        return out
