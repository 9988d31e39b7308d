"""Each row of a float32 (16, 64) tensor sorted ascending (the values)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x, dim=-1).values


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
