"""SwiGLU gate: the float32 input x of shape (BATCH, 2 * HIDDEN) is split along the last
dimension into a gate half a = x[:, :HIDDEN] and a value half b = x[:, HIDDEN:], and the model
returns silu(a) * b = a * sigmoid(a) * b, of shape (BATCH, HIDDEN)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x.chunk(2, dim=-1)
        return torch.nn.functional.silu(a) * b


BATCH = 129
HIDDEN = 500


def get_inputs():
    return [torch.randn(BATCH, 2 * HIDDEN)]


def get_init_inputs():
    return []
