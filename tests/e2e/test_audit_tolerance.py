"""A problem the task audit flagged is evaluated with the audit's stricter tolerance, with a notice."""

from __future__ import annotations

import pytest

import tritongym
from tritongym import Status
from tritongym.tasks.flags import TaskFlags

from .helpers import TINY_RELU

SLIGHTLY_OFF = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) + 1e-6, mask=mask)   # off by 1e-6 everywhere


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
'''


@pytest.fixture
def flagged(monkeypatch):
    problem = tritongym.load_problem_file(TINY_RELU)
    flags = {problem.content_hash: TaskFlags(problem_id="tiny", flags=("near_zero_output",), atol=1e-8, rtol=1e-8)}
    monkeypatch.setattr("tritongym.evaluator.parent.audit_flags", lambda: flags)
    return problem


def test_the_audit_tolerance_applies_to_a_flagged_problem(flagged):
    result = tritongym.evaluate(flagged, SLIGHTLY_OFF, device="cpu", num_trials=1, input_families=())
    assert result.status == Status.INCORRECT  # 1e-6 is far beyond atol = rtol = 1e-8
    assert "atol=1e-08, rtol=1e-08" in result.trials[0].message
    assert [n.code for n in result.notices if n.code == "audit_tolerance"] == ["audit_tolerance"]


def test_it_can_be_turned_off_and_unflagged_problems_keep_the_default(flagged):
    off = tritongym.evaluate(flagged, SLIGHTLY_OFF, device="cpu", num_trials=1, input_families=(),
                             use_audit_tolerance=False)
    assert off.status == Status.OK
    assert not [n for n in off.notices if n.code == "audit_tolerance"]


def test_unflagged_problems_keep_the_default(flagged, monkeypatch):
    """With the audit on, a problem the audit did not flag is judged at the default tolerance."""
    monkeypatch.setattr("tritongym.evaluator.parent.audit_flags", lambda: {})
    result = tritongym.evaluate(flagged, SLIGHTLY_OFF, device="cpu", num_trials=1, input_families=())
    assert result.status == Status.OK  # 1e-6 is well inside atol = rtol = 1e-2
    assert not [n for n in result.notices if n.code == "audit_tolerance"]
