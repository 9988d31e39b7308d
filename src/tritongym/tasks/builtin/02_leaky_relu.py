"""LeakyReLU: the model returns where(x >= 0, x, negative_slope * x) for a float32 input x of
shape (BATCH, DIM), with negative_slope fixed at construction. Inputs are standard normal, so
about half of the elements take the negative branch and the identity is far from correct."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


BATCH = 129
DIM = 1000
NEGATIVE_SLOPE = 0.2


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [NEGATIVE_SLOPE]
