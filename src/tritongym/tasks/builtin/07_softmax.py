"""Row softmax: for a float32 input x of shape (ROWS, COLS) the model returns
torch.softmax(x, dim=-1), i.e. exp(x - max) / sum(exp(x - max)) along each row, of shape
(ROWS, COLS). Rows are kept short (COLS = 65) so that typical probabilities (about 1/65) are not
small next to an absolute tolerance of 1e-2, and an all-zero or uniform output does not pass."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


ROWS = 333
COLS = 65


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
