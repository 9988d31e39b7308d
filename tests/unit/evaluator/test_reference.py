"""ReferenceRunner: the reference worker's client (trusted side, problem code isolated)."""

from __future__ import annotations

import pytest

from tritongym import Problem, ProblemError
from tritongym.evaluator.reference import ReferenceRunner

LARGE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x.repeat(5, 1)          # 5 x 4M float32 = 80 MiB of expected output

def get_inputs():
    return [torch.randn(1, 4_000_000)]

def get_init_inputs():
    return []
'''

BROKEN = '''
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("the reference itself is broken")

def get_inputs():
    return [1]

def get_init_inputs():
    return []
'''


def test_expected_outputs_larger_than_the_candidate_frame_bound_arrive():
    with ReferenceRunner(Problem.from_source(LARGE, name="large")) as runner:
        runner.setup(weight_seed=1)
        trial = runner.trial(seed=2)
    assert tuple(trial.expected.shape) == (5, 4_000_000)
    assert trial.expected[4, 123].item() == trial.inputs[0][0, 123].item()
    assert trial.compute_work[0] == 4_000_000  # elements the reference's compute op (repeat) reads


def test_a_failing_reference_is_a_problem_error_naming_the_problem():
    with ReferenceRunner(Problem.from_source(BROKEN, name="broken")) as runner:
        runner.setup(weight_seed=1)
        with pytest.raises(ProblemError, match="broken: the reference failed during trial") as info:
            runner.trial(seed=2)
    assert "the reference itself is broken" in str(info.value)
    assert "problem frames only" in str(info.value)
