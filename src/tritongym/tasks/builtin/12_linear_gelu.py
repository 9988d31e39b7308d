"""Linear layer followed by exact GELU: for a float32 input x of shape (BATCH, IN_FEATURES) the
model returns gelu(x @ W.T + b) with the erf form gelu(v) = 0.5 * v * (1 + erf(v / sqrt(2))),
where W (OUT_FEATURES, IN_FEATURES) and b (OUT_FEATURES,) are the parameters of an nn.Linear
with its default initialisation. The output has shape (BATCH, OUT_FEATURES)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(self.linear(x))


BATCH = 129
IN_FEATURES = 190
OUT_FEATURES = 150


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
