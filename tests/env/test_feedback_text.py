"""The feedback's exact text, section by section: what the model reads after each verdict.

Every line of `FeedbackPolicy`'s rendering is asserted verbatim (with budgets large enough that
nothing is cut; tests/env/test_feedback_budget.py covers the cuts), so a changed word, a lost
section, a swapped priority or a wrong count shows.
"""

from __future__ import annotations

import pytest

from tritongym.env import FeedbackPolicy
from tritongym.env.feedback import _trim_lines, scrub_values
from tritongym.evaluator.result import (
    EvalResult,
    KernelLaunches,
    KernelProfile,
    Status,
    TimingReport,
    TrialReport,
    Violation,
)

BIG = 100_000
HEAD_OK = "Status: ok (reward 1.5). Every correctness trial passed and every integrity check passed."

TIMING = TimingReport(method="cuda_events", device_name="H100", reference_median_ms=2.0, candidate_median_ms=1.0,
                      reference_reps=30, candidate_reps=30)
PROFILE = [KernelProfile("k_small", 5.0, 1, True), KernelProfile("aten_mm", 40.0, 2, False),
           KernelProfile("mine", 30.0, 3, True), KernelProfile("aten_add", 15.0, 1, False),
           KernelProfile("aten_a", 3.0, 1, False), KernelProfile("aten_b", 2.0, 1, False),
           KernelProfile("aten_c", 2.0, 1, False), KernelProfile("aten_d", 1.5, 1, False),
           KernelProfile("aten_e", 1.5, 1, False)]  # 100 us in all
LAUNCHES = [KernelLaunches("mine", True, 6, "(4, 1, 1)"), KernelLaunches("lib_kernel", False, 2, "(1,)"),
            KernelLaunches("k_small", True, 2, "(1, 1, 1)")]


def ok_result(**changes) -> EvalResult:
    fields = dict(status=Status.OK, reward=1.5, speedup=2.0, speedup_vs_compile=1.25, timing=TIMING, coverage=0.35,
                  trials=[TrialReport(index=i, family=f, passed=True) for i, f in enumerate(["negated", "get_inputs",
                                                                                           "negated"])],
                  kernel_profile=PROFILE, triton_launches=LAUNCHES, torch_compute_ops=["aten.mm", "aten.add"])
    fields.update(changes)
    return EvalResult(**fields)


TIMING_TEXT = ("Speedup over the PyTorch reference: 2x. Median time: yours 1 ms, reference 2 ms (H100). "
               "35% of GPU time is in your own Triton kernels.")
PROFILE_HEAD = ["Top kernels by GPU time:", "  aten_mm (PyTorch): 40.0 us, 40%, ×2", "  mine (yours): 30.0 us, 30%, ×3",
                "  aten_add (PyTorch): 15.0 us, 15%, ×1"]
PROFILE_TAIL = ["  k_small (yours): 5.0 us, 5%, ×1", "  aten_a (PyTorch): 3.0 us, 3%, ×1",
                "  aten_b (PyTorch): 2.0 us, 2%, ×1", "  aten_c (PyTorch): 2.0 us, 2%, ×1",
                "  aten_d (PyTorch): 1.5 us, 2%, ×1"]
FOREIGN = "65% of GPU time is in PyTorch ops: aten_mm, aten_add, aten_a, aten_b. Move that work into your kernels."


def test_standard_text_of_a_correct_fast_kernel():
    text = FeedbackPolicy("standard", max_chars=BIG).render(ok_result())
    assert text == "\n\n".join([
        HEAD_OK, TIMING_TEXT, "Speedup over torch.compile: 1.25x.", "\n".join([*PROFILE_HEAD, FOREIGN])])


def test_full_text_of_a_correct_fast_kernel_and_its_section_priorities():
    policy = FeedbackPolicy("full", max_chars=BIG)
    result = ok_result()
    assert [p for p, _ in policy._sections(result)] == [0, 3, 1, 1, 2, 3, 2]
    assert policy.render(result) == "\n\n".join([
        HEAD_OK, "3 correctness trials passed (families: get_inputs, negated).", TIMING_TEXT,
        "Speedup over torch.compile: 1.25x.", "\n".join([*PROFILE_HEAD, *PROFILE_TAIL, FOREIGN]),
        "Your Triton kernels launched: mine ×6 (grid (4, 1, 1)), k_small ×2 (grid (1, 1, 1)).",
        "PyTorch compute ops your forward ran: aten.mm, aten.add (the reference runs: none).",
    ])
    with_reference = policy.render(ok_result(reference_compute_ops=["aten.mm", "aten.relu"]))
    assert with_reference.endswith("(the reference runs: aten.mm, aten.relu).")


def test_full_text_leaves_out_what_is_absent():
    bare = ok_result(speedup=None, speedup_vs_compile=None, timing=None, coverage=None, trials=[], kernel_profile=[],
                     triton_launches=[KernelLaunches("lib_kernel", False, 2, "(1,)")], torch_compute_ops=[])
    assert FeedbackPolicy("full", max_chars=BIG).render(bare) == HEAD_OK
    assert FeedbackPolicy("standard", max_chars=BIG).render(bare) == HEAD_OK


def test_minimal_text():
    assert FeedbackPolicy("minimal").render(ok_result()) == HEAD_OK + "\n\nSpeedup over the PyTorch reference: 2x."
    assert FeedbackPolicy("minimal").render(ok_result(speedup=None)) == HEAD_OK
    failed = EvalResult(status=Status.RUNTIME_ERROR, error="Traceback\n  File x\nValueError: bad shape (4, 8)\n")
    assert FeedbackPolicy("minimal").render(failed) == \
        "Status: runtime_error (reward 0).\n\nValueError: bad shape (4, 8)"


def test_a_profile_of_only_your_kernels_has_no_pytorch_line_and_zero_time_pytorch_ops_none_either():
    mine = [KernelProfile("mine", 3.0, 1, True), KernelProfile("yours_too", 1.0, 4, True)]
    assert FeedbackPolicy("standard")._profile_text(ok_result(kernel_profile=mine), top=3) == \
        "Top kernels by GPU time:\n  mine (yours): 3.0 us, 75%, ×1\n  yours_too (yours): 1.0 us, 25%, ×4"
    idle_torch = [*mine, KernelProfile("aten_view", 0.0, 1, False)]
    assert "PyTorch ops" not in FeedbackPolicy("standard")._profile_text(ok_result(kernel_profile=idle_torch), top=3)
    five = [KernelProfile(f"aten_{i}", 10.0 - i, 1, False) for i in range(5)]
    assert FeedbackPolicy("standard")._profile_text(ok_result(kernel_profile=five), top=1).splitlines()[-1] == \
        "100% of GPU time is in PyTorch ops: aten_0, aten_1, aten_2, aten_3. Move that work into your kernels."


def mismatch(index: int, message: str | None, **errors) -> TrialReport:
    values = dict(max_abs_error=2.5, max_rel_error=0.125, mismatch_fraction=0.0625) | errors
    return TrialReport(index=index, family="offset", passed=False, message=message, **values)


@pytest.mark.parametrize(("trial", "line"), [
    (mismatch(0, "out: 4 of 64 differ; first at (1, 2): expected 3.0, got 4.0; worst at (1, 2), (0, 0)"),
     "trial 0 (offset): out: max abs error 2.5, max rel error 0.125, 6.2% of elements mismatched; first mismatched "
     "position (1, 2); worst positions (1, 2), (0, 0)"),
    (mismatch(1, "out: 4 of 64 differ; first at [3]: expected 1, got 2"),
     "trial 1 (offset): out: max abs error 2.5, max rel error 0.125, 6.2% of elements mismatched; first mismatched "
     "position [3]"),
    (mismatch(2, "shape mismatch: expected shape (4,), got (5,)"),
     "trial 2 (offset): shape mismatch: max abs error 2.5, max rel error 0.125, 6.2% of elements mismatched; "
     "shape mismatch: expected shape (4,), got (5,)"),
    (mismatch(3, "output structure differs: tuple of 2 vs 3"),
     "trial 3 (offset): output structure differs: max abs error 2.5, max rel error 0.125, 6.2% of elements "
     "mismatched; output structure differs: tuple of 2 vs 3"),
    (mismatch(4, "out: values differ", max_rel_error=None, mismatch_fraction=None),
     "trial 4 (offset): out: max abs error 2.5, max rel error n/a, n/a of elements mismatched"),
    (mismatch(5, "no colon here"), "trial 5 (offset): output: max abs error 2.5, max rel error 0.125, 6.2% of "
                                   "elements mismatched"),
    (mismatch(6, None), "trial 6 (offset): output: max abs error 2.5, max rel error 0.125, 6.2% of elements "
                        "mismatched"),
    (mismatch(7, "a: b: c"), "trial 7 (offset): a: max abs error 2.5, max rel error 0.125, 6.2% of elements "
                             "mismatched"),
    (mismatch(8, None, max_abs_error=None), "trial 8 (offset): failed"),
    (mismatch(9, "NaN where the reference is finite: expected 1.5, got nan", max_abs_error=None),
     "trial 9 (offset): NaN where the reference is finite: values withheld"),
])
def test_each_trial_line(trial, line):
    assert FeedbackPolicy._trial_line(trial) == line


def test_long_trial_details_are_cut():
    positions = ", ".join(f"({i}, {i})" for i in range(40))  # > 120 characters
    line = FeedbackPolicy._trial_line(mismatch(0, f"out: 9 of 9 differ; first at (0, 0): x; worst at {positions}"))
    assert line.endswith("; worst positions " + positions[:120])
    long = "mismatch " + "m" * 300
    assert FeedbackPolicy._trial_line(mismatch(1, long)).endswith("; " + long[:200])
    assert FeedbackPolicy._trial_line(mismatch(2, long, max_abs_error=None)) == "trial 2 (offset): " + long[:200]


def test_failed_trials_are_listed_three_at_standard_and_all_at_full():
    trials = [mismatch(i, None) for i in range(4)] + [TrialReport(index=4, family="get_inputs", passed=True)]
    result = EvalResult(status=Status.INCORRECT, error="4 of 5 trials failed", trials=trials)
    lines = [FeedbackPolicy._trial_line(t) for t in trials[:4]]
    standard = FeedbackPolicy("standard", max_chars=BIG).render(result)
    assert standard == "\n\n".join(["Status: incorrect (reward 0).", "Error:\n4 of 5 trials failed",
                                    "\n".join(["4 of 5 correctness trials failed:", *("  " + s for s in lines[:3])])])
    full = FeedbackPolicy("full", max_chars=BIG).render(result)
    assert full.endswith("\n".join(["4 of 5 correctness trials failed:", *("  " + s for s in lines)]))


def test_violations_get_their_hint_unless_the_message_gives_advice_or_the_code_has_none():
    result = EvalResult(status=Status.INTEGRITY_VIOLATION, error="ignored when there are violations", violations=[
        Violation("input_mutation", "the forward wrote into input 0"),
        Violation("trivial_output", "constant output; compute it for real"),
        Violation("some_new_code", "a check without a hint"),
    ])
    assert FeedbackPolicy("standard", max_chars=BIG).render(result) == "\n\n".join([
        "Status: integrity_violation (reward 0).",
        "Violation input_mutation: the forward wrote into input 0. To fix: do not write into the input tensors; "
        "write results into new output tensors.",
        "Violation trivial_output: constant output; compute it for real",
        "Violation some_new_code: a check without a hint",
    ])


def test_scrubbed_values_and_the_error_share():
    assert scrub_values("trial 0: expected 0.5, got 0.25; then") == "trial 0: values withheld; then"
    assert scrub_values("expected shape (4,), got (5,)") == "expected shape (4,), got (5,)"
    # One long line (no newline to cut at): its last budget/2 characters.
    error = "E" * 1000 + "F" * 2000
    result = EvalResult(status=Status.RUNTIME_ERROR, error=error)
    assert FeedbackPolicy("standard")._sections(result)[1] == (0, "Error:\n" + "F" * 1250)
    # 17-character lines: with the marker (21) exactly ten fit in 201 characters, nine in 200.
    lines = [f"frame {i:03d} yyyyyyy" for i in range(30)] + ["RuntimeError: end"]
    assert {len(line) for line in lines} == {17}
    text = "\n".join(lines)
    assert len(_trim_lines(text, 201).splitlines()) == 11 and len(_trim_lines(text, 200).splitlines()) == 10
    (_, section) = FeedbackPolicy("standard", max_chars=400)._sections(EvalResult(status=Status.RUNTIME_ERROR,
                                                                                   error=text))[1]
    assert section == "Error:\n" + _trim_lines(text, 200)


def test_trimmed_lines_are_distinct_in_order_and_keep_the_first_and_the_last():
    lines = [f"line {i:02d}" for i in range(40)]
    text = "\n".join(lines)
    for budget in (60, 100, 150, 200):
        kept = [line for line in _trim_lines(text, budget).splitlines() if line != "… [lines omitted] …"]
        assert len(_trim_lines(text, budget)) <= budget
        assert kept[0] == lines[0] and kept[-1] == lines[-1]
        assert len(set(kept)) == len(kept)
        assert [lines.index(line) for line in kept] == sorted(lines.index(line) for line in kept)


def test_a_single_section_over_the_budget_is_cut_and_a_droppable_one_dropped():
    result = ok_result(speedup=3.0, speedup_vs_compile=None, timing=None, coverage=None, kernel_profile=[])
    assert FeedbackPolicy("standard", max_chars=len(HEAD_OK) + 5).render(result) == HEAD_OK


def test_a_trial_wrong_within_the_tolerance_is_reported_whole_without_values_up_to_600_characters():
    from tritongym.evaluator.trivial import HIDDEN_BY_TOLERANCE

    message = (f"out: each element {HIDDEN_BY_TOLERANCE} the tolerance is wide; expected 1.5, got 2.5; "
               "the relative L2 error is 0.4")
    assert FeedbackPolicy._trial_line(mismatch(3, message)) == (
        f"trial 3 (offset): out: each element {HIDDEN_BY_TOLERANCE} the tolerance is wide; values withheld; "
        "the relative L2 error is 0.4")
    long = f"out: {HIDDEN_BY_TOLERANCE} " + "x" * 700
    assert FeedbackPolicy._trial_line(mismatch(4, long)) == "trial 4 (offset): " + long[:600]
