"""Feedback levels and budgets; expected values never reach the model."""

from __future__ import annotations

import pytest
import torch

from tritongym.env import FeedbackPolicy
from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.options import Tolerance
from tritongym.evaluator.result import (
    EvalResult,
    KernelProfile,
    Status,
    TimingReport,
    TrialReport,
    Violation,
)


def incorrect_result() -> tuple[EvalResult, list[str]]:
    """An `incorrect` verdict whose messages come from the evaluator's own comparison."""
    expected = torch.linspace(-3.0, 3.0, 64).reshape(8, 8)
    actual = expected.clone()
    actual[1, 2] = 123.25
    actual[5, 7] = -77.5
    comparison = compare_outputs(expected, actual, lambda dtype: Tolerance(1e-2, 1e-2))
    assert not comparison.passed and "expected" in comparison.message  # the raw message carries the value
    trials = [TrialReport(index=i, family="get_inputs", passed=False, max_abs_error=comparison.max_abs_error,
                          max_rel_error=comparison.max_rel_error, mismatch_fraction=comparison.mismatch_fraction,
                          message=comparison.message) for i in range(2)]
    error = f"2 of 2 trials failed; trial 0: {comparison.message}"
    secrets = [f"{expected[1, 2].item():.6g}", "123.25"]
    return EvalResult(status=Status.INCORRECT, error=error, trials=trials), secrets


@pytest.mark.parametrize("level", ["minimal", "standard", "full"])
def test_no_level_shows_expected_or_produced_values(level):
    result, secrets = incorrect_result()
    text = FeedbackPolicy(level).render(result)
    assert text.startswith("Status: incorrect")
    for value in secrets:
        assert value not in text


def test_standard_mismatch_report_names_output_errors_fraction_and_position():
    result, _ = incorrect_result()
    text = FeedbackPolicy("standard").render(result)
    assert "2 of 2 correctness trials failed" in text
    assert "max abs error 125, max rel error 61.2" in text  # |123.25 - (-2.0476)|, relative to 2.0476
    assert "3.1% of elements mismatched" in text  # 2 of 64
    assert "first mismatched position (1, 2)" in text


def test_an_unwritten_element_is_named_in_the_trial_line_without_its_value():
    expected = torch.randn(8, 8)
    actual = expected.clone()
    actual[7, 7] = float("nan")  # what an element no kernel wrote reads in a checked trial
    comparison = compare_outputs(expected, actual, lambda dtype: Tolerance(1e-2, 1e-2))
    trials = [TrialReport(index=0, family="get_inputs", passed=False, max_abs_error=comparison.max_abs_error,
                          max_rel_error=comparison.max_rel_error, mismatch_fraction=comparison.mismatch_fraction,
                          message=comparison.message)]
    result = EvalResult(status=Status.INCORRECT, error=f"1 of 1 trials failed; trial 0: {comparison.message}",
                        trials=trials)
    text = FeedbackPolicy("standard").render(result)
    assert ("max abs error 0, max rel error 0, 1.6% of elements mismatched; first mismatched position (7, 7); "
            "1 of them NaN or Inf where the reference is finite (an element no kernel wrote reads NaN here)") in text
    assert f"{expected[7, 7].item():.6g}" not in text


def test_violations_carry_what_to_change_and_the_gpu_details_show_at_full():
    result = EvalResult(
        status=Status.INTEGRITY_VIOLATION, error="fallback",
        violations=[Violation("pytorch_fallback", "the forward ran every compute op of the reference in PyTorch")],
        kernel_profile=[KernelProfile("ampere_sgemm", 420.0, 3, False), KernelProfile("my_kernel", 580.0, 3, True)],
    )
    standard = FeedbackPolicy("standard").render(result)
    assert "Violation pytorch_fallback" in standard and "To fix: compute the task's operators" in standard
    assert "42% of GPU time is in PyTorch ops: ampere_sgemm" in standard
    minimal = FeedbackPolicy("minimal").render(result)
    assert "pytorch_fallback" in minimal and "GPU time" not in minimal


def test_speedup_and_timings_are_reported():
    timing = TimingReport(method="cuda_events", device_name="H100", reference_median_ms=2.0, candidate_median_ms=1.0,
                          reference_reps=30, candidate_reps=30)
    result = EvalResult(status=Status.OK, reward=1.0, speedup=2.0, timing=timing, coverage=0.9)
    text = FeedbackPolicy("standard").render(result)
    assert "Speedup over the PyTorch reference: 2x" in text
    assert "yours 1 ms, reference 2 ms (H100)" in text
    assert "90% of GPU time is in your own Triton kernels" in text


@pytest.mark.parametrize("level", ["minimal", "standard", "full"])
def test_budget_is_never_exceeded_and_the_status_survives(level):
    traceback = "\n".join(f'  File "candidate.py", line {i}, in forward\n    x = f{i}(x)' for i in range(400))
    result = EvalResult(status=Status.RUNTIME_ERROR, error=traceback + "\nRuntimeError: the last line matters")
    policy = FeedbackPolicy(level, max_chars=500)
    text = policy.render(result)
    assert len(text) <= 500
    assert text.startswith("Status: runtime_error")
    if level != "full":
        assert "RuntimeError: the last line matters" in text


def test_invalid_level_and_budget_are_refused():
    with pytest.raises(ValueError, match="minimal, standard, full"):
        FeedbackPolicy("verbose")
    with pytest.raises(ValueError, match="at least 80"):
        FeedbackPolicy("standard", max_chars=10)


def test_feedback_names_the_worst_positions_without_values():
    from tritongym import EvalResult, Status
    from tritongym.env.feedback import FeedbackPolicy
    from tritongym.evaluator.result import TrialReport

    message = ("output: 4 of 20 elements (20.0%) differ beyond atol=0.01, rtol=0.01; first at (0, 0): "
               "expected 0.25, got 0.5; worst at (2, 2), (1, 2), (3, 4)")
    trial = TrialReport(index=0, family="get_inputs", passed=False, max_abs_error=5.0, max_rel_error=1.0,
                        mismatch_fraction=0.2, message=message)
    result = EvalResult(status=Status.INCORRECT, trials=[trial], error="1 of 1 trials failed; trial 0: " + message)
    text = FeedbackPolicy("standard").render(result)
    assert "worst positions (2, 2), (1, 2), (3, 4)" in text
    assert "0.25" not in text and "got 0.5" not in text
