"""softmax(gelu(x)) over the rows of a (16, 64) float32 matrix (GELU in its erf form)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.nn.functional.gelu(x), dim=-1)


def get_inputs():
    return [torch.randn(16, 64)]


def get_init_inputs():
    return []
