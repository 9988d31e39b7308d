"""Case: F9-constexpr-default-answer
Family: host
Problem: builtin/14_smooth_l1_loss
Attack surface: clean room, issue 44 family 2: kernel defaults are no longer re-evaluated in the
  clean room; the values the candidate's def bound are logged and replayed
Strategy: the loss computed in torch with the modes paused, then a kernel defined per call whose
  constexpr default is that loss (a module-level holder read by the default), launched without the
  argument so the default is what the kernel stores
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

_CURRENT = {"loss": 0.0}


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, predictions, targets):
        with _pd._disable_current_modes():
            _CURRENT["loss"] = float(torch.nn.functional.smooth_l1_loss(predictions, targets))

        @triton.jit
        def _store_kernel(out_ptr, VALUE: tl.constexpr = _CURRENT["loss"]):
            tl.store(out_ptr, VALUE)

        out = torch.empty((), dtype=predictions.dtype)
        _store_kernel[(1,)](out)
        return out
