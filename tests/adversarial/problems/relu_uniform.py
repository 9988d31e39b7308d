"""ReLU on uniform [0, 1) inputs, as in KernelBench level 1: for a float32 x of shape (BATCH, DIM)
drawn with torch.rand the model returns torch.relu(x). Degenerate on purpose: on the task's own
inputs ReLU *is* the identity, so returning a copy of x passes any tolerance there; only
sign-spanning inputs (the evaluator's ``negated`` family) tell the two apart."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


BATCH = 64
DIM = 1000


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
