"""Saturation to the float8 e4m3 range with the header an fp8 quantization kernel has: a parameter
annotated with a Triton type (``scale: tl.float32``), a constexpr default computed on the host from a
module-level object (``float8_info.max``, with ``float8_info = torch.finfo(torch.float8_e4m3fn)``), a
helper whose default is used, ``constexpr`` imported bare, and a launched wrapper whose body names no
``tl`` (only its annotations do)."""

import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language import constexpr

float8_info = torch.finfo(torch.float8_e4m3fn)


@triton.jit
def _saturate(x, scale: tl.float32, LIMIT: constexpr = float8_info.max):
    return tl.clamp(x * scale, -LIMIT, LIMIT)


@triton.jit
def _saturate_rows(x_ptr, out_ptr, n_elements, scale, FP8_MAX: tl.constexpr, BLOCK_SIZE: constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.minimum(_saturate(x, scale), FP8_MAX), mask=mask)


# The launched kernel is a wrapper whose body names no `tl`: its annotations alone do.
@triton.jit
def _saturate_kernel(x_ptr, out_ptr, n_elements, scale: tl.float32, FP8_MAX: tl.constexpr = float8_info.max,
                     BLOCK_SIZE: constexpr = 256):
    _saturate_rows(x_ptr, out_ptr, n_elements, scale, FP8_MAX, BLOCK_SIZE)


class ModelNew(nn.Module):
    def __init__(self, scale: float = 2.5):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n_elements = x.numel()
        _saturate_kernel[(triton.cdiv(n_elements, 256),)](x, out, n_elements, self.scale)
        return out
