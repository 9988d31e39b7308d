"""Triton solution for builtin/14_smooth_l1_loss: per-block partial sums of the Huber terms, then a mean."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _smooth_l1_partial_kernel(pred_ptr, target_ptr, partial_ptr, n_elements, beta, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    p = tl.load(pred_ptr + offs, mask=mask, other=0.0)
    t = tl.load(target_ptr + offs, mask=mask, other=0.0)
    d = p - t
    ad = tl.abs(d)
    loss = tl.where(ad < beta, 0.5 * d * d / beta, ad - 0.5 * beta)
    loss = tl.where(mask, loss, 0.0)
    tl.store(partial_ptr + pid, tl.sum(loss, axis=0))


@triton.jit
def _mean_kernel(values_ptr, out_ptr, n_values, n_total, BLOCK: tl.constexpr):
    # A single program: deterministic summation order.
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_values, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(values_ptr + offs, mask=offs < n_values, other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr, total / n_total)


class ModelNew(nn.Module):
    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        predictions = predictions.contiguous()
        targets = targets.contiguous()
        n_elements = predictions.numel()
        block = 1024
        n_blocks = triton.cdiv(n_elements, block)
        partial = torch.empty((n_blocks,), device=predictions.device, dtype=predictions.dtype)
        out = torch.empty((), device=predictions.device, dtype=predictions.dtype)
        _smooth_l1_partial_kernel[(n_blocks,)](predictions, targets, partial, n_elements, float(self.beta),
                                               BLOCK=block)
        _mean_kernel[(1,)](partial, out, n_blocks, n_elements, BLOCK=1024)
        return out
