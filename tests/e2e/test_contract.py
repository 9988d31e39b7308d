"""End-to-end: the evaluation contract beyond statuses: secret and fixed seeds, KernelBench's same-seed
weights, CPU timing notices, the Python API's argument forms and its errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import tritongym
from tritongym import EvalOptions, EvalResult, Status, evaluate
from tritongym.errors import OptionsError, ProblemError, SolutionError
from tritongym.tasks import load_problem_file

from .helpers import CANDIDATES, PROBLEMS, TINY_LINEAR, TINY_RELU, candidate, run_eval, task_trials


def trial_errors(result: EvalResult) -> list[tuple]:
    return [(t.family, t.max_abs_error, t.max_rel_error, t.mismatch_fraction) for t in result.trials]


# -- seeds -----------------------------------------------------------------------------------------


def test_fixed_seed_reproduces_every_trial_error():
    first = run_eval("relu_wrong", seed=1234)
    second = evaluate(TINY_RELU, candidate("relu_wrong"), device="cpu", num_trials=2, timeout=60.0, seed=1234)
    assert first.status == second.status == Status.INCORRECT
    assert trial_errors(first) == trial_errors(second)
    other = run_eval("relu_wrong", seed=1235)
    assert trial_errors(other) != trial_errors(first)


def test_without_a_seed_inputs_differ_between_evaluations():
    """Secret per-evaluation seeds: two runs of the same wrong candidate see different inputs."""
    first = run_eval("relu_wrong", num_trials=3)
    second = evaluate(TINY_RELU, candidate("relu_wrong"), device="cpu", num_trials=3, timeout=60.0)
    assert {t.max_abs_error for t in task_trials(first)}.isdisjoint(
        {t.max_abs_error for t in task_trials(second)}
    )


# -- same-seed convention --------------------------------------------------------------------------


def test_model_new_declared_like_model_gets_the_same_weights():
    result = run_eval("linear_same_seed", problem=TINY_LINEAR)
    assert result.status == Status.OK, (result.error, result.violations)
    assert all(t.max_abs_error < 1e-5 for t in result.trials)
    assert result.reference_compute_ops and all(
        "mm" in op or "linear" in op for op in result.reference_compute_ops
    )


def test_consuming_random_numbers_first_gives_other_weights():
    """The negative control of the test above: one extra layer declared first shifts the RNG stream."""
    result = run_eval("linear_shifted_seed", problem=TINY_LINEAR)
    assert result.status == Status.INCORRECT
    assert all(not t.passed for t in result.trials)


# -- CPU timing ------------------------------------------------------------------------------------


def test_cpu_result_has_null_timing_and_says_timing_is_unavailable(honest_result):
    assert honest_result.speedup is None and honest_result.timing is None
    notices = [n for n in honest_result.notices if n.code == "timing_unavailable"]
    assert len(notices) == 1
    assert "not" in notices[0].message and "CPU" in notices[0].message
    assert honest_result.reward == 0.5  # correct_weight alone: no speed term without a GPU
    data = json.loads(honest_result.to_json())
    assert data["speedup"] is None and data["timing"] is None


def test_time_on_cpu_exercises_the_protocol_but_never_pays():
    result = run_eval(
        "relu_honest",
        num_trials=1,
        time_on_cpu=True,
        timing_reps=4,
        timing_blocks=2,
        warmup_ms=1.0,
        timing_rechecks=2,
    )
    assert result.status == Status.OK, result.error
    assert result.timing is not None and result.timing.meaningful is False
    assert result.timing.reference_reps == result.timing.candidate_reps == 4
    assert result.speedup is not None and math.isfinite(result.speedup)
    assert result.reward == 0.5
    assert any(n.code == "timing_not_meaningful" for n in result.notices)
    assert not any(n.code == "timing_unavailable" for n in result.notices)
    # The clean room timed the replay of a task trial's log with the same repetitions; the speedup
    # uses the larger of the candidate's own median and the replay's.
    timing = result.timing
    assert timing.replay_reps == 4 and timing.replay_median_ms > 0 and timing.reported_median_ms > 0
    assert timing.candidate_median_ms == max(timing.reported_median_ms, timing.replay_median_ms)
    assert result.speedup == pytest.approx(timing.reference_median_ms / timing.candidate_median_ms)


_TIMED_ON_CPU = {"num_trials": 1, "time_on_cpu": True, "timing_reps": 4, "timing_blocks": 2, "warmup_ms": 1.0}


def test_a_forwards_host_overhead_is_charged_as_kernelbench_charges_it():
    """The candidate's own figure includes its Python; the replay, of the kernel alone, is smaller."""
    result = run_eval("relu_host_overhead", **_TIMED_ON_CPU)
    assert result.status == Status.OK, result.error
    timing = result.timing
    assert timing.reported_median_ms > timing.replay_median_ms
    assert timing.candidate_median_ms == timing.reported_median_ms
    assert not any(n.code == "timing_from_replay" for n in result.notices)


def test_timed_calls_that_skip_the_work_are_charged_the_replay_of_the_logged_work():
    """No timed output is rechecked here, so the candidate's cached answers go unseen while it is
    timed; the clean room's replay of a checked trial's log runs the kernel it really needs."""
    result = run_eval("relu_lazy_when_timed", timing_rechecks=0, **_TIMED_ON_CPU)
    assert result.status == Status.OK, result.error
    timing = result.timing
    assert timing.reported_median_ms < timing.replay_median_ms / 2  # returning a cached tensor
    assert timing.candidate_median_ms == timing.replay_median_ms
    assert result.speedup == pytest.approx(timing.reference_median_ms / timing.replay_median_ms)
    notice = next(n for n in result.notices if n.code == "timing_from_replay")
    assert "the speedup uses the replay's figure" in notice.message


# -- the Python API --------------------------------------------------------------------------------


def test_result_identifies_problem_and_solution(honest_result):
    problem = load_problem_file(TINY_RELU)
    assert honest_result.problem_id == problem.problem_id == "tiny_relu"
    assert honest_result.problem_hash == problem.content_hash
    assert honest_result.solution_hash and len(honest_result.solution_hash) == 64
    assert 0 < honest_result.duration_s < 60
    assert EvalResult.from_dict(json.loads(honest_result.to_json())) == honest_result


def test_problem_object_and_source_text_solution_are_accepted():
    source = candidate("relu_honest").read_text()
    problem = load_problem_file(TINY_RELU)
    result = tritongym.evaluate(problem, source, EvalOptions(device="cpu", num_trials=1), timeout=60)
    assert result.status == Status.OK
    assert result.solution_hash == run_eval("relu_honest").solution_hash  # same text, same hash
    assert len(task_trials(result)) == 1  # the keyword override and the options object combine


def test_missing_solution_file_is_a_solution_error():
    with pytest.raises(SolutionError, match="solution file not found"):
        evaluate(TINY_RELU, PROBLEMS / "no_such_solution.py", device="cpu")


def test_a_str_solution_is_always_source_text_never_a_file_to_read():
    # One rule for evaluate, evaluate_many, the pool and the service: a str is source text. The old
    # form (a one-line file name) is refused with a verdict that says what to pass, and no file is read.
    path = str(CANDIDATES / "relu_honest.py")
    result = evaluate(TINY_RELU, path, device="cpu")
    assert result.status == Status.COMPILE_ERROR and result.reward == 0.0
    assert "pass pathlib.Path(" in result.error and path in result.error
    assert evaluate(TINY_RELU, Path(path), device="cpu", num_trials=1).status == Status.OK
    with pytest.raises(SolutionError, match=r"source text \(str\) or a path \(os.PathLike\), got bytes"):
        evaluate(TINY_RELU, path.encode(), device="cpu")


def test_missing_problem_file_is_a_problem_error():
    with pytest.raises(ProblemError, match="problem file not found"):
        evaluate(PROBLEMS / "no_such_problem.py", candidate("relu_honest"), device="cpu")


def test_cuda_without_a_gpu_is_an_options_error(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the same on any machine
    with pytest.raises(OptionsError, match="device 'cuda' was requested"):
        evaluate(TINY_RELU, candidate("relu_honest"), device="cuda")


def test_invalid_option_override_is_an_options_error():
    with pytest.raises(OptionsError, match="num_trials must be an integer >= 1"):
        evaluate(TINY_RELU, candidate("relu_honest"), device="cpu", num_trials=0)


def test_broken_reference_raises_problem_error_not_a_verdict():
    with pytest.raises(ProblemError, match="this problem cannot make its inputs"):
        evaluate(PROBLEMS / "broken_reference.py", candidate("relu_honest"), device="cpu", num_trials=1)


#: A problem whose code rewrites what its own reference worker sends (a client's problem runs
#: there and is as untrusted as a candidate): the trial replies keep their kind, one field is bad.
MALFORMED_REFERENCE = '''
import torch
import torch.nn as nn

from tritongym.evaluator.common import channel as _channel

_send = _channel.Channel.send


def _malformed(self, kind, payload=None):
    if kind == "trial" and isinstance(payload, dict):
        payload = dict(payload)
        {change}
    return _send(self, kind, payload)


_channel.Channel.send = _malformed


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(8, 125)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize(("change", "field"), [
    ('payload.pop("compute_ops")', "compute_ops"),
    ('payload["compute_work"] = ["many", "ops"]', "compute_work"),
    ('payload["finite"] = "yes"', "finite"),
    ('payload["inputs"] = 3', "inputs"),
])
def test_a_malformed_reference_reply_is_the_problems_error_never_the_candidates_crash(tmp_path, change, field):
    # Before: a KeyError or ValueError while reading the reply became the honest candidate's `crashed`.
    problem = tmp_path / "hostile_reference.py"
    problem.write_text(MALFORMED_REFERENCE.replace("{change}", change))
    with pytest.raises(ProblemError, match=f"malformed 'trial' reply.*{field}"):
        evaluate(problem, candidate("relu_honest"), device="cpu", num_trials=1)
    # Control: the same problem without the rewrite is an ordinary task the candidate passes.
    problem.write_text(MALFORMED_REFERENCE.replace("{change}", "pass"))
    assert evaluate(problem, candidate("relu_honest"), device="cpu", num_trials=1).status == Status.OK
