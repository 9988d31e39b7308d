"""Inclusive prefix sum (scan): for a float32 input x of shape (ROWS, COLS) the model returns
torch.cumsum(x, dim=1), where out[i, j] = x[i, 0] + ... + x[i, j], of shape (ROWS, COLS)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


ROWS = 100
COLS = 333
SCAN_DIM = 1


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [SCAN_DIM]
