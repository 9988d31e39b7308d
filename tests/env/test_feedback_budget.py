"""Feedback budgets at their boundaries: which sections go first, the final cut, the trimmed error.

`FeedbackPolicy.render` drops the lowest-priority sections first (the later of equal ones), never a
priority-0 one, and cuts what is still too long with a marker, so that the text is never longer than
the budget, even when the top-priority sections alone exceed it.
"""

from __future__ import annotations

import pytest

from tritongym.env import FeedbackPolicy
from tritongym.env.feedback import DEFAULT_BUDGETS, _trim_lines
from tritongym.evaluator.result import EvalResult, Status, TimingReport, TrialReport, Violation

MARKER = "\n… [feedback truncated]"


def violations(n: int, width: int = 60) -> list[Violation]:
    # "; " in the message: the evaluator's own advice, so no hint is appended (lengths stay known).
    return [Violation("input_mutation", f"v{i}; " + "x" * width) for i in range(n)]


def test_top_priority_sections_alone_over_the_budget_are_cut_at_exactly_the_budget_with_the_marker():
    result = EvalResult(status=Status.INTEGRITY_VIOLATION, error="e", violations=violations(4), speedup=1.5)
    policy = FeedbackPolicy("standard", max_chars=200)
    full = "\n\n".join([f"Status: integrity_violation (reward {0:.3g}).",
                        *(f"Violation input_mutation: v{i}; " + "x" * 60 for i in range(4))])
    text = policy.render(result)
    # The speedup section (priority 1) is dropped; the priority-0 ones are kept and cut.
    assert text == full[: 200 - len(MARKER)] + MARKER
    assert len(text) == 200
    assert "Speedup" not in text


def test_text_exactly_at_the_budget_is_returned_whole_and_one_over_is_cut():
    result = EvalResult(status=Status.INTEGRITY_VIOLATION, error="e", violations=violations(2))
    whole = FeedbackPolicy("standard").render(result)
    assert FeedbackPolicy("standard", max_chars=len(whole)).render(result) == whole
    cut = FeedbackPolicy("standard", max_chars=len(whole) - 1).render(result)
    assert cut == whole[: len(whole) - 1 - len(MARKER)] + MARKER and len(cut) == len(whole) - 1


def trial(index: int) -> TrialReport:
    return TrialReport(index=index, family="get_inputs", passed=False, max_abs_error=1.0, max_rel_error=0.5,
                       mismatch_fraction=0.25, message="out: 1 of 4 differ")


def test_the_lowest_priority_sections_go_first_and_the_rest_keep_their_order():
    timing = TimingReport(method="cuda_events", device_name="H100", reference_median_ms=2.0, candidate_median_ms=1.0,
                          reference_reps=30, candidate_reps=30)
    result = EvalResult(status=Status.INCORRECT, error="wrong", trials=[trial(0)], speedup=2.0, timing=timing)
    sections = FeedbackPolicy("standard")._sections(result)
    assert [p for p, _ in sections] == [0, 0, 1, 1]  # head, error, trials, timing
    whole = "\n\n".join(s for _, s in sections)
    # One over the whole: the later of the two priority-1 sections (timing) goes, nothing is cut.
    without_timing = "\n\n".join(s for _, s in sections[:3])
    assert FeedbackPolicy("standard", max_chars=len(whole) - 1).render(result) == without_timing
    assert FeedbackPolicy("standard", max_chars=len(without_timing)).render(result) == without_timing
    # One under that: the trials section goes too, and the two priority-0 sections fit uncut.
    top = "\n\n".join(s for _, s in sections[:2])
    assert FeedbackPolicy("standard", max_chars=len(without_timing) - 1).render(result) == top
    assert FeedbackPolicy("standard", max_chars=max(80, len(top))).render(result) == top


def test_a_lower_priority_section_goes_before_an_earlier_higher_one():
    # full level: the passed-trials line has priority 3, the timing line 1; the higher number goes.
    result = EvalResult(status=Status.OK, reward=1.0, speedup=3.0,
                        trials=[TrialReport(index=0, family="get_inputs", passed=True)])
    sections = FeedbackPolicy("full")._sections(result)
    assert [p for p, _ in sections] == [0, 3, 1]
    whole = "\n\n".join(s for _, s in sections)
    text = FeedbackPolicy("full", max_chars=len(whole) - 1).render(result)
    assert text == sections[0][1] + "\n\n" + sections[2][1]


def test_default_budgets_and_the_smallest_allowed():
    assert {level: FeedbackPolicy(level).budget for level in DEFAULT_BUDGETS} == \
        {"minimal": 600, "standard": 2500, "full": 6000}
    assert FeedbackPolicy("full", max_chars=80).budget == 80
    with pytest.raises(ValueError, match="max_chars must be at least 80, got 79"):
        FeedbackPolicy("standard", max_chars=79)
    with pytest.raises(ValueError, match="feedback level must be one of minimal, standard, full, got 'loud'"):
        FeedbackPolicy("loud")


def test_trim_lines_keeps_head_and_tail_around_a_marker():
    text = "\n".join(f"line{i}" for i in range(10))  # 10 lines of 5 chars
    assert _trim_lines(text, len(text)) == text
    # The marker and its two newlines use 21; each line costs 6; lines are taken tail, head, tail, ...
    assert _trim_lines(text, 38) == "line0\n… [lines omitted] …\nline9"
    assert _trim_lines(text, 33) == "line0\n… [lines omitted] …\nline9"
    assert _trim_lines(text, 32) == "… [lines omitted] …\nline9"
    assert _trim_lines(text, 27) == "… [lines omitted] …\nline9"
    assert _trim_lines(text, 26) == text[-26:]  # not even the last line fits with the marker: the raw tail
    assert _trim_lines("a" * 30, 10) == "a" * 10


def test_trim_lines_tail_is_consecutive_lines():
    # Found by mutation testing: the tail was lines[-1], lines[-3], lines[-5], ... (every other line
    # of a traceback's end dropped without a marker).
    text = "\n".join(f"line{i}" for i in range(10))
    assert _trim_lines(text, 40) == "line0\n… [lines omitted] …\nline8\nline9"


def test_the_error_section_gets_half_the_budget_but_at_least_200():
    error = "\n".join(f"frame {i:03d} " + "y" * 20 for i in range(200)) + "\nRuntimeError: last"
    result = EvalResult(status=Status.RUNTIME_ERROR, error=error)
    for budget, share in ((2500, 1250), (300, 200)):
        (_, head), (_, section) = FeedbackPolicy("standard", max_chars=budget)._sections(result)
        assert section == "Error:\n" + _trim_lines(error, share)
        assert section.endswith("RuntimeError: last")


def test_minimal_cuts_its_one_line_to_the_budget_left_after_the_head_but_keeps_40():
    line = "RuntimeError: " + "z" * 800
    result = EvalResult(status=Status.RUNTIME_ERROR, error="Traceback\n" + line)
    head = f"Status: runtime_error (reward {0:.3g})."
    assert FeedbackPolicy("minimal").render(result) == head + "\n\n" + line[: 600 - len(head) - 4]
    # 80 - 33 - 4 = 43 characters of the line: it fits without the final cut.
    assert FeedbackPolicy("minimal", max_chars=80).render(result) == head + "\n\n" + line[:43]
    violated = EvalResult(status=Status.INTEGRITY_VIOLATION, violations=[Violation("trivial_output", "a zero output")],
                          error="ignored\nlast")
    assert FeedbackPolicy("minimal").render(violated) == \
        "Status: integrity_violation (reward 0).\n\nViolation trivial_output: a zero output"


def test_minimal_keeps_at_least_40_characters_of_its_line_and_then_cuts():
    message = "a zero output " + "w" * 200
    violated = EvalResult(status=Status.INTEGRITY_VIOLATION, violations=[Violation("trivial_output", message)])
    head = "Status: integrity_violation (reward 0)."  # 39: 80 - 39 - 4 = 37 < 40
    line = f"Violation trivial_output: {message}"[:40]
    cut = (head + "\n\n" + line)[: 80 - len(MARKER)] + MARKER
    assert FeedbackPolicy("minimal", max_chars=80).render(violated) == cut
    assert FeedbackPolicy("minimal", max_chars=81).render(violated) == head + "\n\n" + line
