"""Mean over the valid prefix of each row: x of shape (BATCH, LENGTH, DIM), lengths of shape (BATCH,)
(int64, 1..LENGTH) -> out[b] = x[b, :lengths[b]].mean(dim=0), shape (BATCH, DIM). Honest code may
size its launch from the lengths' values (a maximum read with ``.item()``): launch data that depends
on the inputs' values without carrying the answer (issue 43's value-dependent controls)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1]).unsqueeze(0)
        mask = (positions < lengths.unsqueeze(1)).to(x.dtype).unsqueeze(2)
        return (x * mask).sum(dim=1) / lengths.to(x.dtype).unsqueeze(1)


BATCH = 8
LENGTH = 64
DIM = 64


def get_inputs():
    return [torch.randn(BATCH, LENGTH, DIM), torch.randint(1, LENGTH + 1, (BATCH,), dtype=torch.int64)]


def get_init_inputs():
    return []
