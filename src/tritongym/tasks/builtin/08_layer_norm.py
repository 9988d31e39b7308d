"""Layer normalisation with learned affine parameters: for a float32 input x of shape
(ROWS, HIDDEN) the model returns nn.LayerNorm(HIDDEN, eps=1e-5)(x), i.e.
(x - mean) / sqrt(var + eps) * weight + bias per row with the biased variance, of shape
(ROWS, HIDDEN). The constructor re-initialises weight around 1 and bias around 0 with random
values (torch.nn.init.normal_, in that order) so that the output depends on the parameters."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden, eps=eps)
        nn.init.normal_(self.norm.weight, mean=1.0, std=0.5)
        nn.init.normal_(self.norm.bias, mean=0.0, std=0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


ROWS = 200
HIDDEN = 333
EPS = 1e-5


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, EPS]
