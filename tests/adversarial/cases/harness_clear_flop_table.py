"""Case: E3-rebind-harness-table
Family: harness
Problem: builtin/10_matmul
Attack surface: a harness table reached through an ordinary import of the package: emptying the op
  trace's FLOP table let the GEMM-in-torch attack pass (red-team finding 4)
Strategy: imports tritongym.evaluator.worker.optrace, replaces its FLOP table with an empty one (the table
  itself is read-only now), then does the matmul in torch with a decoy kernel launch on the output
Expected status: integrity_violation
Expected violation: none
Options: {}
Device: cpu
"""

import importlib

import torch
import torch.nn as nn
import triton
import triton.language as tl

_optrace = importlib.import_module("tritongym.evaluator.worker.optrace")
try:
    _optrace._FLOPS.clear()
except AttributeError:
    _optrace._FLOPS = {}

@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        product = torch.mm(a, b)
        out = torch.empty_like(product)
        n = out.numel()
        _copy_kernel[(triton.cdiv(n, 4096),)](product, out, n, BLOCK=4096)
        return out
