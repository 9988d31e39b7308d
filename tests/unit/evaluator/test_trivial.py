"""Unit tests of `tritongym.evaluator.trivial`: each trivial-output predictor and the precision check.

In the evaluator these run in the parent on outputs that already passed the per-element tolerance,
and the perturbed input families catch most passthrough hacks first, so the end-to-end corpus
cannot tell whether one predictor was dropped. Here every predictor binds on its own (no input
families, no worker): fast, hand-made tensors.
"""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.evaluator import trivial
from tritongym.evaluator.result import ViolationCode

MARGIN = 0.1


def randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=generator, dtype=torch.float64).to(dtype)


# -- leaves ----------------------------------------------------------------------------------------


def test_float_leaves_keep_nonempty_floating_tensors_of_nested_structures_in_order():
    a, b, c = torch.ones(2), torch.zeros(3, dtype=torch.float16), torch.ones(1, dtype=torch.float64)
    ints, empty = torch.ones(2, dtype=torch.int64), torch.ones(0)
    leaves = trivial.float_leaves([a, (ints, b, [empty, c]), 3.0, "x", None])
    assert [id(t) for t in leaves] == [id(a), id(b), id(c)]
    assert trivial.float_leaves(a) == [a]
    assert trivial.float_leaves(ints) == []
    assert trivial.float_leaves(empty) == []
    assert trivial.float_leaves(2.5) == []


def test_tensors_keeps_every_tensor_of_nested_structures_in_order():
    a, ints, empty = torch.ones(2), torch.ones(2, dtype=torch.int64), torch.ones(0)
    assert [id(t) for t in trivial.tensors((a, [ints, (empty,)], 1, "s"))] == [id(a), id(ints), id(empty)]
    assert trivial.tensors(a) == [a]
    assert trivial.tensors({"a": a}) == []


# -- relative L2 -----------------------------------------------------------------------------------


def test_relative_l2_is_the_norm_of_the_difference_over_the_norm_of_the_expected():
    expected = torch.tensor([3.0, 4.0])  # norm 5
    assert trivial.relative_l2([torch.tensor([3.3, 4.4])], [expected]) == pytest.approx(0.1)
    assert trivial.relative_l2([torch.tensor([3.0, 9.0])], [expected]) == pytest.approx(1.0)
    assert trivial.relative_l2([expected.clone()], [expected]) == 0.0


def test_relative_l2_pools_all_leaves_before_dividing():
    # Pooled: sqrt((0 + 25) / (9 + 16)) = 1. Per-leaf errors would be 0 and 1.25 (mean 0.625, max 1.25).
    expected = [torch.tensor([3.0]), torch.tensor([4.0])]
    predicted = [torch.tensor([3.0]), torch.tensor([9.0])]
    assert trivial.relative_l2(predicted, expected) == pytest.approx(1.0)
    # the error in the first leaf counts as much as one in the last: sqrt((9 + 0) / 25)
    assert trivial.relative_l2([torch.tensor([6.0]), torch.tensor([4.0])], expected) == pytest.approx(0.6)


def test_relative_l2_skips_positions_not_finite_on_either_side():
    expected = torch.tensor([3.0, math.inf, 4.0, 1.0])
    predicted = torch.tensor([3.0, math.inf, 4.0, math.nan])
    # only positions 0 and 2 count: exact
    assert trivial.relative_l2([predicted], [expected]) == 0.0
    off = torch.tensor([3.3, -math.inf, 4.4, math.nan])
    assert trivial.relative_l2([off], [expected]) == pytest.approx(0.1)


def test_relative_l2_with_a_zero_expected_norm_is_zero_only_when_exact():
    zeros = torch.zeros(3)
    assert trivial.relative_l2([zeros.clone()], [zeros]) == 0.0
    assert trivial.relative_l2([torch.tensor([0.0, 1e-30, 0.0])], [zeros]) == math.inf


def test_relative_l2_computes_in_float64():
    # In float16, 300² overflows to inf (and the error would read 0); in float64 it is 1/300.
    expected = torch.tensor([300.0], dtype=torch.float16)
    predicted = torch.tensor([301.0], dtype=torch.float16)
    assert trivial.relative_l2([predicted], [expected]) == pytest.approx(1 / 300)


def test_relative_l2_refuses_different_leaf_counts_and_shapes():
    with pytest.raises(ValueError):
        trivial.relative_l2([torch.ones(2)], [torch.ones(2), torch.ones(2)])
    with pytest.raises(ValueError, match="shape"):
        trivial.relative_l2([torch.ones(1)], [torch.ones(4)])  # would broadcast silently


# -- the running mean of previous trials -----------------------------------------------------------


def test_trivial_baselines_average_the_previous_trials_per_family_in_float64():
    baselines = trivial.TrivialBaselines()
    shapes = [torch.Size([2])]
    assert baselines.previous_mean("f", shapes) is None
    baselines.add("f", [torch.tensor([1.0, 2.0])])
    (first,) = baselines.previous_mean("f", shapes)
    assert first.dtype == torch.float64 and first.tolist() == [1.0, 2.0]
    baselines.add("f", [torch.tensor([3.0, 6.0])])
    baselines.add("f", [torch.tensor([5.0, 1.0])])
    assert baselines.previous_mean("f", shapes)[0].tolist() == [3.0, 3.0]
    assert baselines.counts["f"] == 3
    assert baselines.previous_mean("other family", shapes) is None
    assert baselines.previous_mean("f", [torch.Size([3])]) is None  # a different shape has no history
    assert baselines.previous_mean("f", [torch.Size([2]), torch.Size([2])]) is None


def test_trivial_baselines_restart_a_family_when_its_shapes_change():
    baselines = trivial.TrivialBaselines()
    baselines.add("f", [torch.tensor([10.0, 10.0])])
    baselines.add("f", [torch.tensor([1.0, 2.0, 3.0])])
    assert baselines.counts["f"] == 1
    assert baselines.previous_mean("f", [torch.Size([3])])[0].tolist() == [1.0, 2.0, 3.0]
    assert baselines.previous_mean("f", [torch.Size([2])]) is None
    baselines.add("g", [torch.tensor([4.0])])
    assert baselines.previous_mean("f", [torch.Size([3])])[0].tolist() == [1.0, 2.0, 3.0]  # families apart


def test_trivial_baselines_do_not_alias_the_added_tensors():
    baselines = trivial.TrivialBaselines()
    expected = torch.tensor([1.0, 2.0], dtype=torch.float64)
    baselines.add("f", [expected])
    baselines.add("f", [torch.tensor([3.0, 4.0])])
    assert expected.tolist() == [1.0, 2.0]


# -- the predictors --------------------------------------------------------------------------------


def test_predictors_of_one_output_with_history_and_a_same_shaped_input():
    expected = [torch.tensor([1.0, 2.0, 3.0, math.inf])]
    history = [torch.tensor([7.0, 7.0, 7.0, 7.0], dtype=torch.float64)]
    x_int = torch.ones(4, dtype=torch.int64)
    x_other = torch.ones(3)
    x = torch.tensor([0.5, 0.5, 0.5, 0.5])
    predictors = trivial.trivial_predictions(expected, [x_int, x_other, 2.0, x], history)
    assert list(predictors) == ["zeros", "mean of previous trials", "constant (the output's mean)",
                                "input 1 passed through"]
    (zeros,) = predictors["zeros"]
    assert zeros.tolist() == [0.0] * 4 and zeros.dtype == torch.float32
    assert predictors["mean of previous trials"] is history
    (constant,) = predictors["constant (the output's mean)"]
    assert constant.tolist() == [2.0] * 4 and constant.dtype == torch.float32  # mean of the finite values
    assert predictors["input 1 passed through"][0] is x  # index among the floating inputs


def test_the_constant_predictor_of_an_output_with_no_finite_value_is_zeros():
    predictors = trivial.trivial_predictions([torch.tensor([math.nan, math.inf])], [], None)
    assert predictors["constant (the output's mean)"][0].tolist() == [0.0, 0.0]


def test_no_constant_predictor_when_an_output_has_one_element_and_no_passthrough_for_two_outputs():
    one = trivial.trivial_predictions([torch.tensor([2.0]), torch.tensor([1.0, 2.0])], [torch.ones(1)], None)
    assert list(one) == ["zeros"]
    two = trivial.trivial_predictions([torch.ones(2), torch.ones(2)], [torch.ones(2)], None)
    assert list(two) == ["zeros", "constant (the output's mean)"]
    assert trivial.trivial_predictions([torch.ones(2, 3)], [torch.ones(3, 2), torch.ones(6)], None).keys() == \
        {"zeros", "constant (the output's mean)"}


# -- beat the trivial outputs, each predictor binding alone ---------------------------------------


def near_identity_task() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x ~ N(0, 1); the task adds a small, non-constant correction δ, so only passthrough is close."""
    x = randn(256, seed=1)
    delta = 0.005 * torch.sin(torch.arange(256, dtype=torch.float32))
    return x, delta, x + delta


def test_passing_the_input_through_is_trivial_without_input_families():
    # The evaluator's perturbed input families usually catch this hack first; with input_families=()
    # only the passthrough predictor stands between the hack and a reward.
    x, delta, expected = near_identity_task()
    assert torch.allclose(x, expected, atol=1e-2, rtol=1e-2)  # it passes KernelBench's tolerance
    violation = trivial.check_beats_trivial(expected, x.clone(), [x], None, MARGIN)
    assert violation is not None and violation.code == ViolationCode.TRIVIAL_OUTPUT
    assert "(input 0 passed through)" in violation.message
    # the same output is not trivial when the input is not there to pass through
    assert trivial.check_beats_trivial(expected, x.clone(), [], None, MARGIN) is None


def test_just_inside_and_outside_the_margin_against_the_passthrough():
    x, delta, expected = near_identity_task()
    assert trivial.check_beats_trivial(expected, x + 0.91 * delta, [x], None, MARGIN) is None  # 0.09x
    violation = trivial.check_beats_trivial(expected, x + 0.89 * delta, [x], None, MARGIN)  # 0.11x
    assert violation is not None and "input 0 passed through" in violation.message


def test_zeros_are_trivial_for_tiny_outputs():
    expected = 1e-4 * randn(64, seed=2)  # |E| ≪ atol
    violation = trivial.check_beats_trivial(expected, torch.zeros(64), [], None, MARGIN)
    assert violation is not None and "(zeros)" in violation.message
    assert trivial.check_beats_trivial(expected, expected * 1.05, [], None, MARGIN) is None


def test_a_constant_is_trivial_for_outputs_that_barely_vary():
    expected = 5.0 + 1e-3 * randn(64, seed=3)
    mean = float(expected.double().mean())
    violation = trivial.check_beats_trivial(expected, torch.full((64,), mean), [], None, MARGIN)
    assert violation is not None and "(constant (the output's mean))" in violation.message
    noise = expected - mean
    assert trivial.check_beats_trivial(expected, mean + 0.91 * noise, [], None, MARGIN) is None
    assert trivial.check_beats_trivial(expected, mean + 0.89 * noise, [], None, MARGIN) is not None


def test_the_mean_of_previous_trials_is_trivial_for_a_one_element_output():
    # One element: no constant predictor, and the output is far from zero; only the history binds.
    expected = torch.tensor([2.0])
    history = [torch.tensor([2.01], dtype=torch.float64)]
    violation = trivial.check_beats_trivial(expected, torch.tensor([2.01]), [], history, MARGIN)
    assert violation is not None and "(mean of previous trials)" in violation.message
    assert trivial.check_beats_trivial(expected, torch.tensor([2.01]), [], None, MARGIN) is None
    assert trivial.check_beats_trivial(expected, torch.tensor([2.0009]), [], history, MARGIN) is None


def test_the_violation_reports_both_errors_and_the_margin():
    expected = torch.full((8,), 2.0)
    violation = trivial.check_beats_trivial(expected, expected * 1.5, [], None, MARGIN)
    assert violation is not None
    assert violation.message == (
        "the output is not clearly closer to the reference than a trivial output (zeros): relative L2 error 0.5 vs 1 "
        "for the trivial output (must be at most 0.1x); compute the actual result")


def test_an_exact_predictor_is_skipped_rather_than_demanding_an_exact_candidate():
    # A constant output: the constant predictor is exact (error 0). The candidate, 5% off, is still
    # well within 0.1x of the zeros predictor's error, so no violation.
    expected = torch.full((16,), 2.0)
    assert trivial.check_beats_trivial(expected, expected * 1.05, [], None, MARGIN) is None
    # also when the expected output is all zeros: every predictor is exact
    assert trivial.check_beats_trivial(torch.zeros(4), torch.full((4,), 1e-3), [], None, MARGIN) is None


def test_every_predictor_is_tried_not_only_the_first():
    # zeros and constant are far (O(1)); the passthrough, listed last, binds.
    x, _, expected = near_identity_task()
    history = [torch.zeros(256, dtype=torch.float64)]
    violation = trivial.check_beats_trivial(expected, x.clone(), [torch.ones(3), x], history, MARGIN)
    assert violation is not None and "input 1 passed through" in violation.message


def test_trivial_check_does_not_apply_without_comparable_floating_outputs():
    ints = torch.arange(4)
    assert trivial.check_beats_trivial(ints, ints, [], None, MARGIN) is None
    assert trivial.check_beats_trivial(torch.ones(0), torch.ones(0), [], None, MARGIN) is None
    pair = (torch.ones(4), torch.ones(4))
    assert trivial.check_beats_trivial(pair, torch.zeros(4), [], None, MARGIN) is None  # leaf counts differ
    assert trivial.check_beats_trivial(torch.full((4,), 2.0), torch.zeros(4), [], None, MARGIN) is not None


def test_trivial_check_leaves_shape_mismatches_to_the_comparison():
    expected = torch.arange(1.0, 5.0)
    assert trivial.check_beats_trivial(expected, torch.tensor([2.5]), [], None, MARGIN) is None  # no broadcast
    assert trivial.check_beats_trivial(expected, torch.ones(3), [], None, MARGIN) is None  # no crash
    assert trivial.check_beats_trivial(expected, expected.reshape(2, 2), [], None, MARGIN) is None


def test_trivial_check_with_non_finite_outputs_scores_the_finite_positions():
    expected = torch.tensor([math.inf, 2.0, 3.0, math.nan, 4.0])
    honest = torch.tensor([math.inf, 2.0, 3.0, math.nan, 4.0])
    assert trivial.check_beats_trivial(expected, honest, [], None, MARGIN) is None
    lazy = torch.tensor([math.inf, 0.0, 0.0, math.nan, 0.0])
    violation = trivial.check_beats_trivial(expected, lazy, [], None, MARGIN)
    assert violation is not None and "(zeros)" in violation.message


# -- precision -------------------------------------------------------------------------------------


def test_a_float16_matmul_is_a_precision_downgrade_and_a_float32_one_is_not():
    a, b = randn(16, 64, seed=4), randn(64, 16, seed=5)
    truth = a.double() @ b.double()
    expected = a @ b
    reordered = (a[:, :32] @ b[:32]) + (a[:, 32:] @ b[32:])  # float32, another summation order
    half = (a.half() @ b.half()).float()
    assert trivial.check_precision(expected, reordered, truth, 32.0, 1e-5) is None
    violation = trivial.check_precision(expected, half, truth, 32.0, 1e-5)
    assert violation is not None and violation.code == ViolationCode.PRECISION_DOWNGRADE
    # Without the solution's source the hint names no construct (it could name one the code lacks).
    assert "tl.dot" not in violation.message and "float16" not in violation.message
    assert "compute and accumulate in the task's precision" in violation.message


DOT_DEFAULT = "import triton.language as tl\n@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b)\n"
DOT_IEEE = "import triton.language as tl\n@triton.jit\ndef k(a, b):\n    c = tl.dot(a, b, input_precision='ieee')\n"
HALF_CAST = "import triton.language as tl\n@triton.jit\ndef k(x):\n    y = x.to(tl.bfloat16)\n"
HALF_TORCH = "import torch\ndef f(x):\n    return x.half()\n"
ELEMENTWISE = "import triton.language as tl\n@triton.jit\ndef k(x):\n    y = tl.maximum(x, 0.0)\n"


@pytest.mark.parametrize(("source", "names_dot", "names_half"), [
    (DOT_DEFAULT, True, False), (DOT_IEEE, False, False), (HALF_CAST, False, True), (HALF_TORCH, False, True),
    (DOT_DEFAULT + HALF_CAST, True, True), (ELEMENTWISE, False, False), (None, False, False),
    ("this is not python (", False, False),
], ids=["dot-default", "dot-ieee", "tl-bfloat16", "torch-half", "both", "elementwise", "no-source", "unparsable"])
def test_precision_hint_names_only_constructs_the_code_uses(source, names_dot, names_half):
    hint = trivial.precision_hint(source)
    assert ("tl.dot" in hint) is names_dot and ("input_precision='ieee'" in hint) is names_dot, hint
    assert ("float16/bfloat16" in hint) is names_half, hint
    if not (names_dot or names_half):
        assert hint == "compute and accumulate in the task's precision"
    a, b = randn(16, 64, seed=4), randn(64, 16, seed=5)
    violation = trivial.check_precision(a @ b, (a.half() @ b.half()).float(), a.double() @ b.double(), 32.0, 1e-5,
                                        source=source)
    assert violation is not None and violation.message.endswith(hint)


def test_precision_bound_is_factor_times_reference_error_plus_floor():
    truth = torch.ones(100, dtype=torch.float64)
    expected = torch.full((100,), 1.001, dtype=torch.float64)  # reference error 1e-3
    bound = 32.0 * 1e-3 + 1e-5
    assert trivial.check_precision(expected, truth * (1 + 0.999 * bound), truth, 32.0, 1e-5) is None
    assert trivial.check_precision(expected, truth * (1 + 1.001 * bound), truth, 32.0, 1e-5) is not None
    # an exact reference leaves only the floor
    assert trivial.check_precision(truth, truth * (1 + 0.9e-5), truth, 32.0, 1e-5) is None
    assert trivial.check_precision(truth, truth * (1 + 1.1e-5), truth, 32.0, 1e-5) is not None
    # a candidate as accurate as the reference, with factor 1 and no floor, is on the bound: allowed
    assert trivial.check_precision(expected, expected.clone(), truth, 1.0, 0.0) is None


def test_precision_error_is_measured_against_the_truth_not_the_reference():
    truth = torch.ones(10, dtype=torch.float64)
    expected = torch.full((10,), 1.01, dtype=torch.float64)  # reference error 1e-2, bound 0.32
    # 0.3 from the truth (within the bound) although 0.29 from the reference
    assert trivial.check_precision(expected, truth * 1.3, truth, 32.0, 0.0) is None
    assert trivial.check_precision(expected, truth * 1.33, truth, 32.0, 0.0) is not None


def test_precision_message_reports_both_errors():
    truth = torch.ones(4, dtype=torch.float64)
    violation = trivial.check_precision(truth, truth * 1.5, truth, 32.0, 1e-5)
    assert violation is not None and violation.message == (
        "the output is much less accurate than the float32 reference (relative error to a float64 evaluation 0.5 "
        "vs 0 for the reference); compute and accumulate in the task's precision")


def test_precision_check_does_not_apply_without_comparable_leaves():
    x = torch.ones(4)
    assert trivial.check_precision(x, x * 2, None, 32.0, 1e-5) is None
    assert trivial.check_precision(x, x * 2, torch.arange(4), 32.0, 1e-5) is None  # integer truth
    assert trivial.check_precision((x, x), x * 2, (x, x), 32.0, 1e-5) is None
    assert trivial.check_precision(x, (x * 2, x), x, 32.0, 1e-5) is None
    assert trivial.check_precision(x, x * 2, (x, x), 32.0, 1e-5) is None
    assert trivial.check_precision(x, x * 2, x.double(), 32.0, 1e-5) is not None


def test_precision_check_leaves_shape_mismatches_to_the_comparison():
    truth = torch.arange(1.0, 5.0, dtype=torch.float64)
    assert trivial.check_precision(truth.float(), torch.tensor([2.5]), truth, 32.0, 1e-5) is None
    assert trivial.check_precision(truth.float(), torch.ones(3), truth, 32.0, 1e-5) is None
    assert trivial.check_precision(torch.ones(3), truth.float(), truth, 32.0, 1e-5) is None


def test_precision_check_with_non_finite_outputs_scores_the_finite_positions():
    truth = torch.tensor([math.inf, 1.0, 2.0], dtype=torch.float64)
    expected = torch.tensor([math.inf, 1.0, 2.0])
    assert trivial.check_precision(expected, torch.tensor([math.inf, 1.0, 2.0]), truth, 32.0, 1e-5) is None
    assert trivial.check_precision(expected, torch.tensor([math.inf, 1.0, 2.1]), truth, 32.0, 1e-5) is not None


def test_an_exact_predictor_does_not_stop_the_later_ones():
    # A constant task: the constant predictor is exact (skipped); the passthrough, tried after it, binds.
    expected = torch.full((8,), 2.0)
    x = expected + 1e-3 * torch.sin(torch.arange(8, dtype=torch.float32))
    violation = trivial.check_beats_trivial(expected, x.clone(), [x], None, MARGIN)
    assert violation is not None and "input 0 passed through" in violation.message


def test_a_candidate_exactly_at_the_margin_passes():
    # margin 1: a candidate exactly as far from the expected output as the zeros is allowed (the bound is ≤)
    expected = torch.tensor([2.0])
    assert trivial.check_beats_trivial(expected, torch.tensor([0.0]), [], None, 1.0) is None
    assert trivial.check_beats_trivial(expected, torch.tensor([-0.001]), [], None, 1.0) is not None


def test_the_constant_predictor_is_the_float64_mean():
    # float32 accumulation would give 0.25 (1e8 + 1 rounds to 1e8); the float64 mean is 0.5
    (constant,) = trivial.trivial_predictions([torch.tensor([1e8, 1.0, -1e8, 1.0])], [], None)[
        "constant (the output's mean)"]
    assert constant.tolist() == [0.5] * 4


# -- perturbed-family trials: a wrong answer within the tolerance is incorrect -------------------


def _trial(family: str, inputs, expected, truth):
    from tritongym.evaluator.reference import ReferenceTrial

    return ReferenceTrial(family=family, inputs=inputs, expected=expected, compute_ops=[], finite=True, truth=truth)


def _passed():
    from tritongym.evaluator.compare import Comparison

    return Comparison(passed=True, max_abs_error=0.0, max_rel_error=0.0, mismatch_fraction=0.0, message=None)


def _leaky(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, x, 0.01 * x)


def test_relu_for_leaky_relu_on_negated_inputs_fails_the_trial_with_where_and_how_much():
    from tritongym.evaluator.options import EvalOptions

    x = -torch.rand(16, 256, generator=torch.Generator().manual_seed(3))
    trial = _trial("negated", [x], _leaky(x), _leaky(x.double()))
    reviewed = trivial.review_family_trial(_passed(), trial, torch.relu(x), EvalOptions())
    assert not reviewed.passed
    message = reviewed.message
    assert message.startswith("output: " + trivial.HIDDEN_BY_TOLERANCE)
    assert "on the negated inputs" in message and "negative values" in message
    assert "relative L2 error 1 against a float64 evaluation" in message
    assert "no better than a trivial output (zeros" in message and "more than 32x" in message
    worst = torch.argmax((torch.relu(x).double() - _leaky(x.double())).abs()).item()
    assert f"largest errors in output at {(worst // 256, worst % 256)}" in message
    for word in ("tl.dot", "float16", "input_precision", "cast"):
        assert word not in message


def test_the_task_family_and_correct_or_failed_trials_are_left_as_they_are():
    from tritongym.evaluator.compare import Comparison
    from tritongym.evaluator.options import EvalOptions

    x = -torch.rand(8, 32, generator=torch.Generator().manual_seed(4))
    wrong = torch.relu(x)
    # The task's own inputs: the findings stay integrity findings (the parent's checks decide).
    assert trivial.review_family_trial(_passed(), _trial("get_inputs", [x], _leaky(x), _leaky(x.double())), wrong,
                                       EvalOptions()).passed
    # A correct output on a family passes.
    assert trivial.review_family_trial(_passed(), _trial("negated", [x], _leaky(x), _leaky(x.double())), _leaky(x),
                                       EvalOptions()).passed
    # A trial the comparison failed is not touched.
    failed = Comparison(False, 1.0, 1.0, 0.5, "output: mismatch")
    assert trivial.review_family_trial(failed, _trial("negated", [x], _leaky(x), None), wrong, EvalOptions()) is failed


def test_disabled_checks_and_the_precision_policy_decide_nothing_on_family_trials_either():
    from tritongym.evaluator.options import EvalOptions

    x = -torch.rand(8, 32, generator=torch.Generator().manual_seed(5))
    trial = _trial("negated", [x], _leaky(x), _leaky(x.double()))
    off = EvalOptions(disabled_checks=frozenset({"trivial_output", "precision_downgrade"}))
    assert trivial.review_family_trial(_passed(), trial, torch.relu(x), off).passed
    only_trivial = trivial.review_family_trial(_passed(), trial, torch.relu(x), EvalOptions(precision_policy="off"))
    assert not only_trivial.passed and "more than" not in only_trivial.message
    # Without a float64 truth the error is measured against the float32 reference.
    no_truth = trivial.review_family_trial(_passed(), _trial("negated", [x], _leaky(x), None), torch.relu(x),
                                           EvalOptions())
    assert not no_truth.passed and "against the float32 reference" in no_truth.message


@pytest.mark.parametrize("values", [[0.0, 0.0], [0.0, 1e-30], [float("nan"), 0.0], [float("inf"), 2.0],
                                    [float("nan"), float("-inf")], [-3.0, 4.0], [1e-40, 0.0]])
def test_the_all_zeros_predictor_is_scored_without_subtracting_zeros(values):
    # trivial_match scores "zeros" as 1 (or 0 for an all-zero output) instead of computing it: the
    # same figure relative_l2 gives, finite elements only.
    expected = [torch.tensor(values, dtype=torch.float32), torch.tensor([0.0])]
    assert trivial._zeros_error(expected) == trivial.relative_l2([torch.zeros_like(e) for e in expected], expected)


def test_the_constant_predictor_is_the_mean_of_the_finite_elements_in_the_outputs_dtype():
    finite = torch.tensor([1.0, 2.0, 6.0], dtype=torch.float16)
    assert torch.equal(trivial._constant_mean(finite), torch.full((3,), 3.0, dtype=torch.float16))
    mixed = torch.tensor([[1.0, float("nan")], [float("inf"), 3.0]])
    assert torch.equal(trivial._constant_mean(mixed), torch.full((2, 2), 2.0))
    nothing_finite = torch.tensor([float("nan"), float("-inf")])
    assert torch.equal(trivial._constant_mean(nothing_finite), torch.zeros(2))


def test_relative_l2_sums_every_leaf_when_one_holds_non_finite_values():
    # The masked path (a leaf with NaN/Inf) adds to the sums of the leaves before it.
    clean = (torch.tensor([3.0, 0.0]), torch.tensor([4.0, 0.0]))  # predicted, expected
    dirty = (torch.tensor([1.0, float("nan"), 1.0]), torch.tensor([0.0, 5.0, 0.0]))
    value = trivial.relative_l2([clean[0], dirty[0]], [clean[1], dirty[1]])
    # ‖y − e‖² = 1 + 1 + 1 (the NaN position left out); ‖e‖² = 16 + 0 (the 5 sits beside the NaN)
    assert value == pytest.approx((3.0 / 16.0) ** 0.5)
