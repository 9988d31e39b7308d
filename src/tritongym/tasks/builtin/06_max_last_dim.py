"""Max reduction over the last dimension: for a float32 input x of shape (ROWS, COLS) the model
returns torch.amax(x, dim=-1), the largest value of each row, of shape (ROWS,)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


ROWS = 300
COLS = 777


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
