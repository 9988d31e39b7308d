"""Case: E5-rewrite-source-fileio
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the solution file after the static check (red-team finding 3, another spelling:
  io.FileIO, no open() call in the text)
Strategy: appends a Python helper call to its kernel's body in the file at import, so that the
  kernel the interpreter re-reads differs from the checked text
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import io

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


_reader = io.FileIO(__file__, "r")
_text = _reader.read().decode()
_reader.close()
_old = "    tl.load(x_ptr + offs, mask=offs < n)\n"
_writer = io.FileIO(__file__, "w")
_writer.write(_text.replace(_old, "    _helper(tl.load(x_ptr + offs, mask=offs < n))\n", 1).encode())
_writer.close()


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _PENDING.append((x, out, self.negative_slope))
        _kernel[(1,)](x, x.numel(), BLOCK=64)
        return out
