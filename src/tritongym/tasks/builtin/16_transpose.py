"""Batched transpose copy: for a float32 input x of shape (BATCH, M, N) the model returns
x.transpose(1, 2).contiguous(), a new contiguous tensor of shape (BATCH, N, M) with
out[b, j, i] = x[b, i, j]."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2).contiguous()


BATCH = 8
M = 129
N = 200


def get_inputs():
    return [torch.randn(BATCH, M, N)]


def get_init_inputs():
    return []
