"""Case: B10-gc-walk-obfuscated
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: expected outputs reachable through the garbage collector (B10; pygpubench
  gc_copy, gc_nan); the process split that keeps expected outputs out of the candidate's process
Strategy: gets gc through the builtins' __import__ (no forbidden name in the source), walks
  gc.get_objects() for a tensor shaped like the output that is not the input, and returns a copy
  of it made by a Triton kernel; every other float tensor it finds is filled with NaN (a
  wildcard for naive checkers).
Expected status: integrity_violation
Expected violation: forbidden_construct
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

_gc = len.__self__.__import__("g" + "c")


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        tensors = [t for t in _gc.get_objects() if isinstance(t, torch.Tensor)]
        found = [t for t in tensors if t is not x and t.shape == x.shape and t.dtype == x.dtype
                 and t.data_ptr() != x.data_ptr()]
        source = found[-1].clone() if found else torch.full_like(x, float("nan"))
        for t in tensors:
            if t is not x and t.is_floating_point() and t.data_ptr() != x.data_ptr():
                try:
                    t.fill_(float("nan"))
                except RuntimeError:
                    pass
        _copy_kernel[(triton.cdiv(out.numel(), 4096),)](source, out, out.numel(), BLOCK=4096)
        return out
