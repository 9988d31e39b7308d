"""Two outputs: for a float32 x of shape (ROWS, COLS) drawn with torch.randn the model returns the
tuple (torch.relu(x), 2 * x). For attacks on how the harness walks a tuple of outputs."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor):
        return torch.relu(x), 2 * x


ROWS = 64
COLS = 256


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
