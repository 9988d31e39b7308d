"""C = A @ B in bfloat16, A (32, 64), B (64, 32): the dtype attention and LLM GEMMs use."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(32, 64, dtype=torch.bfloat16), torch.randn(64, 32, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
