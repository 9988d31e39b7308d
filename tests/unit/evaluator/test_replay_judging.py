"""The parent's judgement of a clean-room replay (`_Evaluation._judge_replay`), by value.

The candidate's own outputs are a filter: a candidate can compute them with torch and hide that
work from its launch log (`tests/adversarial/cases/harness_clean_forged_accuracy_*.py`). So every
check the parent makes of a trial's outputs, not only the tolerance, must hold for what the clean
room's re-execution of the log gives: better than every trivial output, float32-accurate against
the float64 evaluation, and, on a perturbed family, the family review. Each refusal here has its
honest twin: the same record replayed to the reference's own outputs passes.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
import torch

import tritongym
from tritongym.evaluator import replays
from tritongym.evaluator.common.channel import Channel, ChannelClosed
from tritongym.evaluator.compare import compare_outputs
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.parent import OutputReview, _Evaluation
from tritongym.evaluator.reference import ReferenceTrial
from tritongym.evaluator.result import Notice, NoticeCode, Status, Violation, ViolationCode
from tritongym.evaluator.session import Budget, CandidateFailed, WorkerHandle

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


def test_a_replay_that_returns_an_input_is_trivial():
    record = vector_trial()
    record.expected = record.inputs[0] + 1e-4 * record.expected  # a task close to the identity
    record.truth = record.expected.double()
    run = evaluation(precision_policy="off")
    assert run._judge_replay(record, replayed(record.inputs[0].clone())) is False
    assert "trivial output" in run.violations[ViolationCode.TRIVIAL_OUTPUT].message


def test_the_precision_hint_names_what_the_solution_text_uses():
    record = vector_trial()
    run = evaluation()
    run.solution_source = "acc = tl.dot(a.to(tl.float16), b)"
    assert run._judge_replay(record, replayed(record.expected * (1 + 1e-4))) is False
    assert "float16" in run.violations[ViolationCode.PRECISION_DOWNGRADE].message


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
    # one notice per disabled finding, each saying it was measured on the replay: nothing twice
    assert [n.code for n in run.notices] == [NoticeCode.CHECK_DISABLED] * 2
    assert all("re-execution of the launch log" in n.message for n in run.notices)
    assert "[trivial_output]" in run.notices[0].message and "[precision_downgrade]" in run.notices[1].message


def test_a_truth_less_trial_says_precision_was_not_checked_once():
    record = vector_trial()
    record.truth = None
    run = evaluation()
    assert run._judge_replay(record, replayed(record.expected.clone())) is True
    assert run._judge_replay(record, replayed(record.expected.clone())) is True
    assert [(n.code, n.message) for n in run.notices] == [
        (NoticeCode.PRECISION_UNCHECKED, "the reference could not be evaluated in float64; precision not checked")]


def test_a_perturbed_family_replayed_to_zeros_fails_the_family_review():
    # Outputs small enough that zeros pass the per-element tolerance: the family review's case.
    record = vector_trial("scaled", scale=1e-3)
    run = evaluation()
    assert run._judge_replay(record, replayed(torch.zeros(512))) is False
    message = run.violations[ViolationCode.EVIDENCE_MISMATCH].message
    assert "trivial output" in message and "trial 3" in message


@pytest.mark.parametrize("work, moved, ops, reference_moved, reference_ops, words", [
    ([512, 0], [0, 0], ["aten::mul"], (0, 0), [], "read 512 elements, as many as the reference"),
    ([0, 600], [0, 0], ["aten::mm"], (0, 0), [], "600 of the reference's 1e+03 matmul/convolution FLOPs"),
    ([0, 0], [0, 512], ["aten::_to_copy"], (0, 512), [], "the reference only moves data"),
    ([0, 0], [512, 0], ["aten::clone"], (512, 0), [], "512 elements copied into a new layout"),
    ([1, 0], [0, 0], ["aten::sigmoid", "aten::mul"], (0, 0), ["aten::sigmoid"],
     "include every compute op of the reference (aten::sigmoid, aten::mul)"),
    ([1, 0], [0, 0], [f"aten::op{i}" for i in range(7)], (0, 0), ["aten::op0"],
     "include every compute op of the reference (aten::op0, aten::op1, aten::op2, aten::op3, aten::op4, "
     "aten::op5);"),
])
def test_pytorch_work_the_room_executed_is_a_fallback(work, moved, ops, reference_moved, reference_ops, words):
    record = vector_trial()
    record.compute_work = (512, 1000) if work[1] else (512, 0)
    if reference_moved != (0, 0):
        record.compute_work = (0, 0)
    record.moved_elements = reference_moved
    run = evaluation()
    run.reference_ops = reference_ops
    payload = {**replayed(record.expected.clone()), "work": work, "moved": moved, "compute_ops": ops}
    assert run._judge_replay(record, payload) is False
    message = run.violations[ViolationCode.PYTORCH_FALLBACK].message
    assert message.startswith("trial 3, measured in the clean room: ") and words in message
    assert message.endswith("write the computation as Triton kernels")


def test_glue_below_the_reference_work_is_not_a_fallback():
    record = vector_trial()
    run = evaluation()
    run.reference_ops = ["aten::sigmoid"]
    payload = {**replayed(record.expected.clone()), "work": [511, 0], "moved": [0, 0], "compute_ops": ["aten::mul"]}
    assert run._judge_replay(record, payload) is True and run.violations == {}


RAW_COMPUTE = [["aten::add", 512], ["aten::mul", 256], ["aten::exp", 128], ["aten::div", 64], ["aten::sum", 32]]


def test_arithmetic_the_room_saw_on_the_inputs_floats_is_a_fallback_whatever_it_cost():
    # The room reports PyTorch arithmetic on the problem's values before any kernel wrote them
    # (`cleanroom.worker`'s raw_compute): a fallback even below every work threshold, the room's
    # first four ops named.
    record = vector_trial()
    run = evaluation()
    payload = {**replayed(record.expected.clone()), "raw_compute": RAW_COMPUTE}
    assert run._judge_replay(record, payload) is False
    assert run.violations == {ViolationCode.PYTORCH_FALLBACK: Violation(
        ViolationCode.PYTORCH_FALLBACK,
        "trial 3, measured in the clean room: PyTorch computed on the inputs' (or the model state's) floating-point "
        "values before any kernel wrote them (aten::add reading 512 elements, aten::mul reading 256 elements, "
        "aten::exp reading 128 elements, aten::div reading 64 elements). Views, copies, allocations and work on "
        "integer metadata are glue; arithmetic on the problem's data is its work: write it in the solution's Triton "
        "kernels")}
    # Its honest twin: the same replay with no such arithmetic passes.
    honest = evaluation()
    assert honest._judge_replay(record, {**replayed(record.expected.clone()), "raw_compute": []}) is True
    assert honest.violations == {}


def test_a_room_that_saw_raw_arithmetic_stops_the_exchange_at_that_trial(room_for):
    def raw(kind, payload):
        if kind == "state":
            return "state_set", {}
        return "replayed", {**replayed(payload["inputs"][0] * 2), "raw_compute": [["aten::mul", 256]]}

    run = evaluation()
    doubling_records(run)
    room = room_for(raw)
    run.run_clean_room(room.start)
    assert list(run.violations) == [ViolationCode.PYTORCH_FALLBACK]
    assert "(aten::mul reading 256 elements)" in run.violations[ViolationCode.PYTORCH_FALLBACK].message
    assert room.kinds() == ["state", "replay", "exit"]


@pytest.mark.parametrize("field, value", [
    ("work", [-1, 0]), ("work", ["1", 0]), ("moved", [-1, 0]), ("moved", [0, 1.0]), ("compute_ops", "aten::mul"),
    ("work", None),
    # raw_compute: a list of [op, elements read] pairs, nothing else
    ("raw_compute", {}), ("raw_compute", "aten::add"), ("raw_compute", [[1, 6]]), ("raw_compute", [["aten::add"]]),
    ("raw_compute", [["aten::add", 6, 1]]), ("raw_compute", [["aten::add", 6.0]]),
    ("raw_compute", [["aten::add", True]]),
])
def test_a_malformed_work_report_is_a_protocol_error(field, value):
    from tritongym.evaluator.common.channel import ProtocolError

    record = vector_trial()
    with pytest.raises(ProtocolError, match="^malformed replay report$"):
        evaluation()._judge_replay(record, {**replayed(record.expected.clone()), field: value})


@pytest.mark.parametrize("outputs", [lambda e: e + 1.0, lambda e: e[:10], lambda e: [e, e]])
def test_a_replay_outside_the_tolerance_is_an_evidence_mismatch(outputs):
    record = vector_trial()
    run = evaluation()
    assert run._judge_replay(record, replayed(outputs(record.expected.clone()))) is False
    assert list(run.violations) == [ViolationCode.EVIDENCE_MISMATCH]


# -- run_clean_room: the whole exchange with a scripted room over a real channel -------------------


class RoomProcess:
    """The room's process as the parent sees it: how it ended, and whether it was released."""

    def __init__(self) -> None:
        self.released = False
        self.graces: list[Any] = []

    def wait_exit(self, grace: float) -> str:
        self.graces.append(grace)
        return "exited with code 1"

    def release(self) -> None:
        self.released = True


class ScriptedRoom:
    """A clean room on one end of a real socket pair: `ready`, then `answer(kind, payload)` per
    request until `exit` (None: close the channel, as a crashed room does)."""

    def __init__(self, answer, first: tuple[str, Any] | None = ("ready", {})) -> None:
        parent_end, room_end = socket.socketpair()
        self.requests: list[tuple[str, Any]] = []
        self.started = 0
        self.process = RoomProcess()
        self.handle = WorkerHandle(process=self.process, channel=Channel(parent_end), budget=Budget(20.0))
        self._room = Channel(room_end)
        self._answer, self._first = answer, first
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def start(self) -> WorkerHandle:
        self.started += 1
        self._thread.start()
        return self.handle

    def _serve(self) -> None:
        try:
            if self._first is None:  # a room that never says it is ready
                time.sleep(3)
                return
            self._room.send(*self._first)
            while True:
                message = self._room.recv(timeout=20)
                self.requests.append((message.kind, message.payload))
                if message.kind == "exit":
                    return
                reply = self._answer(message.kind, message.payload)
                if reply is None:
                    return
                self._room.send(*reply)
        except (ChannelClosed, OSError):
            return
        finally:
            self._room.close()

    def kinds(self) -> list[str]:
        self._thread.join(20)
        return [kind for kind, _ in self.requests]

    def close(self) -> None:
        """Both ends, whether or not the parent ever started this room."""
        if self._thread.is_alive():
            self._thread.join(20)
        self.handle.channel.close()
        self._room.close()


@pytest.fixture
def room_for():
    """`room_for(answer, first=...)`: a `ScriptedRoom`, closed after the test."""
    made: list[ScriptedRoom] = []

    def make(answer, first: tuple[str, Any] | None = ("ready", {})) -> ScriptedRoom:
        made.append(ScriptedRoom(answer, first))
        return made[-1]

    yield make
    for room in made:
        room.close()


def honest_room(kind: str, payload: Any) -> tuple[str, Any]:
    if kind == "state":
        return "state_set", {}
    return "replayed", replayed(payload["inputs"][0] * 2)


def doubling_records(run: _Evaluation, families=("get_inputs", "get_inputs", "negated", "scaled", "offset"),
                     logs=None) -> None:
    """Trials of y = 2x whose logs are valid; `logs` (one per trial) replaces them."""
    for index, family in enumerate(families):
        x = torch.randn(256, generator=torch.Generator().manual_seed(index))
        log = logs[index] if logs is not None else {"events": [], "buffers": [], "trial": index}
        run.records.append(replays.TrialRecord(index=index, family=family, inputs=[x], expected=x * 2,
                                               compute_work=(256, 256), log=log, truth=x.double() * 2))


def test_an_honest_exchange_replays_every_family_after_the_state_and_says_exit(room_for):
    run = evaluation()
    doubling_records(run)
    run.state = [torch.ones(3)]
    room = room_for(honest_room)
    run.run_clean_room(room.start)
    kinds = room.kinds()
    assert run.violations == {}
    assert kinds[0] == "state" and kinds[-1] == "exit"
    assert torch.equal(room.requests[0][1]["tensors"][0], torch.ones(3))
    replayed_records = [next(r for r in run.records if torch.equal(r.inputs[0], payload["inputs"][0]))
                        for kind, payload in room.requests if kind == "replay"]
    assert sorted(r.family for r in replayed_records) == ["get_inputs", "negated", "offset", "scaled"]
    replay_logs = [payload["log"] for kind, payload in room.requests if kind == "replay"]
    assert replay_logs == [r.log for r in replayed_records]  # each trial's own log, with its own inputs
    assert [r.index for r in replayed_records] == sorted(r.index for r in replayed_records)
    assert room.process.released


def test_a_replay_that_changes_the_answer_is_an_evidence_mismatch_and_stops_the_exchange(room_for):
    def wrong(kind, payload):
        return ("state_set", {}) if kind == "state" else ("replayed", replayed(payload["inputs"][0] * 3))

    run = evaluation()
    doubling_records(run)
    room = room_for(wrong)
    run.run_clean_room(room.start)
    assert list(run.violations) == [ViolationCode.EVIDENCE_MISMATCH]
    assert run.violations[ViolationCode.EVIDENCE_MISMATCH].message.endswith(
        "although the candidate's own outputs did: they came from work the log does not show (a thread, a callable "
        "Triton runs, raw memory, an output object computing late)")
    assert room.kinds() == ["state", "replay", "exit"]  # the first failure decides; nothing more is replayed


def test_an_unreplayable_log_decides_before_any_room_starts(room_for):
    run = evaluation()
    doubling_records(run, logs=[{"events": [], "buffers": []}] * 4 + [{"error": "a tuple subclass as output"}])
    room = room_for(honest_room)
    run.run_clean_room(room.start)
    message = run.violations[ViolationCode.UNREPLAYABLE].message
    assert message.startswith("trial 4: the forward cannot be re-executed from its launch log "
                              "(a tuple subclass as output). Verdicts come from replaying each forward's Triton "
                              "launches and PyTorch ops in a process that never runs the solution's Python; ")
    assert message.endswith("on tensors, numbers, strings and dtypes")
    assert room.started == 0


class FreshReference:
    """The reference worker's `trial` as `_counterfactual` asks for it: fresh inputs of y = 2x."""

    def __init__(self, shape: tuple[int, ...] = (256,)) -> None:
        self.shape, self.calls = shape, []

    def trial(self, seed: int, family: str = "get_inputs", truth: bool = False) -> ReferenceTrial:
        self.calls.append(family)
        x = torch.randn(self.shape, generator=torch.Generator().manual_seed(seed % 1000 + 100))
        return ReferenceTrial(family=family, inputs=[x], expected=x * 2, compute_ops=[], finite=True,
                              truth=x.double() * 2 if truth else None)


def _scalars_log(index: int, count: int) -> dict[str, Any]:
    return {"events": [{"launch": "k:1", "grid": [1], "args": [float(index * 1000 + i) for i in range(count)],
                        "kwargs": {}}], "buffers": []}


def _replays(room: ScriptedRoom, run: _Evaluation) -> tuple[int, int]:
    """(replays of a trial on its own inputs, replays on fresh inputs) the room was asked for."""
    own = fresh = 0
    for kind, payload in room.requests:
        if kind == "replay":
            if any(torch.equal(r.inputs[0], payload["inputs"][0]) for r in run.records):
                own += 1
            else:
                fresh += 1
    return own, fresh


def test_logs_that_do_not_vary_between_trials_need_no_fresh_inputs(room_for):
    # The same log in every trial: a fixed program, already checked on every family's own inputs.
    run = evaluation()
    doubling_records(run, logs=[_scalars_log(0, 5) for _ in range(5)])
    reference = FreshReference()
    room = room_for(honest_room)
    run.run_clean_room(room.start, reference=reference)
    assert run.violations == {} and reference.calls == []
    assert _replays(room, run) == (4, 0)


def test_a_varying_log_that_computes_fresh_inputs_answer_passes_whatever_it_carries(room_for):
    # 70 values that differ per trial (a workspace's leftovers, say), but the log replayed on fresh
    # inputs still gives *their* answer: what varies does not carry the answer.
    run = evaluation()
    doubling_records(run, logs=[_scalars_log(i, 70) for i in range(5)])
    reference = FreshReference()
    room = room_for(honest_room)
    run.run_clean_room(room.start, reference=reference)
    assert run.violations == {}
    # every replayed trial (4) and every other trial over its budget (the fifth) on fresh inputs
    assert _replays(room, run) == (4, 5)
    assert sorted(reference.calls) == sorted(r.family for r in run.records)


def _stale_room(run: _Evaluation, stale: set[int] | None = None):
    """A room whose logs carry their own trial's answer: right on that trial's inputs only (the
    trials in `stale`, or every trial)."""
    def answer(kind: str, payload: Any) -> tuple[str, Any]:
        if kind == "state":
            return "state_set", {}
        own = [r for r in run.records if torch.equal(r.inputs[0], payload["inputs"][0])]
        if own:
            return "replayed", replayed(own[0].expected)
        record = next(r for r in run.records if r.log["events"] == payload["log"]["events"])
        fresh = record.index in stale if stale is not None else True
        return "replayed", replayed(record.expected if fresh else payload["inputs"][0] * 2)
    return answer


@pytest.mark.parametrize("count, charged", [(1, False), (8, True)])
def test_a_log_that_fails_on_fresh_inputs_passes_only_within_the_answers_budget(room_for, count, charged):
    # 256 float outputs hold at least 2048 bits: value-dependent host data may carry 128 of them.
    # One varying float (64 bits) is within it; eight (512 bits) are not.
    run = evaluation()
    logs = [_scalars_log(i, count) for i in range(5)]
    doubling_records(run, logs=logs)
    reference = FreshReference()
    room = room_for(_stale_room(run))
    run.run_clean_room(room.start, reference=reference)
    assert (ViolationCode.HOST_COMPUTE in run.violations) is charged
    if charged:
        message = run.violations[ViolationCode.HOST_COMPUTE].message
        assert "replayed on fresh inputs of the same shapes, does not compute their answer" in message
        assert "(512 bits:" in message and "budget of 128 bits" in message


def test_a_scalar_answer_has_no_budget_for_varying_host_data(room_for):
    run = evaluation()
    doubling_records(run, logs=[_scalars_log(i, 1) for i in range(5)])
    for record in run.records:
        record.expected = record.expected[:1].sum()  # one value: 8 bits of answer, a budget of 0
        record.truth = record.expected.double()
    room = room_for(_stale_room(run))
    run.run_clean_room(room.start, reference=FreshReference())
    assert "budget of 0 bits" in run.violations[ViolationCode.HOST_COMPUTE].message


def test_a_lone_trial_is_replayed_on_fresh_inputs_and_without_them_it_is_host_data(room_for):
    # Nothing to compare a single trial's log with: the counterfactual decides alone, and with no
    # fresh inputs to be had (no reference), nothing vouches for the log.
    run = evaluation()
    doubling_records(run, families=("get_inputs",), logs=[_scalars_log(0, 1)])
    room = room_for(honest_room)
    run.run_clean_room(room.start, reference=FreshReference())
    assert run.violations == {} and _replays(room, run) == (1, 1)
    run = evaluation()
    doubling_records(run, families=("get_inputs",), logs=[_scalars_log(0, 1)])
    room = room_for(honest_room)
    run.run_clean_room(room.start)
    message = run.violations[ViolationCode.HOST_COMPUTE].message
    assert "(no fresh inputs of the same shapes could be drawn)" in message


def test_fresh_inputs_must_have_the_trials_shapes(room_for):
    run = evaluation()
    doubling_records(run, logs=[_scalars_log(i, 70) for i in range(5)])
    reference = FreshReference(shape=(128,))
    room = room_for(honest_room)
    run.run_clean_room(room.start, reference=reference)
    assert "no fresh inputs of the same shapes" in run.violations[ViolationCode.HOST_COMPUTE].message
    assert len(reference.calls) == 3  # three draws, then the trial is judged without them


def test_a_fresh_replay_the_room_cannot_run_fails_the_counterfactual(room_for):
    def room_answer(kind, payload):
        if kind == "state":
            return "state_set", {}
        if not any(torch.equal(r.inputs[0], payload["inputs"][0]) for r in run.records):
            return "error", {"kind": "diverged", "message": "aten::add raised"}
        return "replayed", replayed(payload["inputs"][0] * 2)

    run = evaluation()
    doubling_records(run, logs=[_scalars_log(i, 70) for i in range(5)])
    room = room_for(room_answer)
    run.run_clean_room(room.start, reference=FreshReference())
    assert "it does not re-execute on them: aten::add raised" in run.violations[ViolationCode.HOST_COMPUTE].message


def _launch_log(args: list[Any], kwargs: dict[str, Any], grid: int = 4) -> dict[str, Any]:
    return {"events": [{"launch": "k:1", "grid": [grid], "args": args, "kwargs": kwargs}], "buffers": []}


def _configs(run: _Evaluation, per_trial: list[list[tuple[str, int]]]) -> None:
    for record, configs in zip(run.records, per_trial, strict=True):
        record.configs = configs


def test_a_room_that_dies_on_fresh_inputs_crashes_naming_that_trial_and_phase(room_for):
    def room_answer(kind, payload):
        if kind == "state":
            return "state_set", {}
        if not any(torch.equal(r.inputs[0], payload["inputs"][0]) for r in run.records):
            return None  # the room's channel closes on inputs the candidate never saw
        return "replayed", replayed(payload["inputs"][0] * 2)

    run = evaluation()
    doubling_records(run, logs=[_scalars_log(i, 70) for i in range(5)])  # every trial over its budget
    room = room_for(room_answer)
    with pytest.raises(CandidateFailed) as failed:
        run.run_clean_room(room.start, reference=FreshReference())
    assert failed.value.status == Status.CRASHED
    # the trials go to fresh inputs in order: trial 0 first
    assert "launch log (trial 0 on fresh inputs: exited with code 1)" in failed.value.message
    assert len(room.process.graces) == 1 and 0 < room.process.graces[0] <= 5
    assert room.process.released


@pytest.mark.parametrize("logs, fresh", [
    # One flag that differs between trials is one bit: enough to pick one of two answers kept on
    # the host, so every replayed trial is replayed on fresh inputs too.
    ([_launch_log([t == 2], {}) for t in range(5)], 4),
    # Two varying floats are 128 bits, exactly the budget of 256 float outputs: only the replayed
    # trials need fresh inputs (they vary); the trial not replayed carries no more than it may.
    ([_scalars_log(t, 2) for t in range(5)], 4),
    # Three are 192 bits, over it: that trial is replayed on fresh inputs as well.
    ([_scalars_log(t, 3) for t in range(5)], 5),
])
def test_which_trials_are_replayed_on_fresh_inputs(room_for, logs, fresh):
    run = evaluation()
    doubling_records(run, logs=logs)
    assert replays.value_budget_bits(run.records[0].expected) == 128
    reference = FreshReference()
    room = room_for(honest_room)
    run.run_clean_room(room.start, reference=reference)
    assert run.violations == {}
    assert _replays(room, run) == (4, fresh) and len(reference.calls) == fresh


def test_a_config_run_by_one_trial_only_wrong_on_fresh_inputs_is_a_wrong_trial_not_host_data(room_for):
    # Trial 4 alone ran config 1 (its own grid and block size): with no trial of its config to
    # compare it with whole, it is compared with the others by its arguments, which are theirs.
    # So it carries nothing from the host, and failing on fresh inputs is a wrong program.
    run = evaluation()
    doubling_records(run, logs=[_launch_log([1.0], {"BLOCK": 16})] * 4 + [_launch_log([1.0], {"BLOCK": 32}, grid=8)])
    _configs(run, [[("k", 0)]] * 4 + [[("k", 1)]])
    room = room_for(_stale_room(run, stale={4}))
    run.run_clean_room(room.start, reference=FreshReference())
    assert run.violations == {}
    failed = [t for t in run.trials if not t.passed]
    assert [t.index for t in failed] == [4] and "replayed in the clean room on fresh inputs" in failed[0].message


def test_an_answer_larger_than_the_default_frame_cap_comes_back_from_the_room(room_for):
    # Each reply is bounded by the trial's own expected outputs (twice, plus slack), not by the
    # channel's default cap: an outer product's answer, larger than that cap, is still received.
    from tritongym.evaluator.common.channel import DEFAULT_MAX_MESSAGE_BYTES

    side = int((DEFAULT_MAX_MESSAGE_BYTES / 4) ** 0.5) + 8  # float32 elements: just over the cap
    generator = torch.Generator().manual_seed(5)
    a, b = torch.rand(side, generator=generator) + 1, torch.rand(side, generator=generator) + 1

    def outer(kind, payload):
        if kind == "state":
            return "state_set", {}
        return "replayed", replayed(torch.outer(*payload["inputs"]))

    run = evaluation(precision_policy="off")
    for index in range(2):  # the same log twice: nothing varies, nothing for fresh inputs
        run.records.append(replays.TrialRecord(index=index, family="get_inputs", inputs=[a, b],
                                               expected=torch.outer(a, b), compute_work=(0, 0),
                                               log={"events": [], "buffers": []}))
    assert run.records[0].expected.numel() * 4 > DEFAULT_MAX_MESSAGE_BYTES
    room = room_for(outer)
    run.run_clean_room(room.start)
    assert run.violations == {}
    assert room.kinds() == ["state", "replay", "replay", "exit"]


def test_trials_that_ran_the_same_autotune_configs_are_compared_whole():
    # Block sizes and grids follow the config: 70 keyword values that differ between configs are
    # not host data, as long as each trial is compared with the trials that ran its own config.
    run = evaluation()
    per_config = {0: {f"C{i}": 16 for i in range(70)}, 1: {f"C{i}": 32 for i in range(70)}}
    combos = [0, 1, 0, 1, 0]
    doubling_records(run, logs=[_launch_log([1.0], per_config[c], grid=8 * (c + 1)) for c in combos])
    _configs(run, [[("k", c)] for c in combos])
    reference = FreshReference()
    room = ScriptedRoom(honest_room)
    try:
        run.run_clean_room(room.start, reference=reference)
    finally:
        room.close()
    # no host data; every replayed trial ran a config, so each is also replayed on fresh inputs
    assert run.violations == {} and len(reference.calls) == 4


def test_a_log_that_does_not_vary_but_fails_on_fresh_inputs_is_incorrect(room_for):
    # An autotuned trial's log, the same as its peers', wrong on inputs it never saw (a config wrong
    # on part of the input space): a failed trial, not host data.
    run = evaluation()
    doubling_records(run, logs=[_launch_log([1.0], {}) for _ in range(5)])
    _configs(run, [[("k", 0)]] * 5)
    room = room_for(_stale_room(run))
    run.run_clean_room(room.start, reference=FreshReference())
    assert run.violations == {}
    failed = [t for t in run.trials if not t.passed]
    assert len(failed) == 1 and "replayed in the clean room on fresh inputs" in failed[0].message


@pytest.mark.parametrize("logs, configs, varying", [
    # one config in every trial and 70 keyword values that differ per trial
    ([_launch_log([1.0], {f"C{i}": float(t * 100 + i) for i in range(70)}) for t in range(5)], [0] * 5,
     {0, 1, 2, 3, 4}),
    # trials 1 and 3 ran config 1 and differ between them: seen only when the two are compared whole
    ([_launch_log([1.0], {f"C{i}": float(i + 500 * (t == 3)) for i in range(70)} if t in (1, 3) else {})
      for t in range(5)], [0, 1, 0, 1, 0], {1, 3}),
    # a trial alone with its config: compared by its positional arguments only
    ([_launch_log([1.0] * 70, {}) for _ in range(4)] + [_launch_log([float(i) for i in range(70)], {})],
     [0, 0, 0, 0, 1], {4}),
])
def test_varying_launch_data_is_found_between_peers_of_one_config(room_for, logs, configs, varying):
    run = evaluation()
    doubling_records(run, logs=logs)
    _configs(run, [[("k", c)] for c in configs])
    room = room_for(_stale_room(run, stale=varying))
    run.run_clean_room(room.start, reference=FreshReference())
    message = run.violations[ViolationCode.HOST_COMPUTE].message
    assert int(message.split(":")[0].removeprefix("trial ")) in varying


@pytest.mark.parametrize("error, outcome", [
    ({"kind": "unsupported", "message": "tl.foo is not supported"}, Status.UNSUPPORTED),
    ({"kind": "out_of_bounds", "message": "kernel `k` loaded 1 element out of bounds"}, Status.RUNTIME_ERROR),
    ({"kind": "refused", "message": "`eval` is not Triton"}, ViolationCode.PYTHON_IN_KERNEL),
    ({"kind": "diverged", "message": "an op wrote elsewhere"}, ViolationCode.EVIDENCE_MISMATCH),
    ("not a dict", ViolationCode.EVIDENCE_MISMATCH),
])
def test_the_rooms_errors_are_believed_only_for_what_it_measured_itself(room_for, error, outcome):
    def failing(kind, payload):
        return ("state_set", {}) if kind == "state" else ("error", error)

    run = evaluation()
    doubling_records(run)
    room = room_for(failing)
    text = error["message"] if isinstance(error, dict) else "None"
    if isinstance(outcome, Status):
        with pytest.raises(CandidateFailed) as failed:
            run.run_clean_room(room.start)
        assert failed.value.status == outcome
        assert failed.value.message.endswith(f"(clean room): {text}")
        if outcome == Status.UNSUPPORTED:
            limits = [n.message for n in run.notices if n.code == NoticeCode.INTERPRETER_LIMIT]
            assert len(limits) == 1 and "uses (measured in the clean room); this is a limit" in limits[0]
    else:
        run.run_clean_room(room.start)
        assert list(run.violations) == [outcome]
        message = run.violations[outcome].message
        assert f"({text})" in message or f"refused one: {text}" in message
        if outcome == ViolationCode.EVIDENCE_MISMATCH:
            assert message.endswith("the outputs must come from the logged kernel launches and PyTorch ops alone")
        else:
            assert message.startswith("the clean room rebuilds each kernel from the solution's text with Triton")
        assert room.kinds() == ["state", "replay", "exit"]
    assert room.process.released


def test_the_rooms_words_are_cut_at_1500_characters(room_for):
    def failing(kind, payload):
        return ("state_set", {}) if kind == "state" else ("error", {"kind": "diverged", "message": "y" * 3000})

    run = evaluation()
    doubling_records(run)
    room = room_for(failing)
    run.run_clean_room(room.start)
    assert f"({'y' * 1500})" in run.violations[ViolationCode.EVIDENCE_MISMATCH].message


@pytest.mark.parametrize("first, answer, status, words", [
    (("hello", {}), honest_room, Status.CRASHED, "expected a 'ready' reply"),
    (("ready", {}), lambda kind, payload: None, Status.CRASHED,
     "stopped while re-executing the forward's launch log (state: exited with code 1)"),
    (("ready", {}), lambda kind, payload: ("state_set", {}) if kind == "state" else None, Status.CRASHED,
     "stopped while re-executing the forward's launch log (trial "),
    (None, honest_room, Status.TIMEOUT, "exceeded the 1 s budget (start)"),
    (("ready", {}), lambda kind, payload: time.sleep(3) or None, Status.TIMEOUT, "exceeded the 1 s budget (state)"),
    (("ready", {}), lambda kind, payload: ("state_set", {}) if kind == "state" else ("replayed", "outputs"),
     Status.CRASHED, "a malformed 'replayed' reply"),
    (("ready", {}), lambda kind, payload: ("state_set", {}) if kind == "state" else ("replayed", {
        **replayed(payload["inputs"][0] * 2), "work": [-1, 0]}), Status.CRASHED, "malformed replay report"),
    (("ready", {}), lambda kind, payload: ("state_set", {}) if kind == "state" else ("replayed", {
        **replayed(payload["inputs"][0] * 2), "compute_ops": [1]}), Status.CRASHED, "malformed replay report"),
    (("ready", {}), lambda kind, payload: ("state_set", {}) if kind == "state" else ("replayed", {
        **replayed(payload["inputs"][0] * 2), "moved": [0]}), Status.CRASHED, "malformed replay report"),
    (("ready", {}), lambda kind, payload: ("state_set", {}) if kind == "state" else time.sleep(3) or None,
     Status.TIMEOUT, "exceeded the 1 s budget (trial "),
])
def test_a_room_that_breaks_the_protocol_crashes_or_times_out_and_is_released(room_for, first, answer, status,
                                                                                 words):
    run = evaluation(timeout=1.0)
    doubling_records(run)
    room = room_for(answer, first=first)
    room.handle.budget = Budget(1.0)
    with pytest.raises(CandidateFailed) as failed:
        run.run_clean_room(room.start)
    assert failed.value.status == status
    assert words in failed.value.message
    if status == Status.CRASHED:  # a room that closed its channel but lingers is waited for, not forever
        assert len(room.process.graces) == 1 and 0 < room.process.graces[0] <= 5
    assert room.process.released


def test_an_error_from_the_room_itself_is_the_evaluators_failure_not_the_candidates(room_for):
    from tritongym.errors import EvaluatorError

    run = evaluation()
    doubling_records(run)
    room = room_for(honest_room, first=("error", {"message": "no torch here " + "x" * 600}))
    with pytest.raises(EvaluatorError) as failed:
        run.run_clean_room(room.start)
    assert str(failed.value) == "the clean room failed: no torch here " + "x" * (500 - len("no torch here "))
    assert room.process.released


def timing_room(kind: str, payload: Any) -> tuple[str, Any]:
    if kind == "time":
        return "timed", {"ms": [1.5] * payload["reps"]}
    if kind == "profile":
        return "profiled", {"kernels": [["k", 2.0, payload["calls"]]], "candidate_kernels": ["k"],
                            "candidate_compiled_kernels": ["k"]}
    return honest_room(kind, payload)


@pytest.mark.parametrize("time_reps, profile_calls", [(0, 0), (1, 0), (3, 0), (0, 1), (0, 2), (3, 2)])
def test_the_room_times_and_profiles_a_task_trial_after_the_replays_only_when_asked(room_for, time_reps,
                                                                                    profile_calls):
    run = evaluation()
    doubling_records(run)
    room = room_for(timing_room)
    run.run_clean_room(room.start, time_reps=time_reps, profile_calls=profile_calls)
    kinds = room.kinds()
    assert run.violations == {}
    asked = ["time"] * bool(time_reps) + ["profile"] * bool(profile_calls)
    assert kinds == ["state", *["replay"] * 4, *asked, "exit"]  # the replays first, then only what was asked
    measured = [payload for kind, payload in room.requests if kind in ("time", "profile")]
    assert all(next(r for r in run.records if torch.equal(r.inputs[0], p["inputs"][0])).family == "get_inputs"
               for p in measured)
    assert len({int(p["inputs"][0].sum() * 1000) for p in measured}) <= 1  # one trial, timed and profiled
    assert run.replay_ms == [1.5] * time_reps
    if time_reps:
        assert next(p for k, p in room.requests if k == "time")["reps"] == time_reps
    if profile_calls:
        assert next(p for k, p in room.requests if k == "profile")["calls"] == profile_calls
        kernels, names, _counts = run.room_profile
        assert [k.count for k in kernels] == [profile_calls] and names == ["k"]
    else:
        assert run.room_profile is None


@pytest.mark.parametrize("hang_on, phase", [("time", "timing"), ("profile", "profiling")])
def test_a_timeout_while_timing_or_profiling_names_that_phase(room_for, hang_on, phase):
    def room_answer(kind, payload):
        if kind == hang_on:
            time.sleep(3)
            return None
        return timing_room(kind, payload)

    run = evaluation(timeout=1.0)
    doubling_records(run)
    room = room_for(room_answer)
    room.handle.budget = Budget(1.0)
    with pytest.raises(CandidateFailed) as failed:
        run.run_clean_room(room.start, time_reps=2, profile_calls=2)
    assert failed.value.status == Status.TIMEOUT and failed.value.message.endswith(f"budget ({phase})")


def test_a_candidate_side_review_lands_as_violations_and_notices():
    run = evaluation()
    review = OutputReview(compare_outputs(torch.ones(2), torch.ones(2), run.options.tolerance_for),
                          [Violation(ViolationCode.TRIVIAL_OUTPUT, "zeros")],
                          [Notice(NoticeCode.PRECISION_UNCHECKED, "no float64")])
    run.apply_review(review)
    run.apply_review(review)
    assert run.violations == {ViolationCode.TRIVIAL_OUTPUT: Violation(ViolationCode.TRIVIAL_OUTPUT, "zeros")}
    assert run.notices == [Notice(NoticeCode.PRECISION_UNCHECKED, "no float64")]


def test_the_timed_trial_is_always_a_replayed_task_trial_and_any_replayed_one_without_them():
    run = evaluation()
    doubling_records(run)
    assert {run._measured_trial([1, 2, 3, 4]).index for _ in range(60)} == {1}
    assert {run._measured_trial([2, 3]).index for _ in range(60)} == {2, 3}


def test_a_replay_with_the_candidates_bytes_is_reviewed_by_the_candidates_review():
    """The review the parent made of the candidate's outputs is reused for a replay that gave the
    same bytes, and only then: one bit of difference and the replay is reviewed on its own."""
    record = vector_trial()
    run = evaluation()
    candidate = record.expected.clone()
    record.candidate_outputs = candidate
    record.candidate_review = run.review_outputs(
        run_trial(record), candidate, record.previous_mean)
    reviewed: list[Any] = []
    original = run.review_outputs
    run.review_outputs = lambda *args: reviewed.append(args) or original(*args)  # type: ignore[method-assign]
    assert run._judge_replay(record, replayed(candidate.clone())) is True
    assert reviewed == [] and run.violations == {}
    # One element one ulp away: not the candidate's bytes, so the replay's own review decides.
    nudged = candidate.clone()
    nudged[7] = torch.nextafter(nudged[7], torch.tensor(float("inf")))
    assert run._judge_replay(record, replayed(nudged)) is True
    assert len(reviewed) == 1


def test_a_reused_review_is_only_as_good_as_the_bytes_it_was_made_of():
    # A candidate whose own outputs passed, replayed to a trivial output: the replay is reviewed
    # (the bytes differ) and refused, whatever the candidate's review said.
    record = mean_trial()
    run = evaluation(precision_policy="off")
    record.candidate_outputs = record.expected.clone()
    record.candidate_review = run.review_outputs(run_trial(record), record.candidate_outputs, record.previous_mean)
    assert record.candidate_review.violations == []
    assert run._judge_replay(record, replayed(torch.tensor(0.5))) is False
    assert ViolationCode.TRIVIAL_OUTPUT in run.violations
    # And a trivial candidate output replayed bit for bit is refused through the reused review.
    trivial_record = mean_trial()
    again = evaluation(precision_policy="off")
    trivial_record.candidate_outputs = torch.tensor(0.5)
    trivial_record.candidate_review = again.review_outputs(run_trial(trivial_record), torch.tensor(0.5),
                                                           trivial_record.previous_mean)
    assert again._judge_replay(trivial_record, replayed(torch.tensor(0.5))) is False
    assert again.violations[ViolationCode.TRIVIAL_OUTPUT].message.startswith(
        "trial 1, measured on the clean room's re-execution of the launch log")


def run_trial(record: replays.TrialRecord) -> Any:
    from tritongym.evaluator.reference import ReferenceTrial

    return ReferenceTrial(family=record.family, inputs=record.inputs, expected=record.expected, compute_ops=[],
                          finite=True, truth=record.truth)


def test_identical_outputs_means_the_same_bytes_in_the_same_structure():
    from tritongym.evaluator.compare import identical_outputs

    x = torch.randn(6, 4)
    nan_a = torch.tensor([float("nan"), 1.0])
    nan_b = nan_a.view(torch.int32).clone()
    nan_b[0] += 1  # another NaN payload
    assert identical_outputs(x, x.clone()) and identical_outputs((x, [x]), (x.clone(), [x.clone()]))
    assert identical_outputs(nan_a, nan_a.clone()) and identical_outputs(None, None)
    assert identical_outputs(x.t(), x.t().contiguous())  # the values in order, whatever the strides
    assert not identical_outputs(nan_a, nan_b.view(torch.float32))
    assert not identical_outputs(torch.tensor([0.0]), torch.tensor([-0.0]))  # equal values, other bits
    assert not identical_outputs(x, x.double())
    assert not identical_outputs(x, x.reshape(4, 6))
    assert not identical_outputs((x,), [x])
    assert not identical_outputs((x, x), (x,))
    assert not identical_outputs(x, None) and not identical_outputs(None, x)
    assert not identical_outputs(1.0, 1.0)  # not a tensor: reviewed on its own
    assert not identical_outputs(torch.nn.Parameter(x), x)


@pytest.mark.parametrize(("text", "named"), [
    ("RuntimeError: [enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
     "you tried to allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)", True),
    ("MemoryError", True),
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8.00 GiB for an array", True),
    ("ValueError: shapes do not match", False),
    # The device's memory, which memory_limit_gb does not cap (the name holds "MemoryError").
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", False),
])
def test_a_failed_allocation_names_the_memory_limit_and_other_errors_do_not(text, named):
    """Under `RLIMIT_AS` the allocator's words never say that a cap exists: the error says which and
    what to do. The status stays the candidate's runtime error; other errors are left as they were."""
    from tritongym.evaluator.common.channel import Message

    failure = evaluation(memory_limit_gb=2.5)._fail_from_reply(
        Message("error", {"kind": "runtime_error", "message": text}), "trial 1")
    assert failure.status == Status.RUNTIME_ERROR and failure.message.startswith(f"trial 1: {text}")
    assert ("memory limit of 2.5 GiB (memory_limit_gb)" in failure.message) is named
