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


@pytest.mark.parametrize("field, value", [("work", [-1, 0]), ("work", ["1", 0]), ("moved", [-1, 0]),
                                          ("moved", [0, 1.0]), ("compute_ops", "aten::mul"), ("work", None)])
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

    def wait_exit(self, grace: float) -> str:
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


def _scalars_log(index: int, count: int) -> dict[str, Any]:
    return {"events": [{"launch": "k:1", "grid": [1], "args": [float(index * 1000 + i) for i in range(count)],
                        "kwargs": {}}], "buffers": []}


@pytest.mark.parametrize("count, charged", [(64, False), (65, True)])
def test_host_data_over_the_budget_decides_before_any_room_starts(room_for, count, charged):
    run = evaluation()
    doubling_records(run, logs=[_scalars_log(i, count) for i in range(5)])
    room = room_for(honest_room)
    run.run_clean_room(room.start)
    assert (ViolationCode.HOST_COMPUTE in run.violations) is charged
    assert room.started == (0 if charged else 1)


def _launch_log(args: list[Any], kwargs: dict[str, Any], grid: int = 4) -> dict[str, Any]:
    return {"events": [{"launch": "k:1", "grid": [grid], "args": args, "kwargs": kwargs}], "buffers": []}


def _configs(run: _Evaluation, per_trial: list[list[tuple[str, int]]]) -> None:
    for record, configs in zip(run.records, per_trial, strict=True):
        record.configs = configs


def test_trials_that_ran_the_same_autotune_configs_are_compared_whole():
    # Block sizes and grids follow the config: 70 keyword values that differ between configs are
    # not host data, as long as each trial is compared with the trials that ran its own config.
    run = evaluation()
    per_config = {0: {f"C{i}": 16 for i in range(70)}, 1: {f"C{i}": 32 for i in range(70)}}
    combos = [0, 1, 0, 1, 0]
    doubling_records(run, logs=[_launch_log([1.0], per_config[c], grid=8 * (c + 1)) for c in combos])
    _configs(run, [[("k", c)] for c in combos])
    room = ScriptedRoom(honest_room)
    try:
        run.run_clean_room(room.start)
    finally:
        room.close()
    assert run.violations == {}


def test_host_data_in_launch_metadata_is_charged_between_peers_of_one_config():
    # The same config in every trial, and 70 keyword values that differ per trial: host data.
    run = evaluation()
    doubling_records(run, logs=[_launch_log([1.0], {f"C{i}": float(t * 100 + i) for i in range(70)})
                                for t in range(5)])
    _configs(run, [[("k", 0)]] * 5)
    run.run_clean_room(lambda: pytest.fail("no room may start"))
    assert ViolationCode.HOST_COMPUTE in run.violations


def test_two_trials_of_one_config_are_peers():
    # Trials 1 and 3 ran config 1 and carry 70 keyword values that differ between them: host data,
    # seen only when the two are compared whole with each other.
    run = evaluation()
    logs = [_launch_log([1.0], {}) for _ in range(5)]
    logs[1] = _launch_log([1.0], {f"C{i}": float(i) for i in range(70)})
    logs[3] = _launch_log([1.0], {f"C{i}": float(i + 500) for i in range(70)})
    doubling_records(run, logs=logs)
    _configs(run, [[("k", 0)], [("k", 1)], [("k", 0)], [("k", 1)], [("k", 0)]])
    run.run_clean_room(lambda: pytest.fail("no room may start"))
    message = run.violations[ViolationCode.HOST_COMPUTE].message
    assert message.startswith("trial 1: the forward's launches and ops carry 70 values computed on the host")
    assert "differs between trials; a logged value (1.0) that differs" in message  # examples joined by "; "


def test_a_trial_alone_with_its_config_is_still_compared_by_its_positional_arguments():
    run = evaluation()
    logs = [_launch_log([1.0] * 70, {}) for _ in range(4)] + [_launch_log([float(i) for i in range(70)], {})]
    doubling_records(run, logs=logs)
    _configs(run, [[("k", 0)]] * 4 + [[("k", 1)]])
    run.run_clean_room(lambda: pytest.fail("no room may start"))
    assert "trial 4" in run.violations[ViolationCode.HOST_COMPUTE].message


@pytest.mark.parametrize("scalars, blob_elements, poisoned", [
    (0, 64, False),   # 64 elements in all: within the budget, nothing to decide
    (64, 1, True),    # 65, of which only 1 external: the scalars alone are within it, the bytes decide
    (0, 65, True),    # 65, all external
])
def test_external_bytes_are_replayed_poisoned_exactly_when_they_alone_put_a_trial_over_the_budget(
        room_for, scalars, blob_elements, poisoned):
    # A log's external buffers are its bytes; they count in 4-byte elements.
    logs = [{**_launch_log([float(t * 1000 + i) for i in range(scalars)], {}),
             "blobs": [torch.full((4 * blob_elements,), t, dtype=torch.uint8)]} for t in range(5)]
    run = evaluation()
    doubling_records(run, logs=logs)
    room = room_for(honest_room)
    run.run_clean_room(room.start)
    assert run.violations == {}
    assert all(record.poison == ([0] if poisoned else []) for record in run.records)
    assert any(p.get("poison") for k, p in room.requests if k == "replay") is poisoned


def _blob_log(index: int) -> dict[str, Any]:
    return {"events": [], "buffers": [], "blobs": [torch.full((400,), float(index))]}


@pytest.mark.parametrize("poisoned_changes, charged", [(False, False), (True, True)])
def test_external_bytes_over_the_budget_are_charged_only_if_a_poisoned_replay_changes_the_outputs(
        room_for, poisoned_changes, charged):
    def room_answer(kind, payload):
        if kind == "state":
            return "state_set", {}
        factor = 5 if payload.get("poison") and poisoned_changes else 2
        return "replayed", replayed(payload["inputs"][0] * factor)

    run = evaluation()
    doubling_records(run, logs=[_blob_log(i) for i in range(5)])
    room = room_for(room_answer)
    run.run_clean_room(room.start)
    assert all(record.poison == [0] for record in run.records)  # 100 elements each, all external
    poisoned = [p for k, p in room.requests if k == "replay" and p.get("poison")]
    assert poisoned and all(p["poison"] == [0] for p in poisoned)
    for payload in poisoned:  # the poisoned replay is of a trial's own log, with that trial's inputs
        record = next(r for r in run.records if torch.equal(r.log["blobs"][0], payload["log"]["blobs"][0]))
        assert torch.equal(record.inputs[0], payload["inputs"][0])
    assert (ViolationCode.HOST_COMPUTE in run.violations) is charged
    if charged:  # the first trial decides: replayed, replayed poisoned, nothing more
        assert room.kinds() == ["state", "replay", "replay", "exit"]
        assert run.violations[ViolationCode.HOST_COMPUTE].message.endswith(
            "replayed with their bytes replaced, the outputs change. Compute from this call's inputs on the device, "
            "in the solution's kernels")
    else:  # every trial carries such bytes, so every trial is replayed, twice
        assert room.kinds().count("replay") == 10


def test_a_poisoned_replay_the_room_cannot_run_charges_the_bytes(room_for):
    def room_answer(kind, payload):
        if kind == "state":
            return "state_set", {}
        if payload.get("poison"):
            return "error", {"kind": "diverged", "message": "an op wrote elsewhere"}
        return "replayed", replayed(payload["inputs"][0] * 2)

    run = evaluation()
    doubling_records(run, logs=[_blob_log(i) for i in range(5)])
    room = room_for(room_answer)
    run.run_clean_room(room.start)
    assert list(run.violations) == [ViolationCode.HOST_COMPUTE]
    assert room.kinds() == ["state", "replay", "replay", "exit"]


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
