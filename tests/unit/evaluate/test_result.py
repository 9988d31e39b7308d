"""Tests for tritongym.evaluator.result (the contract) and tritongym.evaluator.reward."""

from __future__ import annotations

import json
import math

import pytest

from tritongym.evaluator.result import (
    STATUS_PRECEDENCE,
    EvalResult,
    KernelLaunches,
    Notice,
    NoticeCode,
    Status,
    TimingReport,
    TrialReport,
    Violation,
    ViolationCode,
)
from tritongym.evaluator.reward import RewardConfig, compute_reward

CONTRACT_STATUSES = [
    "ok",
    "compile_error",
    "runtime_error",
    "incorrect",
    "integrity_violation",
    "timeout",
    "crashed",
    "unsupported",
]


def full_result(**overrides) -> EvalResult:
    """A result with every field set to a non-default value."""
    fields = dict(
        status=Status.OK,
        reward=1.25,
        violations=[Violation(ViolationCode.INPUT_MUTATION, "changed input 0")],
        notices=[Notice(NoticeCode.TIMING_UNAVAILABLE, "no GPU"), Notice(NoticeCode.STATIC_FINDING, "try")],
        error="trial 0: boom",
        torch_compute_ops=["aten::mul", "aten::add"],
        reference_compute_ops=["aten::relu"],
        speedup=1.5,
        timing=TimingReport(
            method="cuda_events",
            device_name="H100",
            reference_median_ms=1.5,
            candidate_median_ms=1.0,
            reference_reps=30,
            candidate_reps=30,
            reference_host_median_ms=1.6,
            candidate_host_median_ms=1.1,
            meaningful=True,
        ),
        coverage=0.75,
        trials=[
            TrialReport(
                index=0,
                family="get_inputs",
                passed=True,
                max_abs_error=1e-7,
                max_rel_error=2e-7,
                mismatch_fraction=0.0,
                message=None,
            ),
            TrialReport(
                index=1,
                family="get_inputs",
                passed=False,
                max_abs_error=0.5,
                max_rel_error=1.0,
                mismatch_fraction=0.25,
                message="output: 1 of 4 elements differ",
            ),
        ],
        triton_launches=[
            KernelLaunches(kernel="relu_kernel", defined_in_candidate=True, launches=2, last_grid="(4,)")
        ],
        device="cuda",
        sandbox="bwrap",
        problem_id="builtin/02_leaky_relu",
        problem_hash="a" * 64,
        solution_hash="b" * 64,
        duration_s=4.5,
        candidate_log="hello\n",
    )
    fields.update(overrides)
    return EvalResult(**fields)


# -- enums -----------------------------------------------------------------------------------------


def test_status_values_are_exactly_the_contract_strings():
    assert sorted(s.value for s in Status) == sorted(CONTRACT_STATUSES)
    for value in CONTRACT_STATUSES:
        assert Status(value) == value and str(Status(value)) == value


def test_status_precedence_lists_every_status_once_crash_first_ok_last():
    assert sorted(STATUS_PRECEDENCE) == sorted(Status)
    assert STATUS_PRECEDENCE[0] == Status.CRASHED and STATUS_PRECEDENCE[-1] == Status.OK


def test_violation_codes_are_snake_case_and_print_as_their_value():
    issue_codes = {"input_mutation"}
    assert issue_codes <= {c.value for c in ViolationCode}
    for code in ViolationCode:
        assert code.value == code.value.lower() and " " not in code.value
        assert str(code) == code.value and json.dumps(code) == f'"{code.value}"'


@pytest.mark.parametrize("status", list(Status))
def test_correct_is_derived_from_status(status):
    assert EvalResult(status=status).correct is (status == Status.OK)


# -- serialisation ---------------------------------------------------------------------------------


def test_to_dict_has_every_contract_key_with_json_types():
    data = full_result().to_dict()
    for key in (
        "status",
        "correct",
        "reward",
        "violations",
        "torch_compute_ops",
        "speedup",
        "timing",
        "error",
    ):
        assert key in data
    assert data["status"] == "ok" and type(data["status"]) is str
    assert data["correct"] is True
    assert data["violations"] == [{"code": "input_mutation", "message": "changed input 0"}]
    assert data["timing"]["candidate_median_ms"] == 1.0
    assert data["trials"][1]["mismatch_fraction"] == 0.25
    assert json.loads(json.dumps(data)) == data


@pytest.mark.parametrize("status", list(Status))
def test_dict_round_trip_is_lossless(status):
    result = full_result(status=status)
    again = EvalResult.from_dict(result.to_dict())
    assert again == result
    assert again.to_dict() == result.to_dict()
    assert isinstance(again.status, Status)
    assert isinstance(again.timing, TimingReport) and isinstance(again.trials[0], TrialReport)
    assert isinstance(again.triton_launches[0], KernelLaunches) and isinstance(again.violations[0], Violation)


def test_json_round_trip_is_lossless_and_strict():
    result = full_result()
    text = result.to_json()
    assert "NaN" not in text and "Infinity" not in text
    assert EvalResult.from_dict(json.loads(text)) == result
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON constant {name}"))


def test_minimal_result_round_trips_with_nulls():
    result = EvalResult(status=Status.TIMEOUT, error="too slow")
    data = json.loads(result.to_json())
    assert data["speedup"] is None and data["timing"] is None and data["reward"] == 0.0
    assert data["violations"] == [] and data["torch_compute_ops"] == [] and data["correct"] is False
    assert EvalResult.from_dict(data) == result


def test_from_dict_ignores_unknown_keys_and_fills_defaults():
    data = {"status": "crashed", "correct": False, "future_field": {"x": 1}}
    result = EvalResult.from_dict(data)
    assert result.status == Status.CRASHED and result.reward == 0.0 and result.violations == []


def test_from_dict_rejects_an_unknown_status():
    with pytest.raises(ValueError):
        EvalResult.from_dict({"status": "passed"})


def test_summary_is_readable():
    text = full_result(status=Status.INTEGRITY_VIOLATION).summary()
    assert text.splitlines()[0].startswith("status: integrity_violation   reward: 1.250")
    assert "violation [input_mutation]: changed input 0" in text
    assert "trials: 1/2 passed" in text
    assert "trial 1 (get_inputs): output: 1 of 4 elements differ" in text
    assert "triton launches: relu_kernel×2" in text
    assert "note [timing_unavailable]: no GPU" in text
    assert "{" not in text.splitlines()[0]


# -- reward ----------------------------------------------------------------------------------------


def ok(speedup=None, timing=None, coverage=None) -> EvalResult:
    return EvalResult(status=Status.OK, speedup=speedup, timing=timing, coverage=coverage)


def meaningful_timing(meaningful: bool = True) -> TimingReport:
    return TimingReport(
        method="m",
        device_name="d",
        reference_median_ms=2.0,
        candidate_median_ms=1.0,
        reference_reps=3,
        candidate_reps=3,
        meaningful=meaningful,
    )


@pytest.mark.parametrize(
    ("speedup", "reward"),
    [
        (None, 0.5),
        (0.0, 0.5),
        (0.5, 0.75),
        (1.0, 1.0),
        (2.0, 1.5),
        (3.0, 2.0),
        (3.5, 2.0),
        (1e9, 2.0),
        (-2.0, 0.5),
        (math.inf, 0.5),
        (math.nan, 0.5),
    ],
)
def test_default_reward_is_half_correct_plus_half_capped_speedup(speedup, reward):
    """Issue formula: 0.5*correct + 0.5*min(speedup, 3) (negative and non-finite speedups add nothing)."""
    assert compute_reward(ok(speedup=speedup, timing=meaningful_timing())) == pytest.approx(reward)


@pytest.mark.parametrize("status", [s for s in Status if s != Status.OK])
def test_every_non_ok_status_earns_zero_whatever_its_speedup(status):
    result = EvalResult(status=status, speedup=3.0, timing=meaningful_timing(), coverage=1.0)
    assert compute_reward(result) == 0.0
    assert compute_reward(result, RewardConfig(correct_weight=7.0)) == 0.0


def test_cpu_ok_without_timing_earns_exactly_the_correct_weight():
    assert compute_reward(ok()) == 0.5
    assert compute_reward(ok(), RewardConfig(correct_weight=1.0)) == 1.0


def test_speedup_from_timing_marked_not_meaningful_is_ignored():
    assert compute_reward(ok(speedup=2.0, timing=meaningful_timing(meaningful=False))) == 0.5
    assert compute_reward(ok(speedup=2.0, timing=meaningful_timing(meaningful=True))) == 1.5


def test_reward_weights_and_cap_are_configurable():
    config = RewardConfig(correct_weight=1.0, speedup_weight=2.0, speedup_cap=1.5, coverage_weight=0.0)
    assert (
        compute_reward(ok(speedup=4.0, timing=meaningful_timing(), coverage=1.0), config) == 1.0 + 2.0 * 1.5
    )


def test_coverage_term_is_clipped_to_one():
    config = RewardConfig(coverage_weight=1.0)
    assert compute_reward(ok(coverage=2.0), config) == 1.5
    assert compute_reward(ok(coverage=-1.0), config) == 0.5
