"""Case: G5-rewritten-loss
Family: not_triton
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 43 family 5: a loss rewritten without the reference's ops passes a rule
  that compares op names and costs with the reference's
Strategy: smooth L1 spelled with abs, where and mean in torch (logged); a kernel copies the scalar
Expected status: not ok
Expected violation: pytorch_fallback
Options: {}
Device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(src_ptr, out_ptr):
    tl.store(out_ptr, tl.load(src_ptr))


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, predictions, targets):
        d = (predictions - targets).abs()
        loss = torch.where(d < 1.0, 0.5 * d * d, d - 0.5).mean()
        out = torch.empty((), dtype=predictions.dtype)
        _copy_kernel[(1,)](loss, out)
        return out
