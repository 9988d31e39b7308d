"""LeakyReLU(0.01) on uniform inputs in [0, 1), KernelBench-style (torch.rand)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)


def get_inputs():
    return [torch.rand(16, 256)]


def get_init_inputs():
    return [0.01]
