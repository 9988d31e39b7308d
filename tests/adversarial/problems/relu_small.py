"""ReLU on a small standard-normal input: for a float32 x of shape (ROWS, COLS) drawn with
torch.randn the model returns torch.relu(x). Small on purpose, for attacks that touch every
element from Python (each element read is a traced call)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


ROWS = 8
COLS = 64


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
