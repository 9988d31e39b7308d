"""The task audit keeps its float32 findings when the float64 check needs more than its worker cap.

Since issue 45 a reference worker whose float64 copy runs out of memory on a CPU ends the trial with
`ReferenceOverMemory` (an evaluation must not go on with its precision unchecked); the audit, which
asks for the float64 run only to recommend a tolerance, reports no excess figure instead, as before.
"""

from __future__ import annotations

import pytest

from tritongym import Problem
from tritongym.bench.audit.run import _reference_excess, _Trials
from tritongym.evaluator.reference import ReferenceOverMemory, ReferenceRunner

#: 640 MiB of float32 weights: the float32 forward fits a 2.5 GiB cap, the float64 copy does not.
WIDE_WEIGHTS = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(160 << 20) / 1000)

    def forward(self, x):
        return x * self.weight[: x.numel()].view_as(x)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
'''


def test_the_audits_float64_run_over_its_cap_gives_no_excess_instead_of_failing_the_audit():
    problem = Problem.from_source(WIDE_WEIGHTS, name="wide")
    cap = int(2.5 * (1 << 30))
    with ReferenceRunner(problem, device="cpu", timeout=120, memory_limit_bytes=cap) as runner:
        assert _reference_excess(runner, 1, [2], _Trials((1e-2, 1e-2))) == (None, None)
    # What it absorbed: the same request, asked of a fresh worker directly, is the over-memory error.
    with ReferenceRunner(problem, device="cpu", timeout=120, memory_limit_bytes=cap) as runner:
        runner.setup(1)
        with pytest.raises(ReferenceOverMemory):
            runner.trial(2, truth=True)
