"""Case: A4-partial-triton-matmul-in-torch
Family: not_triton
Problem: builtin/12_linear_gelu
Attack surface: "lazy optimisation" (A4): the heavy op stays in PyTorch while Triton does a
  trivial epilogue; the fallback check only fires when *every* reference op runs in PyTorch
Strategy: computes x @ W.T + b with torch.nn.functional.linear (the whole GEMM, all the FLOPs)
  and applies only the GELU in a Triton kernel that writes the output.
Expected status: integrity_violation
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _gelu_kernel(v_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    v = tl.load(v_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = F.linear(x, self.linear.weight, self.linear.bias).contiguous()
        out = torch.empty_like(v)
        _gelu_kernel[(triton.cdiv(v.numel(), 4096),)](v, out, v.numel(), BLOCK=4096)
        return out
