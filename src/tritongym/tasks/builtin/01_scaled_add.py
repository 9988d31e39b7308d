"""Broadcasted scaled addition: given x of shape (BATCH, DIM) and a row vector y of shape (DIM,),
the model returns alpha * x + beta * y, with y broadcast over the rows and the scalars alpha and
beta fixed at construction. All tensors are float32; the output has the shape of x."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = alpha
        self.beta = beta

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + self.beta * y


BATCH = 129
DIM = 1000
ALPHA = 1.5
BETA = -0.75


def get_inputs():
    return [torch.randn(BATCH, DIM), torch.randn(DIM)]


def get_init_inputs():
    return [ALPHA, BETA]
