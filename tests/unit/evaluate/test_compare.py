"""Tests for tritongym.evaluator.compare: structure, shape and dtype rules, NaN/Inf positions, the
tolerance boundary, exact integer matching, and the reported error figures on hand-made tensors."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.options import EvalOptions, Tolerance


def tol(atol: float, rtol: float):
    return lambda dtype: Tolerance(atol, rtol)


DEFAULT = EvalOptions().tolerance_for  # kernelbench preset: atol = rtol = 1e-2


def test_identical_outputs_pass_with_zero_errors():
    x = torch.randn(3, 4)
    result = compare_outputs(x, x.clone(), DEFAULT)
    assert result.passed
    assert (result.max_abs_error, result.max_rel_error, result.mismatch_fraction, result.message) == (
        0.0,
        0.0,
        0.0,
        None,
    )


# -- structure, shape, dtype -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "actual", "fragment"),
    [
        (
            torch.zeros(2),
            (torch.zeros(2),),
            "output structure differs: expected tensor, got ('sequence', ('tensor',))",
        ),
        ((torch.zeros(2), torch.zeros(2)), (torch.zeros(2),), "output structure differs"),
        (torch.zeros(2), None, "expected tensor, got NoneType"),
        (torch.zeros(2), 0.0, "expected tensor, got float"),
    ],
    ids=["tensor-vs-tuple", "tuple-length", "tensor-vs-none", "tensor-vs-float"],
)
def test_structure_mismatch(expected, actual, fragment):
    result = compare_outputs(expected, actual, DEFAULT)
    assert not result.passed
    assert fragment in result.message
    assert result.max_abs_error is None and result.mismatch_fraction is None


def test_a_list_holds_the_same_outputs_as_a_tuple():
    assert compare_outputs((torch.ones(2), torch.zeros(3)), [torch.ones(2), torch.zeros(3)], DEFAULT).passed
    assert not compare_outputs((torch.ones(2),), [torch.zeros(2)], DEFAULT).passed


def test_shape_mismatch_names_the_path_and_both_shapes():
    result = compare_outputs(
        (torch.zeros(2), torch.zeros(3, 4)), (torch.zeros(2), torch.zeros(4, 3)), DEFAULT
    )
    assert not result.passed
    assert result.message == "output[1]: shape mismatch: expected (3, 4), got (4, 3)"


def test_broadcastable_shape_is_still_a_mismatch():
    result = compare_outputs(torch.zeros(3, 1), torch.zeros(3), DEFAULT)
    assert result.message == "output: shape mismatch: expected (3, 1), got (3,)"


@pytest.mark.parametrize(
    ("expected_dtype", "actual_dtype"),
    [
        (torch.float32, torch.float64),
        (torch.float32, torch.float16),
        (torch.int64, torch.int32),
        (torch.float32, torch.int32),
        (torch.bool, torch.uint8),
    ],
)
def test_dtype_must_match_exactly(expected_dtype, actual_dtype):
    result = compare_outputs(
        torch.zeros(2, dtype=expected_dtype), torch.zeros(2, dtype=actual_dtype), DEFAULT
    )
    assert not result.passed
    assert result.message == f"output: dtype mismatch: expected {expected_dtype}, got {actual_dtype}"


def test_nested_paths_are_reported():
    expected = ([torch.zeros(2), (torch.zeros(1), torch.zeros(3))],)
    actual = ([torch.zeros(2), (torch.zeros(1), torch.zeros(3, dtype=torch.float64))],)
    assert compare_outputs(expected, actual, DEFAULT).message.startswith("output[0][1][1]: dtype mismatch")


def test_non_tensor_leaves_compare_by_value():
    assert compare_outputs((torch.zeros(1), 3, "a"), (torch.zeros(1), 3, "a"), DEFAULT).passed
    result = compare_outputs((torch.zeros(1), 3), (torch.zeros(1), 4), DEFAULT)
    assert not result.passed and result.message == "output[1]: expected 3, got 4"
    assert compare_outputs(float("nan"), float("nan"), DEFAULT).passed


# -- NaN and Inf -----------------------------------------------------------------------------------


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("expected", "actual", "passed", "mismatches"),
    [
        ([1.0, NAN, INF, -INF], [1.0, NAN, INF, -INF], True, 0),
        ([1.0, NAN], [1.0, 0.0], False, 1),  # NaN expected, finite given
        ([1.0, 0.0], [1.0, NAN], False, 1),  # finite expected, NaN given
        ([INF, 0.0], [-INF, 0.0], False, 1),  # wrong sign of infinity
        ([INF, 0.0], [NAN, 0.0], False, 1),  # Inf expected, NaN given
        ([NAN, 0.0], [INF, 0.0], False, 1),
        ([1e30, 0.0], [INF, 0.0], False, 1),  # overflow is not "close"
        ([NAN, NAN, 1.0, 2.0], [0.0, 0.0, 1.0, 2.0], False, 2),
    ],
    ids=[
        "same-positions",
        "nan-missing",
        "nan-extra",
        "inf-sign",
        "inf-vs-nan",
        "nan-vs-inf",
        "overflow",
        "two-nans",
    ],
)
def test_nan_and_inf_positions_must_agree(expected, actual, passed, mismatches):
    result = compare_outputs(torch.tensor(expected), torch.tensor(actual), tol(1e6, 1e6))
    assert result.passed is passed
    assert result.mismatch_fraction == mismatches / len(expected)
    assert math.isfinite(result.max_abs_error)  # errors are measured over finite elements only
    if not passed:
        assert "differ beyond atol=1e+06, rtol=1e+06" in result.message


def test_errors_are_measured_over_finite_elements_only():
    expected = torch.tensor([1.0, NAN, INF, 4.0])
    actual = torch.tensor([1.5, NAN, INF, 4.0])
    result = compare_outputs(expected, actual, tol(1.0, 0.0))
    assert result.passed
    assert result.max_abs_error == 0.5 and result.max_rel_error == 0.5


# -- tolerance boundary ----------------------------------------------------------------------------


def test_boundary_is_inclusive_at_exactly_atol_plus_rtol_times_expected():
    # Dyadic values, so atol + rtol*|e| and the differences are exact in float32 and float64:
    # |e| = 2, bound = 0.25 + 0.5*2 = 1.25.
    rule = tol(0.25, 0.5)
    expected = torch.tensor([2.0, -2.0])
    at_bound = torch.tensor([3.25, -0.75])  # |diff| exactly 1.25, above and below e
    assert compare_outputs(expected, at_bound, rule).passed
    away = torch.nextafter(at_bound, torch.tensor(math.inf))  # one float32 ulp further from e, both sides
    result = compare_outputs(expected, away, rule)
    assert not result.passed and result.mismatch_fraction == 1.0
    assert result.max_abs_error > 1.25
    closer = torch.nextafter(at_bound, torch.tensor(-math.inf))
    assert compare_outputs(expected, closer, rule).passed


def test_relative_term_uses_the_expected_magnitude_not_the_output():
    rule = tol(0.0, 0.5)
    # |a - e| = 1 with e = 2: 1 <= 0.5*2 passes. Swapped (e = 1, a = 2): 1 > 0.5*1 fails.
    assert compare_outputs(torch.tensor([2.0]), torch.tensor([1.0]), rule).passed
    assert not compare_outputs(torch.tensor([1.0]), torch.tensor([2.0]), rule).passed


def test_zero_expected_uses_atol_alone():
    rule = tol(0.125, 100.0)
    assert compare_outputs(torch.tensor([0.0]), torch.tensor([0.125]), rule).passed
    assert not compare_outputs(torch.tensor([0.0]), torch.tensor([0.126]), rule).passed


def test_DEFAULT_is_one_percent_both_ways():
    expected = torch.tensor([100.0, 0.0], dtype=torch.float64)
    assert compare_outputs(
        expected, expected + torch.tensor([1.0, 0.01], dtype=torch.float64), DEFAULT
    ).passed
    assert not compare_outputs(
        expected, expected + torch.tensor([1.02, 0.0], dtype=torch.float64), DEFAULT
    ).passed
    assert not compare_outputs(
        expected, expected + torch.tensor([0.0, 0.0101], dtype=torch.float64), DEFAULT
    ).passed


def test_tolerance_is_looked_up_per_output_dtype():
    seen = []

    def rule(dtype):
        seen.append(dtype)
        return Tolerance(0.5, 0.0) if dtype == torch.float16 else Tolerance(0.0, 0.0)

    expected = (torch.zeros(1, dtype=torch.float16), torch.zeros(1))
    assert compare_outputs(
        expected, (torch.full((1,), 0.25, dtype=torch.float16), torch.zeros(1)), rule
    ).passed
    assert not compare_outputs(
        expected, (torch.zeros(1, dtype=torch.float16), torch.full((1,), 0.25)), rule
    ).passed
    assert set(seen) == {torch.float16, torch.float32}


def test_half_precision_is_compared_in_float64():
    expected = torch.tensor([1000.0], dtype=torch.bfloat16)
    actual = torch.tensor([1008.0], dtype=torch.bfloat16)  # next bfloat16 above 1000
    result = compare_outputs(expected, actual, tol(0.0, 0.01))
    assert result.passed and result.max_abs_error == 8.0 and result.max_rel_error == 0.008


def test_complex_outputs_use_the_complex_modulus():
    expected = torch.tensor([3 + 4j], dtype=torch.complex64)
    result = compare_outputs(expected, torch.tensor([3 + 4.5j], dtype=torch.complex64), tol(0.0, 0.1))
    assert result.passed and result.max_abs_error == 0.5 and result.max_rel_error == 0.1
    assert not compare_outputs(expected, torch.tensor([3 + 5j], dtype=torch.complex64), tol(0.0, 0.1)).passed


def test_complex_outputs_of_several_elements_keep_their_nan_positions():
    # Complex outputs always take the masked path (the all-finite shortcut is for real dtypes).
    nan = complex(float("nan"), 0.0)
    expected = torch.tensor([1 + 1j, nan, 2 - 1j, 0j], dtype=torch.complex64)
    same = compare_outputs(expected, torch.tensor([1 + 1j, nan, 2 - 1j, 0j], dtype=torch.complex64), DEFAULT)
    assert same.passed and same.mismatch_fraction == 0.0
    moved = compare_outputs(expected, torch.tensor([1 + 1j, 1j, nan, 0j], dtype=torch.complex64), DEFAULT)
    assert not moved.passed and moved.mismatch_fraction == 0.5
    assert "first at (1,)" in moved.message


# -- integers and booleans -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8])
def test_integers_must_match_exactly_whatever_the_tolerance(dtype):
    expected = torch.tensor([1, 2, 3, 100], dtype=dtype)
    assert compare_outputs(expected, expected.clone(), tol(1e9, 1e9)).passed
    off_by_one = expected.clone()
    off_by_one[3] = 101
    result = compare_outputs(expected, off_by_one, tol(1e9, 1e9))
    assert not result.passed
    assert result.max_abs_error == 1.0 and result.mismatch_fraction == 0.25
    assert "differ beyond exact match; first at (3,): expected 100, got 101" in result.message


def test_booleans_must_match_exactly():
    expected = torch.tensor([[True, False], [False, True]])
    actual = torch.tensor([[True, False], [True, True]])
    result = compare_outputs(expected, actual, DEFAULT)
    assert not result.passed
    assert result.mismatch_fraction == 0.25
    assert "first at (1, 0)" in result.message


# -- reported figures ------------------------------------------------------------------------------


def test_error_figures_on_hand_made_tensors():
    expected = torch.tensor([[1.0, 2.0], [0.0, -4.0]])
    actual = torch.tensor([[1.5, 2.0], [0.5, -3.0]])
    result = compare_outputs(expected, actual, tol(0.01, 0.01))
    assert not result.passed
    assert result.max_abs_error == 1.0  # |(-3) - (-4)|
    assert result.max_rel_error == 0.5  # 0.5 / 1; the e = 0 element has no relative error
    assert result.mismatch_fraction == 0.75  # (0,0), (1,0), (1,1)
    assert result.message == (
        "output: 3 of 4 elements (75.0%) differ beyond atol=0.01, rtol=0.01; first at (0, 0): "
        "expected 1, got 1.5; worst at (1, 1), (0, 0), (1, 0)"
    )


def test_mismatch_fraction_counts_every_output_tensor():
    expected = (torch.zeros(6), torch.zeros(2, 2))
    actual = (torch.tensor([0, 0, 0, 0, 0, 9.0]), torch.tensor([[0.0, 7.0], [0.0, 0.0]]))
    result = compare_outputs(expected, actual, tol(0.1, 0.0))
    assert result.mismatch_fraction == 0.2  # 2 of 10 elements
    assert result.max_abs_error == 9.0
    assert result.message.startswith("output[0]: 1 of 6 elements (16.7%)")  # the first offending tensor


def test_first_mismatch_index_is_reported_in_coordinates():
    expected = torch.zeros(2, 3, 4)
    actual = expected.clone()
    actual[1, 2, 3] = 1.0
    assert "first at (1, 2, 3)" in compare_outputs(expected, actual, DEFAULT).message
    scalar = compare_outputs(torch.tensor(1.0), torch.tensor(2.0), DEFAULT)
    assert "first at ()" in scalar.message and scalar.mismatch_fraction == 1.0


def test_passing_outputs_still_report_their_largest_errors():
    expected = torch.tensor([10.0, -20.0])
    actual = torch.tensor([10.05, -20.1])
    result = compare_outputs(expected, actual, DEFAULT)
    assert result.passed
    assert result.max_abs_error == pytest.approx(0.1, rel=1e-5)
    assert result.max_rel_error == pytest.approx(0.005, rel=1e-4)


def test_empty_tensors_pass_with_zero_fraction():
    result = compare_outputs(torch.zeros(0, 3), torch.zeros(0, 3), DEFAULT)
    assert result.passed and result.mismatch_fraction == 0.0


def test_non_contiguous_outputs_compare_by_value():
    expected = torch.arange(6.0).reshape(2, 3)
    actual = expected.t().contiguous().t()  # same values, column-major strides
    assert not actual.is_contiguous()
    assert compare_outputs(expected, actual, DEFAULT).passed
    wrong = torch.arange(6.0).reshape(3, 2).t()  # same shape, transposed values
    assert not compare_outputs(expected, wrong, DEFAULT).passed


def test_the_message_names_a_few_worst_positions_without_values():
    from tritongym.evaluator.options import EvalOptions

    expected = torch.zeros(4, 5)
    actual = expected.clone()
    actual[1, 2], actual[3, 4], actual[0, 0], actual[2, 2] = 5.0, 1.0, 0.5, float("nan")
    message = compare_outputs(expected, actual, EvalOptions().tolerance_for).message
    # NaN where a number was expected first, then by absolute error; the first mismatch keeps its values.
    assert message.endswith("; 1 of them NaN or Inf where the reference is finite (an element no kernel wrote "
                            "reads NaN: fresh torch.empty memory is NaN-filled here); worst at (2, 2), (1, 2), (3, 4)"
                            ), message
    single = expected.clone()
    single[0, 1] = 1.0
    assert "worst at" not in compare_outputs(expected, single, EvalOptions().tolerance_for).message


def test_non_finite_values_where_the_reference_is_finite_are_counted_apart():
    """An element no kernel wrote reads NaN in a checked trial; the message says how many there are
    (what max_abs_error, taken over finite elements, cannot show), and only when there are some."""
    from tritongym.evaluator.options import EvalOptions

    expected = torch.tensor([1.0, float("nan"), 3.0, 4.0, float("inf")])
    unwritten = torch.tensor([1.0, float("nan"), float("nan"), float("-inf"), float("inf")])
    comparison = compare_outputs(expected, unwritten, EvalOptions().tolerance_for)
    assert comparison.max_abs_error == 0.0 and comparison.mismatch_fraction == pytest.approx(2 / 5)
    assert "; 2 of them NaN or Inf where the reference is finite" in comparison.message
    missing = compare_outputs(expected, torch.tensor([1.0, 2.0, 3.0, 4.0, float("inf")]), EvalOptions().tolerance_for)
    assert "NaN or Inf where" not in missing.message  # the reference's NaN, not the candidate's
    finite = compare_outputs(torch.zeros(3), torch.tensor([0.0, 1.0, 0.0]), EvalOptions().tolerance_for)
    assert "NaN or Inf where" not in finite.message
    nan = complex(float("nan"), 0.0)
    complex_expected = torch.tensor([1 + 1j, nan, 2j], dtype=torch.complex64)
    moved = compare_outputs(complex_expected, torch.tensor([nan, 1j, 2j], dtype=torch.complex64),
                            EvalOptions().tolerance_for)
    assert "; 1 of them NaN or Inf where the reference is finite" in moved.message
    wrong = compare_outputs(complex_expected, torch.tensor([1 + 1j, nan, 3j], dtype=torch.complex64),
                            EvalOptions().tolerance_for)
    assert not wrong.passed and "NaN or Inf where" not in wrong.message


# -- one float64 copy per tensor (shared_float64) ----------------------------------------------------

def test_within_shared_float64_each_tensor_is_converted_once():
    from tritongym.evaluator.compare import float64_flat, shared_float64

    x = torch.tensor([[1.0, float("inf")], [2.0, 3.0]])
    first, finite = float64_flat(x)
    assert first.dtype == torch.float64 and first.shape == (4,) and not finite
    assert float64_flat(x)[0] is not first  # outside the block: a fresh copy each time
    with shared_float64():
        inside = float64_flat(x)[0]
        assert float64_flat(x)[0] is inside
        assert float64_flat(x.clone())[0] is not inside  # another tensor, another copy
    assert float64_flat(x)[0] is not inside


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 1.0, -1.0, 1e-3, 5e-3, 2.0, 1e30, float("nan"), float("inf"), -float("inf")]),
                min_size=1, max_size=12),
       st.lists(st.sampled_from([0.0, 1e-3, -5e-3, 0.02, 1.0, float("nan"), float("inf")]), min_size=12, max_size=12))
def test_the_all_finite_fast_path_gives_the_verdict_of_the_masked_path(expected, noise):
    # The comparison skips its NaN/Inf masks when both sides are finite; on finite data the same
    # figures must come out as with the masks (a tensor with one non-finite element takes them).
    from tritongym.evaluator.compare import shared_float64

    exp = torch.tensor(expected, dtype=torch.float32)
    act = exp + torch.tensor(noise[:len(expected)], dtype=torch.float32)
    fast = compare_outputs(exp, act, DEFAULT)
    with shared_float64():
        assert compare_outputs(exp, act, DEFAULT) == fast
    masked = compare_outputs(torch.cat([exp, torch.tensor([float("nan")])]),
                             torch.cat([act, torch.tensor([float("nan")])]), DEFAULT)
    assert masked.passed == fast.passed
    assert masked.max_abs_error == fast.max_abs_error and masked.max_rel_error == fast.max_rel_error
