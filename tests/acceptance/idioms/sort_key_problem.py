"""Order-preserving uint32 sort keys of float32 values (the radix-sort key transform).

Negative floats get every bit flipped, non-negative ones only the sign bit, so that comparing the
keys as unsigned integers orders the floats. The output is a torch.uint32 tensor.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bits = x.view(torch.int32)
        flipped = torch.where(bits < 0, ~bits, bits ^ torch.iinfo(torch.int32).min)
        return flipped.view(torch.uint32)


def get_inputs():
    return [torch.randn(16, 250)]


def get_init_inputs():
    return []
