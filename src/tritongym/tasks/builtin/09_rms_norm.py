"""RMS normalisation with a learned gain: for a float32 input x of shape (ROWS, HIDDEN) the
model returns x * rsqrt(mean(x**2, dim=-1) + eps) * weight, where weight is an nn.Parameter of
shape (HIDDEN,) initialised to 1 + 0.5 * torch.randn(HIDDEN). The output has shape
(ROWS, HIDDEN)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms_inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms_inv * self.weight


ROWS = 150
HIDDEN = 513
EPS = 1e-6


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, EPS]
