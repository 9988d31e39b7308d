"""The parent's measurement phases against scripted workers: every bad reply is a verdict.

A scripted candidate (replies chosen per request) and a scripted reference stand in for the
worker processes; the `_Evaluation`, the phases, the plausibility rules and the GPU lock are the
real ones (the lock in a temporary folder). "cuda" here only selects the GPU rules: no device is
touched.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field
from typing import Any

import pytest

import tritongym
from tritongym.errors import OptionsError, ProblemError
from tritongym.evaluator import measurement
from tritongym.evaluator.common.channel import Message
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.parent import _Evaluation
from tritongym.evaluator.reference import check_reply_fields
from tritongym.evaluator.result import EvalResult, NoticeCode, Status, TimingReport, ViolationCode
from tritongym.evaluator.session import CandidateFailed

PROBLEM = tritongym.builtin_suite()[0]


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONGYM_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()


@dataclass
class Process:
    def wait_exit(self, grace: float) -> str:
        return "exited with code 0"


@dataclass
class ScriptedCandidate:
    """Answers each request kind with `replies[kind]` (a dict, or a callable of the payload)."""

    replies: dict[str, Any]
    process: Process = field(default_factory=Process)
    requests: list[str] = field(default_factory=list)
    payloads: dict[str, Any] = field(default_factory=dict)

    def request(self, kind: str, payload: Any = None) -> Message:
        # The worker's handlers read their payload as an object (`TimingSession.handle`).
        assert isinstance(payload, dict), (kind, payload)
        self.requests.append(kind)
        self.payloads[kind] = payload
        reply = self.replies[kind]
        reply = reply(payload) if callable(reply) else reply
        answer = {"time_start": "time_ready", "hold": "held", "rep": "rep_done", "drop": "dropped", "keep": "output",
                  "observe": "observed", "profile": "profiled"}[kind]
        return Message(answer, reply)


@dataclass
class ScriptedReference:
    ms: float = 1.0
    flops: int = 0
    flops_per_s: float = 0.0
    fp32_note: str | None = None
    variants: dict[str, Any] = field(default_factory=dict)
    dispatch_ms: float = 0.02
    held: list[float] = field(default_factory=list)

    #: the reply kind a reference worker sends to each request (`ReferenceRunner.request` checks it)
    REPLY_KINDS = {"time_start": "time_ready", "hold": "held", "rep": "rep_done", "drop": "dropped",
                   "bandwidth": "bandwidth", "expected_for": "expected"}

    def request(self, kind: str, payload: Any, expect: str, required: Any = None,
                optional: Any = None) -> dict[str, Any]:
        assert isinstance(payload, dict) and expect == self.REPLY_KINDS[kind], (kind, payload, expect)
        return check_reply_fields("scripted", kind, expect, self._reply(kind, payload), required or {}, optional or {})

    def _reply(self, kind: str, payload: Any) -> dict[str, Any]:
        if kind == "time_start":
            return {"method": "scripted", "device_name": "fake", "variants": self.variants,
                    "dense_matmul_flops": self.flops, "dispatch_ms": self.dispatch_ms}
        if kind == "hold":
            self.held.append(payload["dispatch_ms"])
            return {"hold_ms": 2 * payload["dispatch_ms"], "method": "scripted, held"}
        if kind == "rep":
            return {"ms": self.ms * (0.5 if payload.get("variant") == "compile" else 1.0), "host_ms": self.ms}
        if kind == "drop":
            return {}
        if kind == "bandwidth":
            return {"bytes_per_s": 3e12, "flops_per_s": self.flops_per_s}
        raise AssertionError(kind)


def evaluation(device: str = "cpu", **options: Any) -> _Evaluation:
    opts = EvalOptions(**{"device": "cpu", "time_on_cpu": True, "timing_reps": 6, "timing_blocks": 2,
                          "timing_rechecks": 0, **options})
    return _Evaluation(problem=PROBLEM, solution_source="", options=opts, device=device, sandbox="none")


def honest_candidate(ms: float = 1.0, **extra: Any) -> ScriptedCandidate:
    return ScriptedCandidate({"time_start": {}, "hold": {},
                              "rep": {"ms": ms, "host_ms": ms, "tail_ms": 0.0, "charged": False},
                              "drop": {}, "observe": {"threads_before": 1, "threads_after": 1, "tampered": [],
                                                      "refused": []}, **extra})


# -- timing ------------------------------------------------------------------------------------

def test_honest_timing_builds_the_report_and_observes_after_every_rep():
    run = evaluation()
    candidate = honest_candidate()
    measurement.run_timing(run, ScriptedReference(), candidate)
    assert run.violations == {}
    assert run.timing is not None and run.timing.candidate_reps == 6 and run.timing.baseline == "eager"
    # observe follows every rep's drop, outside the round trip the parent times
    assert candidate.requests[1:4] == ["rep", "drop", "observe"]


def test_on_a_gpu_both_workers_hold_for_the_larger_dispatch():
    run = evaluation(device="cuda")
    reference = ScriptedReference(dispatch_ms=0.02)
    candidate = honest_candidate(time_start={"dispatch_ms": 0.15})
    measurement.run_timing(run, reference, candidate)
    assert reference.held == [0.15] and candidate.payloads["hold"] == {"dispatch_ms": 0.15}
    # Held before the first timed call, and the report names the held method.
    assert candidate.requests.index("hold") < candidate.requests.index("rep")
    assert run.timing.method == "scripted, held"


@pytest.mark.parametrize("claim", [-1.0, math.nan, math.inf, "9", True, None])
def test_a_candidates_unusable_dispatch_claim_counts_as_zero(claim):
    assert measurement.shared_dispatch_ms({"dispatch_ms": 0.02}, {"dispatch_ms": claim}) == 0.02
    assert measurement.shared_dispatch_ms({}, {"dispatch_ms": 0.3}) == 0.3


def test_on_a_cpu_nothing_is_held():
    run = evaluation()
    reference = ScriptedReference()
    candidate = honest_candidate()
    measurement.run_timing(run, reference, candidate)
    assert "hold" not in candidate.requests and reference.held == []


@pytest.mark.parametrize("bad", [-1.0, 0.0, math.nan, math.inf, "1.0", True, None])
def test_a_non_positive_or_non_numeric_time_is_implausible_timing(bad):
    run = evaluation()
    candidate = honest_candidate()
    candidate.replies["rep"] = {"ms": bad, "host_ms": 1.0}
    measurement.run_timing(run, ScriptedReference(), candidate)
    assert run.violations[ViolationCode.IMPLAUSIBLE_TIMING].message == (
        f"a timed call reported {bad!r} ms (host 1.0 ms); times must be positive")


def test_a_garbage_rep_reply_is_a_crash_not_an_exception():
    candidate = honest_candidate()
    candidate.replies["observe"] = ["not", "an", "object"]
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_timing(evaluation(), ScriptedReference(), candidate)
    assert failed.value.status == Status.CRASHED


@dataclass
class GarbledReference(ScriptedReference):
    """A reference whose problem code rewrote one field of its replies (a client's problem may)."""

    garble: tuple[str, str, Any] = ("rep", "ms", "fast")

    def _reply(self, kind: str, payload: Any) -> dict[str, Any]:
        reply = super()._reply(kind, payload)
        if kind == self.garble[0]:
            reply[self.garble[1]] = self.garble[2]
        return reply


@pytest.mark.parametrize("garble", [("rep", "ms", "fast"), ("rep", "host_ms", True), ("time_start", "variants", ["x"]),
                                    ("time_start", "dense_matmul_flops", "many")])
def test_a_garbled_reference_reply_is_the_problems_error_not_the_candidates_crash(garble):
    with pytest.raises(ProblemError, match=f"malformed .*field '{garble[1]}'"):
        measurement.run_timing(evaluation(), GarbledReference(garble=garble), honest_candidate())


def test_tampering_seen_after_a_timed_call_is_a_violation_and_a_clean_run_is_not():
    candidate = honest_candidate()
    candidate.replies["observe"] = {"threads_before": 1, "threads_after": 2, "tampered": ["time.perf_counter"],
                                    "refused": []}
    run = evaluation()
    measurement.run_timing(run, ScriptedReference(), candidate)
    assert {ViolationCode.HARNESS_TAMPERING, ViolationCode.BACKGROUND_THREAD} <= set(run.violations)


def test_charged_side_stream_tails_are_reported():
    candidate = honest_candidate()
    candidate.replies["rep"] = {"ms": 1.0, "host_ms": 1.0, "tail_ms": 0.9, "charged": True}
    run = evaluation()
    measurement.run_timing(run, ScriptedReference(), candidate)
    assert run.timing.charged_reps == 6
    assert any(n.code == NoticeCode.TIMING_TAIL_CHARGED for n in run.notices)


# -- the clean room's timed replay (issue 20) --------------------------------------------------

def test_the_charged_time_is_the_larger_of_the_report_and_the_replay():
    assert measurement.charged_candidate_ms(2.0, []) == (2.0, None)
    assert measurement.charged_candidate_ms(2.0, [1.0, 1.5, 9.0]) == (2.0, 1.5)  # host overhead: the report
    assert measurement.charged_candidate_ms(0.1, [1.0, 1.5, 9.0]) == (1.5, 1.5)  # a report below the work


@pytest.mark.parametrize("replay, charged, notice", [([0.5] * 6, 1.0, False), ([1.05] * 6, 1.05, False),
                                                     ([1.1] * 6, 1.1, False), ([3.0] * 6, 3.0, True)])
def test_the_report_names_both_figures_and_a_slower_replay_is_said(replay, charged, notice):
    run = evaluation()
    run.replay_ms = list(replay)
    measurement.run_timing(run, ScriptedReference(ms=1.0), honest_candidate(ms=1.0))
    timing = run.timing
    assert (timing.reported_median_ms, timing.replay_median_ms, timing.replay_reps) == (1.0, replay[0], 6)
    assert timing.candidate_median_ms == charged
    assert any(n.code == NoticeCode.TIMING_FROM_REPLAY for n in run.notices) is notice
    result = run.finish(None, None, 0.0)
    assert result.speedup == pytest.approx(1.0 / charged), (result.status, result.error)


@dataclass
class ScriptedRoom:
    """The parent's side of a clean room: replays answer with the record's expected outputs."""

    timed: Any
    requests: list[tuple[str, Any]] = field(default_factory=list)

    def request(self, kind: str, payload: Any) -> Message:
        self.requests.append((kind, payload))
        if kind in ("time", "profile"):
            answer = "timed" if kind == "time" else "profiled"
            return Message(answer, self.timed) if isinstance(self.timed, dict) else Message("error", self.timed[1])
        return Message("replayed", {"outputs": payload["inputs"][0].clone(), "compute_ops": [], "work": [0, 0],
                                    "moved": [0, 0], "launches": 1})


def _records(run: _Evaluation) -> None:
    import torch

    from tritongym.evaluator import replays

    for index, family in enumerate(["get_inputs", "get_inputs", "scaled"]):
        inputs = [torch.full((4,), float(index))]
        run.records.append(replays.TrialRecord(index=index, family=family, inputs=inputs,
                                               expected=inputs[0].clone(), compute_work=(4, 4), log={}))


@pytest.mark.parametrize("timed, outcome", [
    ({"ms": [1.0, 2.0, 3.0]}, "kept"),
    ({"ms": [1.0, 2.0]}, "crashed"),
    ({"ms": [1.0, 0.0, 3.0]}, "crashed"),
    ({"ms": [1.0, "2", 3.0]}, "crashed"),
    ({"ms": [1.0, math.inf, 3.0]}, "crashed"),
    (("error", {"kind": "diverged", "message": "boom"}), "evidence_mismatch"),
    (("error", {"kind": "out_of_bounds", "message": "kernel `k` stored 1 element out of bounds"}), "runtime_error"),
])
def test_the_timed_replay_of_a_task_trial_is_kept_only_when_well_formed(timed, outcome):
    run = evaluation()
    _records(run)
    room = ScriptedRoom(timed)
    try:
        run._time_replays(room, run._measured_trial([0, 2]), 3)
    except CandidateFailed as failed:
        assert outcome == str(failed.status)
        return
    except measurement.ProtocolError:
        assert outcome == "crashed"  # run_clean_room turns a ProtocolError into `crashed`
        return
    kind, payload = room.requests[-1]
    assert kind == "time" and payload["reps"] == 3 and payload["warmup_ms"] == run.options.warmup_ms
    assert float(payload["inputs"][0][0]) == 0.0  # the task trial, never the perturbed family
    if outcome == "kept":
        assert run.replay_ms == [1.0, 2.0, 3.0] and not run.violations
    else:
        assert outcome in run.violations and run.replay_ms == []


def test_the_flop_floor_needs_the_parents_clock_to_confirm_a_fast_report(monkeypatch):
    # A 4096³ GEMM at 700 TFLOP/s: floor ≈ 0.098 ms. A candidate reporting 0.01 ms:
    # the parent's round trips say the call takes as long as the reference's (≈ 1 ms) → violation.
    reference = ScriptedReference(ms=1.0, flops=2 * 4096**3, flops_per_s=700e12)
    run = evaluation(device="cuda")
    run.bytes_moved = 1000
    measurement.run_timing(run, reference, honest_candidate(ms=0.01))
    assert ViolationCode.IMPLAUSIBLE_SPEEDUP in run.violations
    assert "dense matmul FLOPs" in run.violations[ViolationCode.IMPLAUSIBLE_SPEEDUP].message
    assert run.timing.flop_floor_ms == pytest.approx(2 * 4096**3 / 1.4e15 * 1e3)


def test_a_fast_report_the_parents_clock_confirms_is_a_notice(monkeypatch):
    # Structure the reference ignores (a diagonal operand): honestly faster than the nominal FLOPs.
    monkeypatch.setattr(measurement.plausibility, "wall_clock_estimate_ms", lambda *a: 0.011)
    reference = ScriptedReference(ms=1.0, flops=2 * 4096**3, flops_per_s=700e12)
    run = evaluation(device="cuda")
    run.bytes_moved = 1000
    measurement.run_timing(run, reference, honest_candidate(ms=0.01))
    assert ViolationCode.IMPLAUSIBLE_SPEEDUP not in run.violations
    assert any(n.code == NoticeCode.FLOP_FLOOR_BEATEN for n in run.notices)


def test_both_baselines_are_timed_in_one_pass_and_speedup_vs_compile_follows():
    run = evaluation(device="cuda", baseline="both")
    run.bytes_moved = 1000
    measurement.run_timing(run, ScriptedReference(ms=1.0), honest_candidate(ms=0.25))
    timing = run.timing
    assert timing.baseline == "eager" and timing.reference_median_ms == pytest.approx(1.0)
    assert timing.compile_reference_median_ms == pytest.approx(0.5)
    assert measurement.speedup_vs_compile(timing, 100.0) == pytest.approx(2.0)
    assert measurement.speedup_vs_compile(timing, 1.5) == 1.5


def test_a_compile_baseline_that_fails_to_build_falls_back_to_eager_with_a_notice():
    reference = ScriptedReference(variants={"compile": "BackendCompilerFailed: no C compiler"})
    run = evaluation(device="cuda", baseline="compile")
    run.bytes_moved = 1000
    measurement.run_timing(run, reference, honest_candidate())
    assert run.timing.baseline == "eager" and run.timing.compile_reference_median_ms is None
    assert any(n.code == NoticeCode.BASELINE_UNAVAILABLE and "no C compiler" in n.message for n in run.notices)


def test_the_cpu_path_says_the_compile_baseline_is_unavailable():
    run = evaluation(baseline="both")
    measurement.note_device(run, ScriptedReference())
    measurement.run_timing(run, ScriptedReference(), honest_candidate())
    notices = [n for n in run.notices if n.code == NoticeCode.BASELINE_UNAVAILABLE]
    assert len(notices) == 1 and "GPU only" in notices[0].message
    assert run.timing.compile_reference_median_ms is None
    assert measurement.speedup_vs_compile(run.timing, 100.0) is None
    quiet = evaluation()
    measurement.note_device(quiet, ScriptedReference())
    assert quiet.notices == []


def test_the_reference_fp32_pin_is_said_in_the_result():
    run = evaluation(device="cuda")
    measurement.note_device(run, ScriptedReference(fp32_note="torch.backends.cudnn.allow_tf32 = False"))
    assert any(n.code == NoticeCode.REFERENCE_IEEE_FP32 and "cudnn" in n.message for n in run.notices)


# -- profiling ---------------------------------------------------------------------------------

def profiled(**reply: Any) -> ScriptedCandidate:
    return ScriptedCandidate({"profile": reply})


@pytest.mark.parametrize("kernels", [
    [["k", -5.0, 1]],
    [["k", math.nan, 1]],
    [["k", math.inf, 1]],
    [["k", "12", 1]],
    [["k", 1.0, -1]],
    [["k", 1.0, True]],
    [[3, 1.0, 1]],
    [["k", 1.0]],
    "kernels",
    None,
])
def test_a_bad_profile_reply_is_a_crash_inside_the_phase(kernels):
    run = evaluation(device="cuda")
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_profile(run, profiled(kernels=kernels, candidate_kernels=["k"]))
    assert failed.value.status == Status.CRASHED


def test_bad_name_lists_are_crashes_too():
    run = evaluation(device="cuda")
    with pytest.raises(CandidateFailed):
        measurement.run_profile(run, profiled(kernels=[["k", 1.0, 1]], candidate_compiled_kernels=[1]))
    with pytest.raises(CandidateFailed):
        measurement.run_profile(run, profiled(kernels=[["k", 1.0, 1]], candidate_kernels=["k"],
                                              candidate_launch_counts={"k": -1}))


def test_coverage_uses_the_exact_compiled_names_and_the_launch_counts():
    run = evaluation(device="cuda")
    reply = {"kernels": [["ampere_sgemm_128x64_tn", 90.0, 2], ["add_kernel", 10.0, 1]],
             "candidate_kernels": ["add_kernel", "ampere_sgemm_128x64_tn"],
             "candidate_compiled_kernels": ["add_kernel", "ampere_sgemm_128x64_tn"],
             "candidate_launch_counts": {"add_kernel": 1, "ampere_sgemm_128x64_tn": 1}}
    measurement.run_profile(run, profiled(**reply))
    assert run.coverage == pytest.approx(0.1)
    assert [k.candidate for k in run.kernel_profile] == [False, True]


def test_the_clean_rooms_profile_decides_the_coverage_and_the_candidates_is_a_filter():
    """The candidate worker claims all the time for its kernel; the clean room's replays of the
    logged work show cuBLAS doing 90 % of it. The coverage is the clean room's; tampering seen
    during the candidate's own profiled calls still ends the evaluation."""
    run = evaluation(device="cuda")
    _records(run)
    room = ScriptedRoom({"kernels": [["ampere_sgemm_128x64_tn", 90.0, 1], ["add_kernel", 10.0, 1]],
                         "candidate_kernels": ["add_kernel"], "candidate_compiled_kernels": ["add_kernel"],
                         "candidate_launch_counts": {"add_kernel": 1}})
    run._profile_replays(room, run._measured_trial([0, 1, 2]), 3)
    assert room.requests[-1][0] == "profile" and room.requests[-1][1]["calls"] == 3
    claimed = {"kernels": [["add_kernel", 100.0, 1]], "candidate_compiled_kernels": ["add_kernel"],
               "candidate_launch_counts": {"add_kernel": 1}}
    measurement.run_profile(run, profiled(**claimed))
    assert run.coverage == pytest.approx(0.1) and not run.violations
    assert [(k.kernel, k.candidate) for k in run.kernel_profile] == [("ampere_sgemm_128x64_tn", False),
                                                                     ("add_kernel", True)]
    measurement.run_profile(run, profiled(**claimed, tampered=["torch.profiler.profile"], refused=[]))
    assert ViolationCode.HARNESS_TAMPERING in run.violations


@pytest.mark.parametrize("reply, outcome", [
    ({"kernels": [["k", -1.0, 1]], "candidate_compiled_kernels": ["k"]}, "crashed"),
    ({"kernels": "k"}, "crashed"),
    (("error", {"kind": "diverged", "message": "boom"}), "evidence_mismatch"),
])
def test_a_bad_profile_from_the_clean_room_is_never_the_coverage(reply, outcome):
    run = evaluation(device="cuda")
    _records(run)
    try:
        run._profile_replays(ScriptedRoom(reply), run._measured_trial([0]), 3)
    except measurement.ProtocolError:
        assert outcome == "crashed" and run.room_profile is None
        return
    assert outcome in run.violations and run.room_profile is None


def test_tampering_reported_with_the_profile_is_a_violation():
    run = evaluation(device="cuda")
    measurement.run_profile(run, profiled(kernels=[["k", 1.0, 1]], candidate_compiled_kernels=["k"],
                                          tampered=["torch.autograd.DeviceType"], refused=[]))
    assert ViolationCode.HARNESS_TAMPERING in run.violations
    control = evaluation(device="cuda")
    measurement.run_profile(control, profiled(kernels=[["k", 1.0, 1]], candidate_compiled_kernels=["k"],
                                              tampered=[], refused=[]))
    assert control.violations == {} and control.coverage == 1.0


# -- options and the result's new fields --------------------------------------------------------

def test_baseline_and_device_index_options_round_trip_and_are_validated():
    options = EvalOptions(device="cuda:1", baseline="both")
    assert (options.device, options.baseline) == ("cuda:1", "both")
    for bad in ({"baseline": "inductor"}, {"device": "gpu"}, {"device": "cuda:-1"}, {"device": "cuda:x"},
                {"candidate_memory_fraction": 1.0}, {"candidate_memory_fraction": True}):
        with pytest.raises(OptionsError):
            EvalOptions(**bad)


def test_speedup_vs_compile_survives_the_json_round_trip():
    result = EvalResult(status=Status.OK, speedup=2.0, speedup_vs_compile=1.25,
                        timing=TimingReport("m", "d", 1.0, 0.5, 3, 3, baseline="eager",
                                            compile_reference_median_ms=0.625, charged_reps=1))
    back = EvalResult.from_dict(result.to_dict())
    assert back.speedup_vs_compile == 1.25 and back.timing.compile_reference_median_ms == 0.625
    assert EvalResult.from_dict({"status": "ok"}).speedup_vs_compile is None


# -- the report, field by field (mutation testing of measurement.py found fields no test read) -----

def _report(**fields: Any) -> TimingReport:
    base = dict(method="scripted", device_name="fake", reference_median_ms=2.0, candidate_median_ms=1.0,
                reference_reps=6, candidate_reps=6, reference_host_median_ms=2.0, candidate_host_median_ms=1.0,
                wall_clock_estimate_ms=None, floor_ms=None, bandwidth_gbps=None, meaningful=False, baseline="eager",
                compile_reference_median_ms=None, flop_floor_ms=None, charged_reps=0, reported_median_ms=1.0,
                replay_median_ms=None, replay_reps=0)
    return TimingReport(**{**base, **fields})


def test_the_cpu_report_field_by_field():
    run = evaluation()
    measurement.run_timing(run, ScriptedReference(ms=2.0), honest_candidate(ms=1.0))
    assert run.violations == {} and run.notices == []
    # The parent's own clock of scripted round trips: the baseline plus microseconds.
    assert run.timing.wall_clock_estimate_ms == pytest.approx(2.0, abs=0.05)
    assert run.timing == _report(wall_clock_estimate_ms=run.timing.wall_clock_estimate_ms)


def test_the_gpu_report_adds_the_floor_and_the_bandwidth_and_a_report_at_the_floor_passes():
    for candidate_ms in (1.5, 1.0):  # above the floor, exactly at it
        run = evaluation(device="cuda")
        run.bytes_moved = 6_000_000_000  # at 3e12 B/s with the floor's slack of 2: 1.0 ms
        measurement.run_timing(run, ScriptedReference(ms=2.0), honest_candidate(ms=candidate_ms))
        assert run.violations == {}, (candidate_ms, run.violations)
        assert run.timing == _report(method="scripted, held", candidate_median_ms=candidate_ms,
                                     candidate_host_median_ms=candidate_ms, reported_median_ms=candidate_ms,
                                     wall_clock_estimate_ms=run.timing.wall_clock_estimate_ms, floor_ms=1.0,
                                     bandwidth_gbps=3000.0, meaningful=True)


def test_a_gpu_median_below_the_bandwidth_floor_is_an_implausible_speedup_naming_the_figures():
    run = evaluation(device="cuda")
    run.bytes_moved = 6_000_000_000
    measurement.run_timing(run, ScriptedReference(ms=2.0), honest_candidate(ms=0.5))
    (violation,) = [v for v in run.violations.values() if v.code == ViolationCode.IMPLAUSIBLE_SPEEDUP]
    assert violation.message == ("a median of 0.5 ms per call is faster than moving the task's 6e+03 MB allows at "
                                 "this device's measured bandwidth (3000 GB/s, floor 1 ms)")


@dataclass
class RecheckingReference(ScriptedReference):
    """Also answers ``expected_for``: the output the reference computes for a timed call's seed."""

    expected_for: list[int] = field(default_factory=list)

    def _reply(self, kind: str, payload: Any) -> dict[str, Any]:
        if kind == "expected_for":
            self.expected_for.append(payload["seed"])
            import torch

            return {"expected": torch.full((4,), float(payload["seed"] % 7))}
        return super()._reply(kind, payload)


def _seeded(run: _Evaluation) -> _Evaluation:
    seeds = iter(range(100, 10_000))
    run.seed_source = lambda: next(seeds)
    return run


def test_rechecked_calls_keep_their_output_for_the_reference_of_the_same_seed():
    import torch

    run = _seeded(evaluation(timing_rechecks=6))
    reference = RecheckingReference()
    seen: list[int] = []

    def rep(payload):
        seen.append(payload["seed"])
        return {"ms": 1.0, "host_ms": 1.0, "tail_ms": 0.0, "charged": False}

    candidate = honest_candidate(rep=rep, keep=lambda payload: {"outputs": torch.full((4,), float(seen[-1] % 7))})
    measurement.run_timing(run, reference, candidate)
    assert run.violations == {}
    assert reference.expected_for == seen and len(seen) == 6  # every call, each against its own seed
    assert candidate.requests.count("keep") == 6 and "drop" not in candidate.requests
    assert run.timing.wall_clock_estimate_ms is None  # kept calls carry outputs: no round trip is timed


def test_a_rechecked_call_whose_output_differs_is_a_timed_output_mismatch_naming_the_call():
    import torch

    run = _seeded(evaluation(timing_rechecks=6))
    candidate = honest_candidate(keep={"outputs": torch.full((4,), 123.0)})
    measurement.run_timing(run, RecheckingReference(), candidate)
    violation = run.violations[ViolationCode.TIMED_OUTPUT_MISMATCH]
    assert violation.message.startswith("the output of timed call ")
    assert violation.message.endswith("outputs must be computed on every call")


def test_the_requests_carry_the_warm_up_budget_the_variants_and_fresh_seeds():
    run = _seeded(evaluation(warmup_ms=7.0))
    reference = ScriptedReference()
    asked: list[tuple[str, Any]] = []
    original = reference.request

    def recording(kind, payload, expect, required=None, optional=None):
        asked.append((kind, payload))
        return original(kind, payload, expect, required, optional)

    reference.request = recording
    candidate = honest_candidate()
    measurement.run_timing(run, reference, candidate)
    assert asked[0] == ("time_start", {"warmup_ms": 7.0, "variants": []})
    assert candidate.payloads["time_start"] == {"warmup_ms": 7.0}
    seeds = [payload["seed"] for kind, payload in asked if kind == "rep"]
    assert len(seeds) == 6 and len(set(seeds)) == 6 and all(p["variant"] == "eager" for k, p in asked if k == "rep")
    assert [kind for kind, _ in asked].count("drop") == 6


@pytest.mark.parametrize("error, status, words", [
    (TimeoutError(), Status.TIMEOUT, "exceeded the 60 s budget during timing block 0"),
    (KeyError("ms"), Status.CRASHED, "broke the timing protocol during timing block 0 (exited with code 0)"),
])
def test_a_candidate_that_times_out_or_breaks_the_protocol_mid_block_ends_the_evaluation(error, status, words):
    def rep(payload):
        raise error

    run = evaluation(timeout=60.0)
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_timing(run, ScriptedReference(), honest_candidate(rep=rep))
    assert failed.value.status == status and words in failed.value.message


# -- the evidence of timed and profiled calls, and the profile reply, as pure functions -------------

def test_rep_evidence_names_the_call_the_tampering_the_refusals_and_the_new_threads():
    run = evaluation()
    measurement.check_rep_evidence(run, {
        "tampered": [f"f{i}" for i in range(10)] + [3, "x" * 300], "refused": [f"op{i}" for i in range(8)] + [None],
        "threads_before": 2, "threads_after": 5}, 4)
    assert run.violations[ViolationCode.HARNESS_TAMPERING].message == (
        "during timed call 4 the candidate replaced functions the evaluator relies on: "
        + ", ".join(f"f{i}" for i in range(8)))
    assert run.violations[ViolationCode.FORBIDDEN_CONSTRUCT].message == (
        "the candidate attempted operations refused at run time: " + "; ".join(f"op{i}" for i in range(6)))
    assert run.violations[ViolationCode.BACKGROUND_THREAD].message == (
        "during timed call 4 the candidate left 3 new thread(s) running; do all work inside the call")
    profiled = evaluation()
    measurement.check_rep_evidence(profiled, {"tampered": ["y" * 300]}, None)
    message = profiled.violations[ViolationCode.HARNESS_TAMPERING].message
    assert message.startswith("during the profiled calls the candidate") and message.endswith(": " + "y" * 200)


@pytest.mark.parametrize("done", [
    {}, {"tampered": "not a list", "refused": {"a": 1}}, {"tampered": [1, None], "refused": [2.0]},
    {"threads_before": 3, "threads_after": 3}, {"threads_before": 3, "threads_after": 2},
    {"threads_before": "3", "threads_after": 9}, {"threads_before": 3, "threads_after": None},
])
def test_rep_evidence_with_nothing_to_report_adds_no_violation(done):
    run = evaluation()
    measurement.check_rep_evidence(run, done, 0)
    assert run.violations == {}


def test_a_well_formed_profile_reply_is_parsed_into_kernels_names_and_counts():
    kernels, names, counts = measurement.parse_profile_reply({
        "kernels": [["k1", 2.5, 3], ("aten_add", 0, 0)], "candidate_compiled_kernels": ["k1_0d1d"],
        "candidate_kernels": ["k1"], "candidate_launch_counts": {"k1_0d1d": 3}})
    assert [(k.name, k.device_us, k.count) for k in kernels] == [("k1", 2.5, 3), ("aten_add", 0.0, 0)]
    assert names == ["k1_0d1d"] and counts == {"k1_0d1d": 3}
    # Without compiled names the Python names are used; without counts, None.
    _, names, counts = measurement.parse_profile_reply({"kernels": [], "candidate_kernels": ["k1"]})
    assert names == ["k1"] and counts is None
    assert measurement.parse_profile_reply({"kernels": []})[1:] == ([], None)


@pytest.mark.parametrize("reply, words", [
    ([], "not an object"),
    ({"kernels": "k"}, "not a list of bounded length"),
    ({"kernels": [["k", 1.0, 1]] * (measurement._MAX_PROFILE_ENTRIES + 1)}, "not a list of bounded length"),
    ({"kernels": [["k", 1.0]]}, "malformed profile entry"),
    ({"kernels": [[1, 1.0, 1]]}, "malformed profile entry"),
    ({"kernels": [["k", -1.0, 1]]}, "malformed profile entry"),
    ({"kernels": [["k", float("nan"), 1]]}, "malformed profile entry"),
    ({"kernels": [["k", 1.0, True]]}, "malformed profile entry"),
    ({"kernels": [["k", 1.0, -1]]}, "malformed profile entry"),
    ({"kernels": [["k", 1.0, 1.5]]}, "malformed profile entry"),
    ({"kernels": [], "candidate_kernels": "k"}, "candidate_kernels is not a list of names"),
    ({"kernels": [], "candidate_compiled_kernels": [1]}, "candidate_compiled_kernels is not a list of names"),
    ({"kernels": [], "candidate_launch_counts": [1]}, "candidate_launch_counts is not a {name: count} object"),
    ({"kernels": [], "candidate_launch_counts": {"k": -1}}, "candidate_launch_counts"),
    ({"kernels": [], "candidate_launch_counts": {"k": True}}, "candidate_launch_counts"),
    ({"kernels": [], "candidate_launch_counts": {1: 1}}, "candidate_launch_counts"),
])
def test_a_malformed_profile_reply_is_refused_with_its_reason(reply, words):
    with pytest.raises(ValueError) as refused:
        measurement.parse_profile_reply(reply)
    assert words in str(refused.value)


def test_cuda_devices_are_named_cuda_or_cuda_colon_index():
    assert measurement._is_cuda("cuda") and measurement._is_cuda("cuda:1")
    assert not measurement._is_cuda("cpu") and not measurement._is_cuda("cudax")


def test_a_compile_only_baseline_on_a_gpu_times_the_compiled_reference_alone():
    run = evaluation(device="cuda", baseline="compile")
    run.bytes_moved = 1000
    measurement.run_timing(run, ScriptedReference(ms=1.0), honest_candidate(ms=0.25))
    assert run.timing.baseline == "compile" and run.timing.reference_median_ms == pytest.approx(0.5)
    assert run.timing.reference_reps == 6 and run.timing.reference_host_median_ms is None


def test_uneven_blocks_take_the_remainder_first_and_alternate_reference_and_candidate():
    run = evaluation(timing_reps=7, timing_blocks=2)
    reference = ScriptedReference()
    order: list[str] = []
    original = reference.request
    reference.request = lambda kind, *a, **k: (order.append(f"ref:{kind}") if kind == "rep" else None) or original(
        kind, *a, **k)
    candidate = honest_candidate(rep=lambda payload: order.append("cand:rep") or {"ms": 1.0, "host_ms": 1.0})
    measurement.run_timing(run, reference, candidate)
    assert order == ["ref:rep"] * 4 + ["cand:rep"] * 4 + ["ref:rep"] * 3 + ["cand:rep"] * 3
    assert run.timing.candidate_reps == run.timing.reference_reps == 7


def test_the_held_method_is_the_references_and_a_hold_reply_is_checked():
    run = evaluation(device="cuda")
    run.bytes_moved = 1000

    class Unnamed(ScriptedReference):
        def _reply(self, kind, payload):
            reply = super()._reply(kind, payload)
            return {k: v for k, v in reply.items() if k != "method"} if kind == "hold" else reply

    measurement.run_timing(run, Unnamed(), honest_candidate())
    assert run.timing.method == "scripted"  # no method with the hold: the one from time_start stays

    class Garbled(ScriptedReference):
        def _reply(self, kind, payload):
            return {"hold_ms": "long", "method": 3} if kind == "hold" else super()._reply(kind, payload)

    with pytest.raises(ProblemError, match="malformed 'held' reply to 'hold'"):
        measurement.run_timing(evaluation(device="cuda"), Garbled(), honest_candidate())
    candidate = honest_candidate()
    measurement.run_timing(evaluation(device="cuda"), ScriptedReference(dispatch_ms=0.3), candidate)
    assert candidate.payloads["hold"] == {"dispatch_ms": 0.3}


# -- notices and the profile phase, word for word --------------------------------------------------

def test_charged_tails_are_said_with_their_count():
    candidate = honest_candidate()
    candidate.replies["rep"] = {"ms": 1.0, "host_ms": 1.0, "tail_ms": 0.9, "charged": True}
    run = evaluation()
    measurement.run_timing(run, ScriptedReference(), candidate)
    (notice,) = [n for n in run.notices if n.code == NoticeCode.TIMING_TAIL_CHARGED]
    assert notice.message == ("in 6 of 6 timed calls work went on after the end event (other streams); those calls "
                              "were timed to the point the device went idle")


def test_the_gpu_notices_name_the_fp32_pin_and_other_processes_on_the_gpu(monkeypatch):
    monkeypatch.setattr(measurement.gpu, "sharing_report", lambda device: f"report for {device}")
    monkeypatch.setattr(measurement.gpu, "sharing_notice", lambda report: f"shared: {report}")
    run = evaluation(device="cuda:0")
    measurement.note_device(run, ScriptedReference(fp32_note="TF32 off"))
    assert [(n.code, n.message) for n in run.notices] == [
        (NoticeCode.REFERENCE_IEEE_FP32, "the reference ran in IEEE float32 with TF32 off (TF32 off): expected "
         "outputs and the baseline's speed are float32's; the candidate's own TF32 use is its choice and the "
         "precision check judges it"),
        (NoticeCode.GPU_SHARED, "shared: report for cuda:0")]
    monkeypatch.setattr(measurement.gpu, "sharing_notice", lambda report: None)
    alone = evaluation(device="cuda")
    measurement.note_device(alone, ScriptedReference())
    assert alone.notices == []


def test_the_profile_phase_asks_for_the_configured_calls_and_keeps_twenty_kernels():
    run = evaluation(device="cuda", profile_calls=4)
    candidate = profiled(kernels=[[f"k{i}", float(i), 1] for i in range(25)], candidate_compiled_kernels=["k3"])
    measurement.run_profile(run, candidate)
    assert candidate.payloads["profile"] == {"calls": 4}
    assert len(run.kernel_profile) == 20
    third = run.kernel_profile[3]
    assert (third.kernel, third.device_us, third.count, third.candidate) == ("k3", 3.0, 1, True)
    assert run.violations == {}  # no observation in the reply: nothing to check


@pytest.mark.parametrize("error, status, words", [
    (TimeoutError(), Status.TIMEOUT, "the candidate exceeded the 60 s budget during profiling"),
    (KeyError("kernels"), Status.CRASHED, "the candidate broke the profiling protocol (exited with code 0): "),
])
def test_a_profile_that_times_out_or_breaks_the_protocol_ends_the_evaluation(error, status, words):
    def profile(payload):
        raise error

    run = evaluation(device="cuda", timeout=60.0)
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_profile(run, ScriptedCandidate({"profile": profile}))
    assert failed.value.status == status and failed.value.message.startswith(words)


@pytest.mark.parametrize("key", ["tampered", "refused", "threads_after"])
def test_any_one_evidence_field_in_the_profile_reply_is_checked(key):
    value = {"tampered": ["torch.cuda.Event"], "refused": ["os.fork"], "threads_after": 9}[key]
    extra = {"threads_before": 1} if key == "threads_after" else {}
    run = evaluation(device="cuda")
    measurement.run_profile(run, profiled(kernels=[["k", 1.0, 1]], candidate_compiled_kernels=["k"],
                                          **{key: value}, **extra))
    assert len(run.violations) == 1


@pytest.mark.parametrize("kind, phase", [
    ("time_start", "timing warm-up"), ("rep", "timing block 0"), ("drop", "timing block 0"),
    ("observe", "timing block 0"),
])
def test_a_wrong_reply_kind_names_the_phase_it_came_in(kind, phase):
    candidate = honest_candidate()
    original = candidate.request

    def wrong(request_kind, payload=None):
        message = original(request_kind, payload)
        return Message("surprise", message.payload) if request_kind == kind else message

    candidate.request = wrong
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_timing(evaluation(), ScriptedReference(), candidate)
    reply = {"time_start": "time_ready", "rep": "rep_done", "drop": "dropped", "observe": "observed"}[kind]
    assert failed.value.status == Status.CRASHED
    assert f"during {phase} (exited with code 0): expected a '{reply}' reply during {phase}, got 'surprise'" \
        in failed.value.message


@pytest.mark.parametrize("field, value", [("method", 3), ("device_name", 4), ("dispatch_ms", "fast"),
                                          ("dense_matmul_flops", "many"), ("variants", [1])])
def test_a_malformed_time_ready_from_the_reference_is_the_problems_error(field, value):
    class Garbled(ScriptedReference):
        def _reply(self, kind, payload):
            reply = super()._reply(kind, payload)
            return {**reply, field: value} if kind == "time_start" else reply

    with pytest.raises(ProblemError, match=f"malformed 'time_ready' reply to 'time_start' \\(field '{field}'"):
        measurement.run_timing(evaluation(), Garbled(), honest_candidate())


@pytest.mark.parametrize("baseline, words", [("compile", "timing against the eager reference"),
                                             ("both", "speedup_vs_compile is null")])
def test_a_failed_compile_baseline_says_what_the_speedup_falls_back_to(baseline, words):
    why = "BackendCompilerFailed: " + "c" * 400
    run = evaluation(device="cuda", baseline=baseline)
    run.bytes_moved = 1000
    measurement.run_timing(run, ScriptedReference(variants={"compile": why}), honest_candidate())
    (notice,) = [n for n in run.notices if n.code == NoticeCode.BASELINE_UNAVAILABLE]
    assert notice.message == f"the compile baseline could not be built or warmed up ({why[:300]}); {words}"


def test_the_replay_notice_names_both_figures():
    run = evaluation()
    run.replay_ms = [3.0] * 6
    measurement.run_timing(run, ScriptedReference(ms=1.0), honest_candidate(ms=1.0))
    (notice,) = [n for n in run.notices if n.code == NoticeCode.TIMING_FROM_REPLAY]
    assert notice.message == ("the clean room's replay of the forward's logged launches and ops took 3 ms per call "
                              "(median of 6), more than the 1 ms the candidate worker reported; the speedup uses the "
                              "replay's figure")


def test_a_report_the_parents_clock_contradicts_says_so_in_words(clock):
    run = evaluation()
    measurement.run_timing(run, ScriptedReference(ms=2.0), honest_candidate(ms=0.5))
    message = run.violations[ViolationCode.IMPLAUSIBLE_TIMING].message
    assert message.startswith("the candidate reported a median of 0.5 ms per call, but the evaluator's own clock "
                              "puts it at about ")
    assert message.endswith("; reported times must be real")


def test_the_flop_floor_notice_and_violation_say_why(monkeypatch):
    reference = ScriptedReference(ms=1.0, flops=2 * 4096**3, flops_per_s=700e12)
    run = evaluation(device="cuda")
    run.bytes_moved = 1000
    measurement.run_timing(run, reference, honest_candidate(ms=0.01))
    assert run.violations[ViolationCode.IMPLAUSIBLE_SPEEDUP].message.startswith(
        "a median of 0.01 ms per call is below the 0.09817 ms the reference's 1.37e+11 dense matmul FLOPs take at "
        "this device's measured half-precision GEMM rate, and the evaluator's own clock puts the call at about ")
    monkeypatch.setattr(measurement.plausibility, "wall_clock_estimate_ms", lambda *a: 0.011)
    confirmed = evaluation(device="cuda")
    confirmed.bytes_moved = 1000
    measurement.run_timing(confirmed, reference, honest_candidate(ms=0.01))
    (notice,) = [n for n in confirmed.notices if n.code == NoticeCode.FLOP_FLOOR_BEATEN]
    assert notice.message == ("a median of 0.01 ms is below the 0.09817 ms the reference's 1.37e+11 dense matmul "
                              "FLOPs take at this device's half-precision GEMM rate; the evaluator's own clock "
                              "confirms it (the candidate must skip work the reference does)")


def test_a_report_exactly_at_the_flop_floor_passes(monkeypatch):
    reference = ScriptedReference(ms=1.0, flops=2 * 4096**3, flops_per_s=700e12)
    floor = measurement.plausibility.flop_floor_ms(2 * 4096**3, 700e12)
    run = evaluation(device="cuda")
    run.bytes_moved = 1000
    monkeypatch.setattr(measurement.plausibility, "wall_clock_estimate_ms", lambda *a: floor)
    measurement.run_timing(run, reference, honest_candidate(ms=floor))
    assert run.violations == {} and not any(n.code == NoticeCode.FLOP_FLOOR_BEATEN for n in run.notices)


def test_timing_and_profiling_hold_the_gpu_exclusively_for_the_reference_timeout(monkeypatch):
    import contextlib

    held: list = []

    @contextlib.contextmanager
    def device_lock(device, exclusive, timeout):
        held.append((device, exclusive, timeout))
        yield

    monkeypatch.setattr(measurement.gpu, "device_lock", device_lock)
    run = evaluation(device="cuda:1", reference_timeout=77.0)
    run.bytes_moved = 1000
    measurement.run_timing(run, ScriptedReference(), honest_candidate())
    measurement.run_profile(run, profiled(kernels=[["k", 1.0, 1]], candidate_compiled_kernels=["k"]))
    assert held == [("cuda:1", True, 77.0)] * 2
    cpu = evaluation()
    measurement.run_timing(cpu, ScriptedReference(), honest_candidate())
    assert len(held) == 2  # no lock on a CPU


def test_evidence_found_by_a_timed_call_names_that_call():
    observations = iter([{"threads_before": 1, "threads_after": 1, "tampered": ["time.perf_counter"], "refused": []}]
                        + [{"threads_before": 1, "threads_after": 1, "tampered": [], "refused": []}] * 5)
    run = evaluation()
    measurement.run_timing(run, ScriptedReference(), honest_candidate(observe=lambda payload: next(observations)))
    assert run.violations[ViolationCode.HARNESS_TAMPERING].message.startswith("during timed call 0 ")


def test_the_profile_reply_bounds_at_their_edges():
    at_most = [["k", 1.0, 1]] * measurement._MAX_PROFILE_ENTRIES
    assert len(measurement.parse_profile_reply({"kernels": at_most})[0]) == measurement._MAX_PROFILE_ENTRIES
    assert measurement.parse_profile_reply({"kernels": [], "candidate_launch_counts": {"k": 0}})[2] == {"k": 0}
    with pytest.raises(ValueError, match="malformed profile entry"):
        measurement.parse_profile_reply({"kernels": [["k", 1.0, 2.0]]})


# -- the paired confirmation of the wall-clock cross-check (plausibility) -------------------------

class FakeClock:
    """The parent's `time.perf_counter` in these tests: it moves only when a scripted call takes time,
    so round trips are exact and the verdicts do not depend on the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(measurement, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


def _sleeping_candidate(clock: FakeClock, sleep_s: float, reps_sleeping: int | None,
                        seeds: list[int] | None = None, **replies: Any) -> ScriptedCandidate:
    """Reports 1 ms per call; its first `reps_sleeping` calls (all, when None) take `sleep_s` of wall time.
    Each call's seed is appended to `seeds` (when given); `replies` replace other request kinds' replies."""
    calls = [] if seeds is None else seeds

    def rep(payload: Any) -> dict[str, Any]:
        calls.append(payload["seed"])
        if reps_sleeping is None or len(calls) <= reps_sleeping:
            clock.advance(sleep_s)
        return {"ms": 1.0, "host_ms": 1.0, "tail_ms": 0.0, "charged": False}

    return honest_candidate(rep=rep, **replies)


def test_a_burst_that_lands_on_the_candidates_blocks_alone_is_not_implausible_timing(clock):
    # An H200 pool of four read an honest 01_scaled_add at 0.476 ms by the blocks for 0.0045 ms
    # reported: the other evaluations' GPU work fell on the candidate's block. The paired pass,
    # run because the blocks disagreed, sees calls as fast as reported and decides.
    run = evaluation(timing_reps=6, timing_blocks=1)
    candidate = _sleeping_candidate(clock, 0.008, reps_sleeping=6)
    measurement.run_timing(run, ScriptedReference(ms=1.0), candidate)
    assert ViolationCode.IMPLAUSIBLE_TIMING not in run.violations
    assert candidate.requests.count("rep") == 6 + 8  # the blocks, then the minimum of pairs
    assert run.timing.wall_clock_estimate_ms == pytest.approx(1.0, abs=0.5)  # the pairs' estimate


def test_a_call_slower_than_reported_in_every_pair_is_implausible_timing_naming_both_passes(clock):
    run = evaluation(timing_reps=6, timing_blocks=1)
    candidate = _sleeping_candidate(clock, 0.008, reps_sleeping=None)
    measurement.run_timing(run, ScriptedReference(ms=1.0), candidate)
    message = run.violations[ViolationCode.IMPLAUSIBLE_TIMING].message
    assert "over 8 back-to-back pairs" in message and message.endswith("; reported times must be real")
    assert run.timing.wall_clock_estimate_ms > 7.0


def test_the_paired_pass_runs_only_when_the_blocks_disagree_and_alternates_its_order(clock):
    quiet = evaluation(timing_reps=6, timing_blocks=2)
    candidate = honest_candidate()
    measurement.run_timing(quiet, ScriptedReference(), candidate)
    assert candidate.requests.count("rep") == 6 and ViolationCode.IMPLAUSIBLE_TIMING not in quiet.violations

    run = evaluation(timing_reps=10, timing_blocks=1)
    reference = ScriptedReference(ms=1.0)
    order: list[str] = []
    original = reference.request
    reference.request = lambda kind, *a, **k: (order.append("ref") if kind == "rep" else None) or original(
        kind, *a, **k)
    inner = _sleeping_candidate(clock, 0.005, reps_sleeping=10)

    def candidate_rep(payload: Any) -> dict[str, Any]:
        order.append("cand")
        return inner.replies["rep"](payload)

    candidate = honest_candidate(rep=candidate_rep)
    measurement.run_timing(run, reference, candidate)
    pairs = order[20:]
    assert len(pairs) == 2 * 10  # as many pairs as timed candidate round trips (≥ 8)
    assert pairs == ["ref", "cand", "cand", "ref"] * 5  # which worker goes first alternates in every pair
    assert candidate.requests.count("observe") == 20  # every paired call's evidence is checked too


# The confirmation pass is one more place to cheat: the candidate can count its calls and know
# when the blocks are over (there are `timing_reps` of them). Two ways, and what stops each.

def test_a_forged_block_report_is_caught_even_when_the_pairs_report_the_truth(clock):
    # Every call really takes 8 ms; the blocks (the speedup's figures) claim 1 ms, the pairs the
    # truth. The blocks' reports are judged against the pairs' clock too.
    run = evaluation(timing_reps=6, timing_blocks=1)
    calls = []

    def rep(payload: Any) -> dict[str, Any]:
        calls.append(payload["seed"])
        clock.advance(0.008)
        claimed = 1.0 if len(calls) <= 6 else 9.0
        return {"ms": claimed, "host_ms": claimed, "tail_ms": 0.0, "charged": False}

    measurement.run_timing(run, ScriptedReference(ms=1.0), honest_candidate(rep=rep))
    assert len(calls) == 6 + 8
    assert "back-to-back pairs" in run.violations[ViolationCode.IMPLAUSIBLE_TIMING].message


def test_skipping_the_work_in_the_pairs_is_caught_by_their_secret_rechecks(clock):
    # The blocks forge (8 ms real, 1 ms claimed) but compute; the pairs do nothing, fast, so their
    # clock would agree with the forged 1 ms. Some of the pairs' outputs are kept and compared,
    # chosen after each call, as in the blocks: a skipped computation is a timed output mismatch.
    import torch

    run = _seeded(evaluation(timing_reps=6, timing_blocks=1, timing_rechecks=2))
    seeds: list[int] = []

    def keep(payload: Any) -> dict[str, Any]:
        computed = len(seeds) <= 6
        return {"outputs": torch.full((4,), float(seeds[-1] % 7) if computed else 0.0)}

    candidate = _sleeping_candidate(clock, 0.008, 6, seeds, keep=keep)
    measurement.run_timing(run, RecheckingReference(ms=1.0), candidate)
    assert len(seeds) > 6, "the blocks did not disagree, so no pair pass ran"
    violation = run.violations[ViolationCode.TIMED_OUTPUT_MISMATCH]
    assert int(violation.message.split("timed call ")[1].split(" ")[0]) >= 6  # a call of the pairs
    assert candidate.requests.count("keep") == 2 + 2  # as many rechecks in the pairs as in the blocks


def test_the_pairs_time_as_many_calls_as_the_blocks_besides_their_rechecks(clock):
    import torch

    run = _seeded(evaluation(timing_reps=12, timing_blocks=1, timing_rechecks=3))
    seeds: list[int] = []
    candidate = _sleeping_candidate(clock, 0.006, 12, seeds,  # a burst on the blocks alone
                                    keep=lambda payload: {"outputs": torch.full((4,), float(seeds[-1] % 7))})
    measurement.run_timing(run, RecheckingReference(ms=1.0), candidate)
    assert run.violations == {}
    assert len(seeds) == 12 + (9 + 3)  # 9 timed blocks calls -> 9 timed pairs, plus 3 rechecked
    assert candidate.requests.count("keep") == 3 + 3


# The pairs' figures, exactly: with a reference whose calls take time on the parent's clock too,
# every round trip is known, so the estimate, the order and the requests can be checked to the bit.

@dataclass
class ClockedReference(ScriptedReference):
    """A scripted reference whose ``rep`` takes its reported time on the fake clock; records every
    ``rep`` payload, and after `garble_after` reps answers with a malformed ``ms`` (a client's
    problem may)."""

    clock: FakeClock | None = None
    rep_payloads: list[dict[str, Any]] = field(default_factory=list)
    garble_after: int | None = None

    def _reply(self, kind: str, payload: Any) -> dict[str, Any]:
        reply = super()._reply(kind, payload)
        if kind == "rep":
            self.rep_payloads.append(dict(payload))
            self.clock.advance(reply["ms"] / 1e3)
            if self.garble_after is not None and len(self.rep_payloads) > self.garble_after:
                reply["ms"] = "fast"
        return reply


def _bursting_candidate(clock: FakeClock, reps_bursting: int) -> ScriptedCandidate:
    """Reports 1 ms and takes 1 ms on the clock per call; its first `reps_bursting` calls take 5 ms more
    (other work landing on the candidate's blocks), so the blocks disagree with its honest report."""
    calls = []

    def rep(payload: Any) -> dict[str, Any]:
        calls.append(payload["seed"])
        clock.advance(0.001 + (0.005 if len(calls) <= reps_bursting else 0.0))
        return {"ms": 1.0, "host_ms": 1.0, "tail_ms": 0.0, "charged": False}

    return honest_candidate(rep=rep)


def test_the_pairs_estimate_is_the_median_difference_plus_the_reference_to_the_bit(clock):
    # Every pair: candidate 1 ms − reference 1 ms = 0; the estimate is 0 + the reference's 1 ms. A sum
    # instead of the difference, or a round trip in other units, moves it.
    run = evaluation(timing_reps=10, timing_blocks=1)
    reference = ClockedReference(ms=1.0, clock=clock)
    measurement.run_timing(run, reference, _bursting_candidate(clock, reps_bursting=10))
    assert ViolationCode.IMPLAUSIBLE_TIMING not in run.violations
    assert run.timing.wall_clock_estimate_ms == pytest.approx(1.0, abs=1e-6)
    # The reference's calls in the pairs: the baseline's variant and a fresh seed each.
    pairs = reference.rep_payloads[10:]
    assert len(pairs) == 10 and all(set(p) == {"seed", "variant"} and p["variant"] == "eager" for p in pairs)
    assert len({p["seed"] for p in reference.rep_payloads}) == 20


def test_a_wrong_reply_kind_in_the_pairs_names_the_confirmation(clock):
    candidate = _bursting_candidate(clock, reps_bursting=6)
    original = candidate.request
    reps = []

    def wrong(request_kind, payload=None):
        message = original(request_kind, payload)
        if request_kind == "rep":
            reps.append(1)
            if len(reps) > 6:
                return Message("surprise", message.payload)
        return message

    candidate.request = wrong
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_timing(evaluation(timing_reps=6, timing_blocks=1), ClockedReference(clock=clock), candidate)
    assert failed.value.status == Status.CRASHED
    assert ("during timing confirmation (exited with code 0): expected a 'rep_done' reply during timing "
            "confirmation, got 'surprise'") in failed.value.message


def test_a_malformed_reference_reply_in_the_pairs_is_the_problems_error(clock):
    reference = ClockedReference(ms=1.0, clock=clock, garble_after=6)
    with pytest.raises(ProblemError, match="malformed .*field 'ms'"):
        measurement.run_timing(evaluation(timing_reps=6, timing_blocks=1), reference,
                               _bursting_candidate(clock, reps_bursting=6))


def test_a_reference_reply_without_the_expected_output_is_the_problems_error():
    class Outputless(RecheckingReference):
        def _reply(self, kind, payload):
            return {} if kind == "expected_for" else super()._reply(kind, payload)

    with pytest.raises(ProblemError, match="malformed 'expected' reply to 'expected_for'.*'expected'"):
        measurement.run_timing(_seeded(evaluation(timing_rechecks=2)), Outputless(), honest_candidate(
            keep={"outputs": None}))


def test_a_wrong_reply_kind_to_keep_names_the_block():
    candidate = honest_candidate(keep={"outputs": None})
    original = candidate.request
    candidate.request = lambda kind, payload=None: (
        Message("surprise", {}) if kind == "keep" else original(kind, payload))
    with pytest.raises(CandidateFailed) as failed:
        measurement.run_timing(_seeded(evaluation(timing_rechecks=6)), RecheckingReference(), candidate)
    assert ("during timing block 0 (exited with code 0): expected a 'output' reply during timing block 0, "
            "got 'surprise'") in failed.value.message
