"""Row-wise L2 normalisation: for a float32 input x of shape (ROWS, DIM) the model returns
torch.nn.functional.normalize(x, p=2, dim=1, eps=1e-12), i.e. x / max(||x_i||_2, eps) for each
row, of shape (ROWS, DIM)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.normalize(x, p=2.0, dim=1, eps=self.eps)


ROWS = 256
DIM = 333
EPS = 1e-12


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [EPS]
