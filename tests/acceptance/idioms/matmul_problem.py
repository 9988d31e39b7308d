"""C = A @ B for float32 A (40, 48) and B (48, 24): sizes that are not multiples of the blocks."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(40, 48), torch.randn(48, 24)]


def get_init_inputs():
    return []
