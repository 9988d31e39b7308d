"""relu(x) + 1 for a float32 x of shape (8, 125)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1.0


def get_inputs():
    return [torch.randn(8, 125)]


def get_init_inputs():
    return []
