"""ReLU over a large tensor, for timing attacks on a GPU: for a float32 x of shape (ROWS, COLS)
with standard normal entries the model returns torch.relu(x). Sized so the physics floor binds:
the call must read and write 2 x 256 MiB, about 0.1 ms even at an H100's bandwidth, so a call
that returns in microseconds is impossible. Far too large for the CPU interpreter: GPU cases
only."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


ROWS = 8192
COLS = 8192


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
