"""The KernelGYM mapping field by field, each absent field's default and each verdict's response.

Pure functions (`KernelGymRequest` → `options_from`, a stored `JobRecord` → `to_kernelgym`), so every
field is asserted by value; tests/service/test_kernelgym.py runs the same mapping over HTTP.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from tritongym.service.kernelgym import (
    KernelGymBatch,
    KernelGymRequest,
    options_from,
    status_of,
    to_kernelgym,
)
from tritongym.service.store import JobRecord, JobState

MINIMAL = {"task_id": "t1", "kernel_code": "class ModelNew: pass"}


def test_every_absent_field_takes_kernelgyms_default():
    request = KernelGymRequest(**MINIMAL)
    assert request.reference_code is None
    assert request.backend == "triton" and request.entry_point == "Model"
    assert (request.num_correct_trials, request.num_perf_trials, request.timeout) == (5, 100, 300)
    assert request.reference_backend is None and request.force_refresh is False
    assert request.enable_profiling is None and request.measure_performance is None and request.run_performance is None
    # Absent fields set nothing beyond KernelGYM's own defaults: eager baseline, speed measured, profiled.
    assert options_from(request) == {"num_trials": 5, "timing_reps": 100, "timing_blocks": 3, "timeout": 300.0}
    assert isinstance(options_from(request)["timeout"], float)


def test_unknown_fields_are_ignored_and_required_ones_are_required():
    request = KernelGymRequest(**MINIMAL, toolkit="x", priority="high", workflow={"a": 1})
    assert options_from(request) == options_from(KernelGymRequest(**MINIMAL))
    for missing in ("task_id", "kernel_code"):
        with pytest.raises(ValidationError, match=missing):
            KernelGymRequest(**{k: v for k, v in MINIMAL.items() if k != missing})


@pytest.mark.parametrize(("field", "value"), [
    ("task_id", ""), ("task_id", "x" * 101), ("num_correct_trials", 0), ("num_correct_trials", 101),
    ("num_perf_trials", 0), ("num_perf_trials", 10001), ("timeout", 0), ("timeout", 86401),
])
def test_bounds_are_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        KernelGymRequest(**{**MINIMAL, field: value})


@pytest.mark.parametrize(("field", "value"), [
    ("task_id", "x" * 100), ("num_correct_trials", 1), ("num_correct_trials", 100), ("num_perf_trials", 1),
    ("num_perf_trials", 10000), ("timeout", 86400), ("timeout", 0.001),
])
def test_bounds_are_inclusive(field, value):
    assert getattr(KernelGymRequest(**{**MINIMAL, field: value}), field) == value


@pytest.mark.parametrize(("reps", "blocks"), [(1, 1), (2, 2), (3, 3), (4, 3), (100, 3)])
def test_timing_blocks_are_at_most_three_and_never_more_than_the_reps(reps, blocks):
    options = options_from(KernelGymRequest(**MINIMAL, num_perf_trials=reps))
    assert (options["timing_reps"], options["timing_blocks"]) == (reps, blocks)


@pytest.mark.parametrize(("backend", "compile_"), [
    ("torch_compile", True), ("torch-compile", True), ("compile", True), ("TORCH_COMPILE", True),
    ("Torch-Compile", True), ("eager", False), ("torch", False), ("", False), (None, False), ("compiled", False),
])
def test_reference_backend_chooses_the_baseline(backend, compile_):
    options = options_from(KernelGymRequest(**MINIMAL, reference_backend=backend))
    assert options.get("baseline") == ("compile" if compile_ else None)


@pytest.mark.parametrize(("measure", "run", "measured"), [
    (None, None, True), (True, None, True), (False, None, False), (None, False, False), (None, True, True),
    (True, False, True),   # measure_performance wins over its alias
    (False, True, False),
])
def test_measure_performance_and_its_alias(measure, run, measured):
    options = options_from(KernelGymRequest(**MINIMAL, measure_performance=measure, run_performance=run))
    assert ("measure_speed" not in options) is measured
    if not measured:
        assert options["measure_speed"] is False


@pytest.mark.parametrize(("profiling", "calls"), [(None, None), (True, None), (False, 0)])
def test_enable_profiling_false_turns_the_profile_off(profiling, calls):
    assert options_from(KernelGymRequest(**MINIMAL, enable_profiling=profiling)).get("profile_calls") == calls


def test_a_batch_needs_at_least_one_task_and_bounds_its_id():
    with pytest.raises(ValidationError, match="tasks"):
        KernelGymBatch(tasks=[])
    with pytest.raises(ValidationError, match="batch_id"):
        KernelGymBatch(batch_id="b" * 201, tasks=[MINIMAL])
    assert KernelGymBatch(tasks=[MINIMAL]).batch_id is None


# -- responses ---------------------------------------------------------------------------------------

SUBMITTED, FINISHED = 1_700_000_000.0, 1_700_000_002.5


def record(state: JobState = JobState.DONE, result: dict | None = None, options: dict | None = None,
           error: str | None = None, finished: float | None = FINISHED) -> JobRecord:
    return JobRecord(seq=1, id="job-1", idempotency_key="t1", fingerprint="f", client="c", api="kernelgym",
                     problem_hash="h", solution="s", options=options if options is not None else {},
                     state=state, attempts=1, submitted=SUBMITTED, started=SUBMITTED + 0.5, finished=finished,
                     result=result, error=error, extra=None)


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat()


CUDA_TIMING = {"device_name": "H100", "reference_median_ms": 2.0, "candidate_median_ms": 0.5, "meaningful": True}
TRIALS = [{"passed": True, "max_abs_error": 0.0, "message": None},
          {"passed": False, "max_abs_error": 3.5, "message": "out: 2 of 4 differ"}]


def test_an_ok_verdict_maps_every_field():
    result = {"status": "ok", "reward": 1.25, "device": "cuda:0", "sandbox": "bwrap", "speedup": 4.0,
              "timing": CUDA_TIMING, "trials": [TRIALS[0]], "coverage": 0.75,
              "kernel_profile": [{"kernel": "mine", "candidate": True, "device_us": 30.0},
                                 {"kernel": "mine", "candidate": True, "device_us": 10.0},
                                 {"kernel": "aten_add", "candidate": False, "device_us": 60.0}],
              "triton_launches": [{"kernel": "mine", "last_grid": [4, 1, 1], "defined_in_candidate": True},
                                  {"kernel": "lib", "last_grid": [1], "defined_in_candidate": False}]}
    response = to_kernelgym(record(result=result, options={"num_trials": 7, "timing_reps": 50}), "t1")
    assert (response.task_id, response.status, response.compiled, response.correctness, response.decoy_kernel) == \
        ("t1", "completed", True, True, False)
    assert (response.reference_runtime, response.kernel_runtime, response.speedup) == (2.0, 0.5, 4.0)
    assert response.error_message is None and response.error_code is None
    assert response.submitted_at == iso(SUBMITTED) and response.completed_at == iso(FINISHED)
    assert response.processing_time == 2.5
    assert response.tritongym == result
    assert response.metadata == {
        "hardware": "H100", "device": "cuda:0", "backend": "triton", "num_correct_trials": 1, "num_perf_trials": 50,
        "tritongym_requested_correct_trials": 7,
        "correctness_trials": "(1 / 1)", "max_difference": [0.0], "tritongym_status": "ok", "tritongym_reward": 1.25,
        "sandbox": "bwrap", "triton_profiler_used": True, "triton_profiler_matches": ["mine grid=[4, 1, 1]"],
        "num_custom_kernels": 2, "num_total_kernels": 3, "custom_kernel_cuda_time_in_profiling_us": 40.0,
        "total_kernel_run_time_in_profiling_us": 100.0, "triton_kernel_coverage": "2/3",
        "custom_kernel_cuda_time_coverage": "0.4000", "triton_kernel_in_profiling": ["mine"],
        "tritongym_coverage": 0.75,
    }


def test_absent_result_fields_and_options_take_their_defaults():
    response = to_kernelgym(record(result={"status": "ok", "device": "cpu"}), "t2")
    assert (response.status, response.compiled, response.correctness) == ("completed", True, True)
    # No timing (a CPU): runtimes -1, speedup 0; the options' defaults are KernelGYM's 5 and ours 30.
    # num_correct_trials is what ran (none here, as "(0 / 0)" says), the request's 5 beside it.
    assert (response.reference_runtime, response.kernel_runtime, response.speedup) == (-1.0, -1.0, 0.0)
    assert response.metadata == {
        "hardware": "cpu", "device": "cpu", "backend": "triton", "num_correct_trials": 0, "num_perf_trials": 30,
        "tritongym_requested_correct_trials": 5,
        "correctness_trials": "(0 / 0)", "max_difference": [], "tritongym_status": "ok", "tritongym_reward": None,
        "sandbox": None, "triton_profiler_used": False, "triton_profiler_matches": [],
        "num_custom_kernels": 0, "num_total_kernels": 0, "custom_kernel_cuda_time_in_profiling_us": 0.0,
        "total_kernel_run_time_in_profiling_us": 0.0, "triton_kernel_coverage": "0/0",
        "custom_kernel_cuda_time_coverage": "0", "triton_kernel_in_profiling": [],
    }


def test_runtimes_need_a_meaningful_cuda_timing_and_a_correct_kernel():
    ok = {"status": "ok", "device": "cuda:0", "speedup": 4.0}
    for timing, device in (({**CUDA_TIMING, "meaningful": False}, "cuda:0"), (CUDA_TIMING, "cpu"), (None, "cuda:0")):
        response = to_kernelgym(record(result={**ok, "timing": timing, "device": device}), "t")
        assert (response.reference_runtime, response.kernel_runtime) == (-1.0, -1.0)
        assert response.speedup == 4.0  # the speedup itself is the evaluator's, reported when correct
    default_meaningful = {k: v for k, v in CUDA_TIMING.items() if k != "meaningful"}
    response = to_kernelgym(record(result={**ok, "timing": default_meaningful}), "t")
    assert (response.reference_runtime, response.kernel_runtime) == (2.0, 0.5)
    wrong = to_kernelgym(record(result={"status": "incorrect", "device": "cuda:0", "speedup": 4.0,
                                        "timing": CUDA_TIMING, "trials": TRIALS, "error": "1 of 2 trials failed"}), "t")
    assert (wrong.reference_runtime, wrong.kernel_runtime, wrong.speedup) == (-1.0, -1.0, 0.0)


def test_an_incorrect_verdict():
    response = to_kernelgym(record(result={"status": "incorrect", "device": "cpu", "trials": TRIALS,
                                           "error": "1 of 2 trials failed"}), "t3")
    assert (response.status, response.compiled, response.correctness, response.decoy_kernel) == \
        ("completed", True, False, False)
    assert response.error_message == "1 of 2 trials failed" and response.error_code == "CORRECTNESS_ERROR"
    assert response.metadata["correctness_trials"] == "(1 / 2)"
    assert response.metadata["num_correct_trials"] == 2  # what ran, as "(1 / 2)" says
    assert response.metadata["max_difference"] == [0.0, 3.5]
    assert response.metadata["correctness_issue"] == "out: 2 of 4 differ"


def test_an_integrity_violation_is_a_decoy_kernel_with_its_violations():
    violations = [{"code": "pytorch_fallback", "message": "ran torch.relu"}, {"code": "trivial_output", "message": "0"}]
    response = to_kernelgym(record(result={"status": "integrity_violation", "violations": violations}), "t4")
    assert (response.status, response.compiled, response.correctness, response.decoy_kernel) == \
        ("completed", True, False, True)
    assert response.error_code is None
    assert response.error_message == "pytorch_fallback: ran torch.relu; trivial_output: 0"
    assert response.metadata["integrity_violations"] == violations
    given = to_kernelgym(record(result={"status": "integrity_violation", "violations": violations,
                                        "error": "the evaluator's own words"}), "t4")
    assert given.error_message == "the evaluator's own words"


@pytest.mark.parametrize(("status", "trials", "compiled", "code", "key"), [
    ("compile_error", [], False, "COMPILATION_ERROR", "compilation_error"),
    ("runtime_error", [], True, "RUNTIME_ERROR", "runtime_error"),
    ("crashed", [], False, "RUNTIME_ERROR", "runtime_error"),
    ("crashed", [TRIALS[0]], True, "RUNTIME_ERROR", "runtime_error"),
    ("timeout", [], False, "TIMEOUT_ERROR", None),
    ("timeout", [TRIALS[0]], True, "TIMEOUT_ERROR", None),
    ("unsupported", [], False, "SYSTEM_ERROR", None),
    ("unsupported", [TRIALS[0]], True, "SYSTEM_ERROR", None),
])
def test_failed_verdicts_map_to_kernelgyms_error_codes(status, trials, compiled, code, key):
    rec = record(result={"status": status, "trials": trials, "error": f"{status} happened"})
    response = to_kernelgym(rec, "t5")
    assert response.compiled is compiled and response.status == ("completed" if compiled else "failed")
    assert status_of(rec) == response.status
    assert response.error_code == code and response.error_message == f"{status} happened"
    for other in ("compilation_error", "runtime_error"):
        assert response.metadata.get(other) == (f"{status} happened" if other == key else None)


@pytest.mark.parametrize(("state", "status"), [
    (JobState.QUEUED, "pending"), (JobState.RUNNING, "processing"), (JobState.CANCELLED, "cancelled"),
    (JobState.FAILED, "failed"),
])
def test_unfinished_and_failed_jobs(state, status):
    finished = FINISHED if state in (JobState.CANCELLED, JobState.FAILED) else None
    rec = record(state=state, result=None, error="boom" if state == JobState.FAILED else None, finished=finished)
    response = to_kernelgym(rec, "t6")
    assert status_of(rec) == status and response.status == status
    assert response.metadata == {"tritongym_state": state.value}
    assert response.error_code == ("SYSTEM_ERROR" if state == JobState.FAILED else None)
    assert response.error_message == rec.error
    assert (response.compiled, response.correctness, response.speedup, response.tritongym) == (False, False, 0.0, None)
    assert response.completed_at == (iso(FINISHED) if finished else None)
    assert response.processing_time == (2.5 if finished else None)
    assert response.submitted_at == iso(SUBMITTED)


def test_a_problem_that_fails_on_its_own_is_a_validation_error():
    rec = record(state=JobState.FAILED, error="ProblemError: get_inputs raised")
    assert to_kernelgym(rec, "t7").error_code == "VALIDATION_ERROR"
    assert to_kernelgym(record(state=JobState.FAILED, error=None), "t7").error_code == "SYSTEM_ERROR"
    assert to_kernelgym(record(state=JobState.FAILED, error="an EvaluatorError: ProblemError"), "t7").error_code \
        == "SYSTEM_ERROR"


def test_a_done_job_without_a_result_is_reported_as_unfinished():
    response = to_kernelgym(record(state=JobState.DONE, result=None), "t8")
    assert response.metadata == {"tritongym_state": "done"} and response.status == "completed"
    assert response.error_code is None


def test_coverage_counts_a_kernel_without_a_time_as_zero_and_a_sub_microsecond_total():
    result = {"status": "ok", "device": "cuda:0",
              "kernel_profile": [{"kernel": "mine", "candidate": True, "device_us": 0.25},
                                 {"kernel": "untimed", "candidate": True},
                                 {"kernel": "aten", "candidate": False, "device_us": 0.5},
                                 {"kernel": "aten2", "candidate": False}]}
    metadata = to_kernelgym(record(result=result), "t").metadata
    assert metadata["custom_kernel_cuda_time_in_profiling_us"] == 0.25
    assert metadata["total_kernel_run_time_in_profiling_us"] == 0.75
    assert metadata["custom_kernel_cuda_time_coverage"] == "0.3333"
    assert metadata["triton_kernel_coverage"] == "2/4"
    assert metadata["triton_kernel_in_profiling"] == ["mine", "untimed"]
    assert "tritongym_coverage" not in metadata


def test_a_correct_kernel_reports_no_error_even_when_the_result_carries_text():
    response = to_kernelgym(record(result={"status": "ok", "device": "cpu", "error": "a notice"}), "t")
    assert response.error_message is None and response.error_code is None


def test_num_correct_trials_is_what_ran_so_it_agrees_with_correctness_trials():
    """KernelGYM's "(k / n)" has n == num_correct_trials. Ours adds one trial per perturbed input
    family, so echoing the request (5) beside "(8 / 8)" told the model two stories; Dr.Kernel's
    reward reads neither field (status, correctness, decoy_kernel, speedup, coverage), so only the
    feedback changes. The request's number stays, under its own name."""
    trials = [{"passed": True, "max_abs_error": 0.0, "family": "task"}] * 5 + \
             [{"passed": True, "max_abs_error": 0.0, "family": f} for f in ("negated", "scaled", "offset")]
    response = to_kernelgym(record(result={"status": "ok", "device": "cpu", "trials": trials},
                                   options={"num_trials": 5}), "t")
    assert response.metadata["correctness_trials"] == "(8 / 8)"
    assert response.metadata["num_correct_trials"] == 8
    assert response.metadata["tritongym_requested_correct_trials"] == 5
    compile_error = to_kernelgym(record(result={"status": "compile_error", "error": "SyntaxError"},
                                        options={"num_trials": 5}), "t")
    metadata = compile_error.metadata
    assert (metadata["num_correct_trials"], metadata["correctness_trials"]) == (0, "(0 / 0)")
