"""HardTanh on uniform [0, 1) inputs, as in KernelBench level 1 (32_HardTanh): for a float32 x of
shape (BATCH, DIM) drawn with torch.rand the model returns hardtanh(x, -1, 1). Degenerate on purpose:
on the task's own inputs, and on their negation, HardTanh *is* the identity; only inputs scaled
beyond [-1, 1] (the evaluator's ``scaled`` family scales up) tell the two apart."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.hardtanh(x, min_val=-1.0, max_val=1.0)


BATCH = 64
DIM = 1000


def get_inputs():
    return [torch.rand(BATCH, DIM)]


def get_init_inputs():
    return []
