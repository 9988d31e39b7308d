"""Tiny problems that differ only by a scale (so each has its own source and content hash), for the
warm-reference caches' tests and the service core's."""

from __future__ import annotations

from tritongym.tasks.problem import Problem

#: ``relu(x) * scale`` on a (4, 8) input; format with ``scale=``.
SCALED_RELU = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * {scale}


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def scaled_relu(scale: int) -> Problem:
    """A distinct tiny problem per `scale`."""
    return Problem.from_source(SCALED_RELU.format(scale=scale), name=f"relu_x{scale}")


def runner_kept(runner) -> bool:
    """Not closed: `ReferenceRunner.close` removes its folder (a released fork handle cannot be asked)."""
    return runner._dir.exists()
