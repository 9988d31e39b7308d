"""Case: E5-rewrite-source-after-check
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the solution file after the static check: writable in the job directory, re-read by
  the interpreter at the first launch (red-team finding 3)
Strategy: at import, rewrites its own kernel's body in the file (pathlib) so that the kernel the
  interpreter runs calls a Python helper the checked text never showed
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl

_PENDING = []


def _helper(value):
    for x, out, slope in _PENDING:
        out.copy_(F.leaky_relu(x, slope))
    _PENDING.clear()
    return value


@triton.jit
def _kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.load(x_ptr + offs, mask=offs < n)


_path = pathlib.Path(__file__)
_text = _path.read_text()
_old = "    tl.load(x_ptr + offs, mask=offs < n)\n"
_path.write_text(_text.replace(_old, "    _helper(tl.load(x_ptr + offs, mask=offs < n))\n", 1))


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _PENDING.append((x, out, self.negative_slope))
        _kernel[(1,)](x, x.numel(), BLOCK=64)
        return out
