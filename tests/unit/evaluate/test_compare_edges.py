"""Edges of `compare_outputs` found by mutation testing (issue 14; benchmarks/mutation.py).

Each test here failed for a planted bug that tests/unit/evaluate/test_compare.py let through: the
verdict flag of every early return, float scalars among the outputs, the leaves after a scalar or an
empty tensor, integer outputs with several mismatches, and which positions the message ranks worst.
"""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.options import EvalOptions

DEFAULT = EvalOptions().tolerance_for  # atol = rtol = 1e-2


@pytest.mark.parametrize(("expected", "actual"), [
    (torch.ones(2), (torch.ones(2),)),  # structure
    ((torch.ones(2), 3), (torch.ones(2), 4)),  # a non-tensor leaf
    (torch.ones(2), torch.ones(3)),  # shape
    (torch.ones(2), torch.ones(2, dtype=torch.float64)),  # dtype
])
def test_every_early_mismatch_is_a_false_verdict_not_a_missing_one(expected, actual):
    assert compare_outputs(expected, actual, DEFAULT).passed is False


def test_float_scalars_compare_by_value_and_nan_matches_only_nan():
    assert compare_outputs((1.0,), (1.0,), DEFAULT).passed
    assert compare_outputs((math.nan,), (math.nan,), DEFAULT).passed
    assert compare_outputs((1.0,), (2.0,), DEFAULT).passed is False
    assert compare_outputs((1.0,), (math.nan,), DEFAULT).passed is False
    assert compare_outputs((math.nan,), (1.0,), DEFAULT).passed is False
    assert compare_outputs((1,), (1.0,), DEFAULT).passed is False  # structure: int vs float


@pytest.mark.parametrize("first", [7, torch.ones(0)], ids=["scalar", "empty-tensor"])
def test_leaves_after_a_scalar_or_an_empty_tensor_are_still_compared(first):
    bad = torch.tensor([1.0, 5.0])
    comparison = compare_outputs((first, torch.ones(2)), (first, bad), DEFAULT)
    assert comparison.passed is False
    assert comparison.message.startswith("output[1]: 1 of 2 elements")


def test_integer_outputs_with_several_mismatches_report_the_first_without_ranking():
    expected = torch.tensor([1, 2, 3, 4])
    actual = torch.tensor([1, 9, 3, 9])
    comparison = compare_outputs(expected, actual, DEFAULT)
    assert comparison.passed is False and comparison.mismatch_fraction == 0.5
    assert comparison.message == ("output: 2 of 4 elements (50.0%) differ beyond exact match; first at (1,): "
                                  "expected 2, got 9")


def test_two_mismatches_are_enough_to_name_the_worst_positions():
    expected = torch.zeros(4)
    actual = torch.tensor([0.0, 0.5, 0.0, 0.7])
    comparison = compare_outputs(expected, actual, DEFAULT)
    assert comparison.message.endswith("; worst at (3,), (1,)")


def test_worst_positions_rank_only_the_mismatched_ones():
    # (0,) is off by 0.5 but within rtol·|100| = 1; the mismatches are (1,) and (2,), smaller in value.
    expected = torch.tensor([100.0, 0.0, 0.0])
    actual = torch.tensor([100.5, 0.02, 0.03])
    comparison = compare_outputs(expected, actual, DEFAULT)
    assert comparison.message.endswith("; worst at (2,), (1,)")


def test_non_finite_mismatches_rank_first():
    expected = torch.zeros(3)
    actual = torch.tensor([5.0, math.inf, 1.0])
    assert compare_outputs(expected, actual, DEFAULT).message.endswith("; worst at (1,), (0,), (2,)")
