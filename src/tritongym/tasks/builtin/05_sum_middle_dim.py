"""Sum reduction over a middle dimension: for a float32 input x of shape
(BATCH, REDUCE, COLS) the model returns x.sum(dim=1), of shape (BATCH, COLS). The reduced
dimension is strided in memory (stride COLS), so each output element sums REDUCE values that
are COLS elements apart."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim)


BATCH = 16
REDUCE = 129
COLS = 200
REDUCE_DIM = 1


def get_inputs():
    return [torch.randn(BATCH, REDUCE, COLS)]


def get_init_inputs():
    return [REDUCE_DIM]
