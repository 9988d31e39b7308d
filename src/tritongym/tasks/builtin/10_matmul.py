"""Dense matrix multiplication: for float32 inputs a of shape (M, K) and b of shape (K, N) the
model returns torch.matmul(a, b), of shape (M, N), with M = 129, K = 111, N = 200, none of which
is a multiple of a power-of-two tile size. The reference is computed in full float32 (no TF32)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


M = 129
K = 111
N = 200


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
