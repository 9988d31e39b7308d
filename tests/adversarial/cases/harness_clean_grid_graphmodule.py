"""Case: F1-grid-graphmodule
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: clean room: PyTorch work inside a grid callable whose frames are code torch
  generated (torch.fx GraphModule), so attribution credits Triton
Strategy: a grid lambda calls a traced GraphModule that writes leaky_relu(x) into the output with
  torch; the launched kernel only copies into a scratch buffer
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
def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)


class _Leaky(nn.Module):
    def forward(self, x, out, slope):
        return out.copy_(torch.nn.functional.leaky_relu(x, slope))


_graph = torch.fx.symbolic_trace(_Leaky())


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        out = torch.empty_like(x)
        scratch = torch.empty_like(x)
        n = x.numel()

        def grid(meta):
            _graph(x, out, self.negative_slope)
            return (triton.cdiv(n, meta["BLOCK"]),)

        _copy_kernel[grid](x, scratch, n, BLOCK=1024)
        return out
