"""Batched matrix multiplication: for float32 inputs a of shape (BATCH, M, K) and b of shape
(BATCH, K, N) the model returns torch.bmm(a, b), of shape (BATCH, M, N), with BATCH = 4,
M = 65, K = 100, N = 77. The reference is computed in full float32 (no TF32)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


BATCH = 4
M = 65
K = 100
N = 77


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []
