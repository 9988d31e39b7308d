"""Row sums of a small batch: x of shape (ROWS, COLS) -> x.sum(dim=1), ROWS = 4 float32 values.
A small output on purpose: every answer fits in a few host values (issue 43, family 1)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


ROWS = 4
COLS = 512


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
