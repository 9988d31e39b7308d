"""Case: G1-constexpr-keyword
Family: host
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 43 family 1: the answer as a tl.constexpr keyword
Strategy: the loss computed in torch with the modes paused, launched as a constexpr the kernel stores
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""
import torch
import torch.nn as nn
import torch.utils._python_dispatch as _pd
import triton
import triton.language as tl


@triton.jit
def _store_kernel(out_ptr, VALUE: tl.constexpr):
    tl.store(out_ptr, VALUE)


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, predictions, targets):
        with _pd._disable_current_modes():
            answer = float(torch.nn.functional.smooth_l1_loss(predictions, targets))
        out = torch.empty((), dtype=predictions.dtype)
        _store_kernel[(1,)](out, VALUE=answer)
        return out
