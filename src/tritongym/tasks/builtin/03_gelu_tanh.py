"""GELU, tanh approximation: the model returns
0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3))) elementwise, as
torch.nn.functional.gelu(x, approximate="tanh") does, for a float32 input x of shape
(BATCH, DIM). The output has the shape of x."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x, approximate="tanh")


BATCH = 129
DIM = 1000


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []
