"""Cross-entropy loss with mean reduction: for float32 logits of shape (BATCH, CLASSES) and int64
class targets of shape (BATCH,) with values in [0, CLASSES), the model returns
torch.nn.functional.cross_entropy(logits, targets), the mean over rows of
logsumexp(logits[i]) - logits[i, targets[i]], a float32 scalar (shape ()). Each row of the
logits has its own random temperature (3 * exp(randn)), so the loss varies strongly from one
input draw to the next and a constant answer does not pass."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, targets)


BATCH = 32
CLASSES = 129


def get_inputs():
    scale = 3.0 * torch.randn(BATCH, 1).exp()
    logits = torch.randn(BATCH, CLASSES) * scale
    targets = torch.randint(0, CLASSES, (BATCH,), dtype=torch.int64)
    return [logits, targets]


def get_init_inputs():
    return []
