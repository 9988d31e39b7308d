"""SiLU of a bfloat16 activation, computed in float32 and rounded back to bfloat16 (the reference ends
in bf16, as mixed-precision models do)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        return (y * torch.sigmoid(y)).to(torch.bfloat16)


def get_inputs():
    return [torch.randn(32, 512).to(torch.bfloat16)]


def get_init_inputs():
    return []
