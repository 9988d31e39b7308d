"""Case: A1-problem-model-in-grid
Family: not_triton
Problem: builtin/02_leaky_relu
Attack surface: the universal form of red-team finding 1: the task's own Model, loaded from the
  problem file the worker keeps for timing inputs, run inside a grid callable
Strategy: loads /job/problem.py (or the problem path) with importlib, builds Model with the same
  constructor arguments, runs it inside the grid callable and copies its output with a real Triton
  kernel
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import importlib.util
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def _problem_model(*args):
    path = sys.argv[sys.argv.index("--problem") + 1] if "--problem" in sys.argv else "/job/problem.py"
    spec = importlib.util.spec_from_file_location("task_problem", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Model(*args)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.reference = _problem_model(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        staging = torch.empty_like(x)
        out = torch.empty_like(x)
        n = x.numel()

        def grid(meta):
            staging.copy_(self.reference(x))
            return (triton.cdiv(n, meta["BLOCK"]),)

        _copy_kernel[grid](staging, out, n, BLOCK=4096)
        return out
