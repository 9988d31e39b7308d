"""The parent's judgement of a clean-room replay (`_Evaluation._judge_replay`), by value.

The candidate's own outputs are a filter: a candidate can compute them with torch and hide that
work from its launch log (`tests/adversarial/cases/harness_clean_forged_accuracy_*.py`). So every
check the parent makes of a trial's outputs, not only the tolerance, must hold for what the clean
room's re-execution of the log gives: better than every trivial output, float32-accurate against
the float64 evaluation, and, on a perturbed family, the family review. Each refusal here has its
honest twin: the same record replayed to the reference's own outputs passes.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import tritongym
from tritongym.evaluator import replays
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.parent import _Evaluation
from tritongym.evaluator.result import NoticeCode, ViolationCode

PROBLEM = tritongym.builtin_suite()[0]


def evaluation(**options: Any) -> _Evaluation:
    return _Evaluation(problem=PROBLEM, solution_source="", options=EvalOptions(device="cpu", **options),
                       device="cpu", sandbox="none")


def replayed(outputs: Any) -> dict[str, Any]:
    return {"outputs": outputs, "work": [0, 0], "moved": [0, 0], "compute_ops": []}


def mean_trial(family: str = "get_inputs") -> replays.TrialRecord:
    """A U(0, 1) mean: 0.5 +- 0.001 on every draw, so the constant 0.5 is within any 1e-2 tolerance."""
    generator = torch.Generator().manual_seed(1)
    x = torch.rand(4096, generator=generator, dtype=torch.float64)
    truth = x.mean()
    return replays.TrialRecord(index=1, family=family, inputs=[x.float()], expected=x.float().mean(),
                               compute_work=(4096, 4096), log={}, truth=truth,
                               previous_mean=[torch.tensor(0.4987)])


def vector_trial(family: str = "get_inputs", scale: float = 1.0) -> replays.TrialRecord:
    generator = torch.Generator().manual_seed(2)
    truth = torch.randn(512, generator=generator, dtype=torch.float64) * scale
    inputs = [torch.randn(512, generator=generator)]
    return replays.TrialRecord(index=3, family=family, inputs=inputs, expected=truth.float(),
                               compute_work=(512, 512), log={}, truth=truth)


def test_the_reference_outputs_replayed_pass_every_check():
    for record in (mean_trial(), vector_trial(), vector_trial("scaled")):
        run = evaluation()
        assert run._judge_replay(record, replayed(record.expected.clone())) is True
        assert run.violations == {} and run.notices == []


def test_a_replay_no_better_than_a_trivial_output_is_refused_though_within_tolerance():
    record = mean_trial()
    run = evaluation(precision_policy="off")
    assert run._judge_replay(record, replayed(torch.tensor(0.5))) is False
    violation = run.violations[ViolationCode.TRIVIAL_OUTPUT]
    assert violation.message.startswith("trial 1, measured on the clean room's re-execution of the launch log")
    assert "mean of previous trials" in violation.message  # the record's baseline, kept from the trial


def test_without_the_kept_baseline_the_constant_is_not_caught_by_it():
    # The baseline is what makes the constant trivial on a scalar: the record must carry it.
    record = mean_trial()
    record.previous_mean = None
    run = evaluation(precision_policy="off")
    assert run._judge_replay(record, replayed(torch.tensor(0.5))) is True


def test_a_replay_far_less_accurate_than_float32_is_a_precision_downgrade():
    record = vector_trial()
    run = evaluation()
    downgraded = record.expected * (1 + 1e-4)  # ~1e-4 relative: inside 1e-2, 1000x float32's error
    assert run._judge_replay(record, replayed(downgraded)) is False
    assert "re-execution of the launch log" in run.violations[ViolationCode.PRECISION_DOWNGRADE].message
    assert ViolationCode.TRIVIAL_OUTPUT not in run.violations


def test_the_precision_policy_decides_for_the_replay_as_for_the_candidate():
    record = vector_trial()
    downgraded = record.expected * (1 + 1e-4)
    reported = evaluation(precision_policy="report")
    assert reported._judge_replay(record, replayed(downgraded)) is True
    assert reported.violations == {}
    assert [n.code for n in reported.notices] == [NoticeCode.CHECK_DISABLED]
    assert "precision_downgrade" in reported.notices[0].message
    off = evaluation(precision_policy="off")
    assert off._judge_replay(record, replayed(downgraded)) is True
    assert off.violations == {} and off.notices == []


def test_a_disabled_check_is_a_notice_and_the_replay_passes():
    record = mean_trial()
    run = evaluation(disabled_checks=["trivial_output", "precision_downgrade"])
    assert run._judge_replay(record, replayed(torch.tensor(0.5))) is True
    assert run.violations == {}
    assert {n.code for n in run.notices} == {NoticeCode.CHECK_DISABLED}
    assert any("trivial_output" in n.message for n in run.notices)


def test_a_truth_less_trial_says_precision_was_not_checked_once():
    record = vector_trial()
    record.truth = None
    run = evaluation()
    assert run._judge_replay(record, replayed(record.expected.clone())) is True
    assert run._judge_replay(record, replayed(record.expected.clone())) is True
    assert [n.code for n in run.notices] == [NoticeCode.PRECISION_UNCHECKED]


def test_a_perturbed_family_replayed_to_zeros_fails_the_family_review():
    # Outputs small enough that zeros pass the per-element tolerance: the family review's case.
    record = vector_trial("scaled", scale=1e-3)
    run = evaluation()
    assert run._judge_replay(record, replayed(torch.zeros(512))) is False
    message = run.violations[ViolationCode.EVIDENCE_MISMATCH].message
    assert "trivial output" in message and "trial 3" in message


@pytest.mark.parametrize("outputs", [lambda e: e + 1.0, lambda e: e[:10], lambda e: [e, e]])
def test_a_replay_outside_the_tolerance_is_an_evidence_mismatch(outputs):
    record = vector_trial()
    run = evaluation()
    assert run._judge_replay(record, replayed(outputs(record.expected.clone()))) is False
    assert list(run.violations) == [ViolationCode.EVIDENCE_MISMATCH]
