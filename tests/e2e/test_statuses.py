"""End-to-end: every `Status` is produced by a real evaluation of a small candidate (device cpu).

One tiny problem (tests/fixtures/problems/tiny_relu.py, 1000 elements) is reused by every candidate
in tests/fixtures/candidates/; each candidate's docstring says what it does and what it should get.
"""

from __future__ import annotations

import re
import time

import pytest

from tritongym import EvalResult, Status, ViolationCode, evaluate

from .helpers import E2E_OPTIONS, TINY_RELU, candidate, run_eval, task_trials


def codes(result: EvalResult) -> set[str]:
    return {str(v.code) for v in result.violations}


def assert_verdict_shape(result: EvalResult, status: Status) -> None:
    """Invariants of every verdict: status, derived correctness, zero reward unless ok."""
    assert result.status == status, (result.status, result.error, result.violations)
    assert result.correct is (status == Status.OK)
    assert result.reward == (0.5 if status == Status.OK else 0.0)
    assert result.speedup is None and result.timing is None  # the CPU never times by default
    assert result.device == "cpu"
    if status != Status.OK:
        assert result.error


# -- ok --------------------------------------------------------------------------------------------


def test_ok(honest_result):
    assert_verdict_shape(honest_result, Status.OK)
    assert honest_result.error is None and honest_result.violations == []
    trials = task_trials(honest_result)
    assert [t.index for t in trials] == [0, 1]
    assert all(
        t.passed and t.max_abs_error == 0.0 and t.mismatch_fraction == 0.0 for t in honest_result.trials
    )
    assert honest_result.torch_compute_ops == []
    assert honest_result.reference_compute_ops == ["aten::relu"]


def test_ok_records_the_candidates_kernel_launches(honest_result):
    (launch,) = honest_result.triton_launches
    assert launch.kernel == "relu_kernel" and launch.defined_in_candidate
    assert launch.launches == len(honest_result.trials)  # one launch per forward, every trial
    assert launch.last_grid == "(4,)"  # cdiv(1000, 256)


def test_ok_with_a_harmless_torch_op_lists_it_but_is_no_fallback():
    result = run_eval("relu_partial_torch")
    assert_verdict_shape(result, Status.OK)
    assert result.torch_compute_ops == ["aten::mul"]


def test_a_full_size_torch_op_on_a_single_op_task_is_a_fallback():
    result = run_eval("relu_full_size_torch_op", num_trials=1)
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert [v.code for v in result.violations] == [ViolationCode.PYTORCH_FALLBACK]
    assert "as many as the reference's whole computation" in result.violations[0].message


# -- compile_error ---------------------------------------------------------------------------------


def test_compile_error_syntax_is_decided_before_any_process_starts():
    started = time.monotonic()
    result = run_eval("relu_syntax_error")
    assert time.monotonic() - started < 2
    assert_verdict_shape(result, Status.COMPILE_ERROR)
    assert result.error == "SyntaxError: expected ':' (line 9)"
    assert result.trials == [] and result.candidate_log == ""


def test_compile_error_missing_model_new():
    result = run_eval("relu_no_model_new")
    assert_verdict_shape(result, Status.COMPILE_ERROR)
    assert "does not define `class ModelNew`" in result.error


def test_compile_error_import_failure_shows_the_candidates_line():
    result = run_eval("relu_import_error")
    assert_verdict_shape(result, Status.COMPILE_ERROR)
    assert result.error.startswith("import: ")
    assert 'File "candidate.py", line 8, in <module>' in result.error
    assert "ModuleNotFoundError: No module named 'tritongym_fixture_no_such_module'" in result.error
    assert result.trials == []


def test_compile_error_constructor_raises():
    result = run_eval("relu_ctor_raises")
    assert_verdict_shape(result, Status.COMPILE_ERROR)
    assert result.error.startswith("build: ")
    assert 'File "candidate.py", line 21, in __init__' in result.error
    assert result.error.rstrip().endswith("RuntimeError: constructor refuses to build")


def test_kernel_that_cannot_compile_is_reported_as_a_runtime_error_under_the_interpreter():
    """The interpreter has no compile step: a kernel body error surfaces when the kernel runs.

    (On a GPU, Triton's CompilationError would make this compile_error.)
    """
    result = run_eval("relu_kernel_compile_error")
    assert_verdict_shape(result, Status.RUNTIME_ERROR)
    assert "NameError" in result.error and "undefined_in_kernel" in result.error
    assert 'File "candidate.py", line 27, in forward' in result.error  # the launch site


# -- runtime_error ---------------------------------------------------------------------------------


def test_runtime_error_traceback_has_only_candidate_frames_with_their_lines():
    result = run_eval("relu_forward_raises")
    assert_verdict_shape(result, Status.RUNTIME_ERROR)
    assert result.error.startswith("trial 0")
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\w+)', result.error)
    assert frames == [("candidate.py", "31", "forward"), ("candidate.py", "26", "check_shape")]
    assert "ValueError: fixture refuses shape (8, 125)" in result.error
    for internal in ("torch/", "tritongym", "site-packages", "worker/candidate", "startup.py", "/job/", "/tmp/"):
        assert internal not in result.error


@pytest.mark.parametrize("fresh", [False, True], ids=["pool", "fresh"])
def test_an_allocation_over_the_memory_limit_is_a_runtime_error_that_names_the_limit(fresh):
    """Under the address-space cap the allocator says only "can't allocate memory": the error adds
    which limit it met and what to do, on both routes (a forked and a fresh candidate worker)."""
    result = run_eval("relu_over_memory_limit", fresh=fresh, memory_limit_gb=2.0)
    assert_verdict_shape(result, Status.RUNTIME_ERROR)
    assert "can't allocate memory" in result.error
    assert "memory limit of 2 GiB (memory_limit_gb); allocate less" in result.error


# -- incorrect -------------------------------------------------------------------------------------


def test_incorrect_reports_every_trial_with_its_errors():
    result = run_eval("relu_wrong", num_trials=3)
    assert_verdict_shape(result, Status.INCORRECT)
    assert result.violations == []
    trials = task_trials(result)
    assert [t.index for t in trials] == [0, 1, 2]
    for trial in result.trials:
        if trial.family == "offset" and trial.passed:
            # Shifted down by up to 3 standard deviations, the input is almost all negative and the
            # few positive elements are small: 1.5*relu(x) is then within the tolerance of relu(x)
            # (seen once in a fresh-clone CI run, 2026-11-27), which is a right answer there, not a missed check.
            assert trial.mismatch_fraction == 0.0 and trial.message is None
            continue
        assert not trial.passed
        # out = 1.5*relu(x): the error is 0.5*relu(x), relative error exactly 0.5 where x > 0.
        assert trial.max_rel_error == pytest.approx(0.5, rel=1e-6)
        assert trial.max_abs_error > (0.01 if trial.family == "offset" else 0.1)
        # (an offset family shifted up far enough makes every element positive, hence every one wrong)
        assert 0.0 < trial.mismatch_fraction <= 1.0
        assert "differ beyond atol=0.01, rtol=0.01" in trial.message
    for trial in trials:  # standard normal inputs: about half of the elements are positive, hence wrong
        assert 0.3 < trial.mismatch_fraction < 0.7
    assert re.match(
        rf"{len(result.trials)} of {len(result.trials)} trials failed; trial 0: output: ", result.error
    )


def test_an_unwritten_output_element_reads_nan_and_the_feedback_is_reproducible():
    """torch.empty_like leaves allocator leftovers; checked trials fill fresh allocations with NaN,
    so the one element an off-by-one mask skips is named, with NaN, identically run after run."""
    first = run_eval("relu_unwritten_tail", num_trials=2, seed=11)
    assert_verdict_shape(first, Status.INCORRECT)
    for trial in first.trials:
        assert not trial.passed and trial.mismatch_fraction == pytest.approx(1 / 1000)
        assert re.fullmatch(r"output: 1 of 1000 elements \(0\.1%\) differ beyond atol=0\.01, rtol=0\.01; "
                            r"first at \(7, 124\): expected [-0-9.e]+, got nan; "
                            r"1 of them NaN or Inf where the reference is finite .*", trial.message), trial.message
    again = evaluate(TINY_RELU, candidate("relu_unwritten_tail"), **{**E2E_OPTIONS, "num_trials": 2, "seed": 11})
    assert [t.message for t in again.trials] == [t.message for t in first.trials]
    assert again.error == first.error


def test_inductor_allocators_are_filled_in_checked_trials_too():
    """Inductor's ``empty_strided_cpu`` makes tensors below the dispatcher (no trace sees them); the
    candidate worker wraps it, so an element no kernel writes reads NaN there as well, while an
    output the kernel writes whole is ok."""
    assert_verdict_shape(run_eval("relu_inductor_buffer"), Status.OK)
    tail = run_eval("relu_inductor_buffer_unwritten_tail", seed=12)
    assert_verdict_shape(tail, Status.INCORRECT)
    assert not any(t.passed for t in tail.trials)
    assert all("first at (7, 124): expected" in t.message and ", got nan; 1 of them NaN" in t.message
               for t in tail.trials), [t.message for t in tail.trials]


def test_what_resize_adds_is_filled_in_checked_trials_and_replays():
    """``resize_`` growing an empty output leaves its new bytes uninitialised, like ``torch.empty``:
    filled on both sides, the skipped element reads NaN in every trial; written whole, it is ok."""
    assert_verdict_shape(run_eval("relu_resize_output"), Status.OK)
    tail = run_eval("relu_resize_unwritten_tail", num_trials=2, seed=13)
    assert_verdict_shape(tail, Status.INCORRECT)
    assert not any(t.passed for t in tail.trials)
    assert all("first at (7, 124): expected" in t.message and ", got nan; 1 of them NaN" in t.message
               for t in tail.trials), [t.message for t in tail.trials]


def test_every_trial_uses_fresh_inputs():
    """Different max errors per trial, and a candidate that replays trial 0's answer fails later trials."""
    wrong = run_eval("relu_wrong", num_trials=3)
    assert len({t.max_abs_error for t in wrong.trials}) == len(wrong.trials)
    replay = run_eval("relu_replay")
    assert_verdict_shape(replay, Status.INCORRECT)
    assert [t.passed for t in replay.trials][:2] == [True, False]
    assert not any(t.passed for t in replay.trials[1:])


def test_fake_report_on_stdout_is_only_a_log():
    result = run_eval("relu_fake_report")
    assert_verdict_shape(result, Status.INCORRECT)
    fake = '{"status": "ok", "correct": true, "reward": 1.0, "violations": [], "error": null}'
    assert result.candidate_log.count(fake) >= 1 + 2 * len(result.trials)  # import + stdout/stderr per call


# -- integrity_violation ---------------------------------------------------------------------------


def test_no_triton_kernel_is_decided_statically():
    started = time.monotonic()
    result = run_eval("relu_no_kernel")
    assert time.monotonic() - started < 2
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert codes(result) == {ViolationCode.NO_TRITON_KERNEL}
    assert result.trials == []


def test_decoy_kernel_never_launched():
    result = run_eval("relu_decoy_kernel")
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert ViolationCode.NO_TRITON_LAUNCH in codes(result)
    assert all(t.passed for t in result.trials)  # the outputs were right: only integrity catches it
    assert result.triton_launches == []
    assert result.torch_compute_ops == ["aten::relu"]


def test_pytorch_fallback_launching_a_kernel_on_a_dummy_tensor():
    result = run_eval("relu_torch_fallback")
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert {ViolationCode.PYTORCH_FALLBACK, ViolationCode.OUTPUT_NOT_FROM_KERNEL} <= codes(result)
    assert ViolationCode.NO_TRITON_LAUNCH not in codes(result)  # it did launch its own kernel
    assert all(t.passed for t in result.trials)
    assert "aten::relu" in result.torch_compute_ops
    assert [(k.kernel, k.defined_in_candidate, k.last_grid) for k in result.triton_launches] == [
        ("relu_kernel", True, "(1,)")
    ]


def test_output_aliasing_an_input():
    result = run_eval("relu_alias_input")
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert codes(result) == {ViolationCode.OUTPUT_ALIASES_INPUT}
    assert "shares memory with an input" in result.error


def test_input_mutation_with_correct_outputs():
    result = run_eval("relu_mutates_input")
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert codes(result) == {ViolationCode.INPUT_MUTATION}
    assert all(t.passed for t in result.trials)
    assert "modified input tensor(s) 0" in result.error


def test_in_place_kernel_mutates_and_aliases():
    result = run_eval("relu_inplace")
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert {ViolationCode.INPUT_MUTATION, ViolationCode.OUTPUT_ALIASES_INPUT} <= codes(result)


def test_tensor_subclass_output():
    result = run_eval("relu_tensor_subclass")
    assert_verdict_shape(result, Status.INTEGRITY_VIOLATION)
    assert codes(result) == {ViolationCode.OUTPUT_NOT_PLAIN_TENSOR}


def test_disabled_check_turns_its_violation_into_a_notice():
    result = run_eval("relu_mutates_input", disabled_checks=frozenset({"input_mutation"}))
    assert_verdict_shape(result, Status.OK)
    assert any(n.code == "check_disabled" and "[input_mutation]" in n.message for n in result.notices)


# -- timeout and crashed: see test_isolation.py (they need process bookkeeping) --------------------
