"""Smooth L1 (Huber) loss with mean reduction: for float32 predictions and targets of shape
(BATCH, DIM) the model returns torch.nn.functional.smooth_l1_loss(predictions, targets, beta),
the mean over all elements of 0.5 * d**2 / beta where |d| < beta and |d| - 0.5 * beta elsewhere,
with d = predictions - targets; a float32 scalar (shape ()). Each row of the predictions has its
own random scale (2 * exp(randn)), so both branches are exercised and the loss varies strongly
from one input draw to the next."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, beta: float):
        super().__init__()
        self.beta = beta

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.smooth_l1_loss(predictions, targets, beta=self.beta)


BATCH = 8
DIM = 64
BETA = 1.0


def get_inputs():
    scale = 2.0 * torch.randn(BATCH, 1).exp()
    predictions = torch.randn(BATCH, DIM) * scale
    targets = torch.randn(BATCH, DIM)
    return [predictions, targets]


def get_init_inputs():
    return [BETA]
