"""The clean room's choice and measure, `evaluator/replays.py`, by value.

`log_error` (why a trial's log cannot be replayed: its text becomes the violation), `choose_replays`
(which trials the clean room re-executes: one trial of every input family, the floor of two,
every autotune config, the perturbed families preferred, nothing more than that) and
`host_information` (how many bits of a log differ between trials: what decides whether a log that
fails its counterfactual replay may still pass) and the answer's budget.

The logs here are hand-written in the launch log's own format (`worker/launchlog.py`); the
jailed replay itself runs in tests/adversarial/test_cleanroom.py and every end-to-end evaluation.
`test_cleanroom.py` holds the first, coarser tests of the same functions.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from tritongym.evaluator import replays

# -- log_error ------------------------------------------------------------------------------


def test_log_error_passes_the_workers_reason_on_cut_to_500_characters():
    # The worker's reason ends up in the violation's text: cut, never dropped, never replaced.
    assert replays.log_error({"error": "x" * 600, "events": [], "buffers": []}) == "x" * 500
    assert replays.log_error({"error": 7}) == "7"
    # An empty reason is still a reason: the log is not replayable, whatever its events.
    assert replays.log_error({"error": "", "events": [], "buffers": []}) == ""


@pytest.mark.parametrize("log", [
    {"events": [], "buffers": None},
    {"events": None, "buffers": []},
    {"events": []},
    {"buffers": []},
    {"events": (), "buffers": []},
])
def test_a_log_without_both_lists_is_malformed(log):
    # Each of the two lists is needed by the replay: either one missing is enough to refuse.
    assert replays.log_error(log) == "the launch log is malformed"


@pytest.mark.parametrize("log", [[], "log", 3])
def test_anything_but_a_dict_is_no_log(log):
    assert replays.log_error(log) == "the candidate worker sent no launch log"


# -- choose_replays -------------------------------------------------------------------------


def _record(index: int, family: str = "get_inputs", configs=()) -> replays.TrialRecord:
    return replays.TrialRecord(index=index, family=family, inputs=[], expected=[], compute_work=(0, 0),
                               log={"events": [], "buffers": []}, configs=list(configs))


def _choices(records, seeds=range(60), **kwargs) -> set[tuple[int, ...]]:
    # A seeded `random.Random` is the same kind of object as the default `secrets.SystemRandom`, so
    # every outcome a run can draw is reached here, deterministically.
    return {tuple(replays.choose_replays(records, random.Random(seed), **kwargs)) for seed in seeds}


def test_no_trials_no_replays():
    assert replays.choose_replays([]) == []


def test_the_floor_is_two_distinct_trials_of_one_family():
    records = [_record(i) for i in range(5)]
    outcomes = _choices(records)
    # Exactly two (the cost of a replay is a whole forward), distinct, sorted, and not always the same.
    assert all(len(c) == 2 and c[0] < c[1] for c in outcomes)
    assert len(outcomes) > 3
    # The default random source and the default floor give the same count.
    assert len(replays.choose_replays(records)) == 2
    only_perturbed = [_record(i, "scaled") for i in range(4)]
    assert all(len(c) == 2 for c in _choices(only_perturbed))


def test_a_larger_floor_is_met_with_distinct_trials_and_caps_at_all_of_them():
    records = [_record(i) for i in range(5)]
    assert all(len(c) == 3 and len(set(c)) == 3 for c in _choices(records, minimum=3))
    assert _choices(records[:3], minimum=5) == {(0, 1, 2)}
    assert replays.choose_replays(records[:1]) == [0]


def test_one_trial_of_every_family_and_nothing_else():
    records = [_record(0), _record(1), _record(2, "negated"), _record(3, "scaled")]
    outcomes = _choices(records)
    # Both perturbed families every time (a kernel wrong on one family alone must not escape when
    # the other is drawn), one task trial of the two, and which one is not predictable.
    assert outcomes == {(0, 2, 3), (1, 2, 3)}


def test_a_family_the_candidate_cheats_in_is_replayed_whatever_the_draw():
    # The default trials: 5 task trials and one trial per perturbed family. A candidate honest
    # everywhere but in one family's trial is replayed there in every evaluation.
    families = ["get_inputs"] * 5 + ["negated", "scaled", "offset"]
    records = [_record(i, family) for i, family in enumerate(families)]
    outcomes = _choices(records, seeds=range(200))
    assert all(len(c) == 4 and {5, 6, 7} <= set(c) for c in outcomes)
    assert {c[0] for c in outcomes} == {0, 1, 2, 3, 4}
    assert len(replays.choose_replays(records)) == 4  # the default random source, the same rule


def test_an_uncovered_config_is_replayed_on_a_perturbed_trial_when_one_ran_it():
    # Each config ran on a task trial and on a perturbed one; the first two picks come from
    # {0, 2} and {1, 3}. A config neither pick covers is added on its perturbed holder.
    records = [_record(0, configs=[("k", 0)]), _record(1, "scaled", configs=[("k", 0)]),
               _record(2, configs=[("k", 1)]), _record(3, "scaled", configs=[("k", 1)])]
    outcomes = _choices(records)
    assert outcomes <= {(0, 1, 3), (0, 3), (1, 2), (1, 2, 3)}
    assert (0, 1, 3) in outcomes and (1, 2, 3) in outcomes  # reached: the rule is exercised, not just allowed


def test_a_config_only_a_task_trial_ran_is_replayed_on_it():
    records = [_record(0), _record(1, configs=[("k", 1)]), _record(2, "scaled")]
    # Whatever the draw, the config's only holder is replayed.
    assert _choices(records) == {(0, 1, 2), (1, 2)}


def test_a_config_already_covered_by_an_added_trial_adds_no_other_and_the_rest_are_still_covered():
    # Trial 2 ran configs a and b, trial 3 b only, trial 4 c only. When the family picks are
    # trials 1 and 4, covering a adds trial 2, which covers b too: trial 3 is not replayed on top.
    a, b, c = ("k", 0), ("k", 1), ("k", 2)
    records = [_record(0), _record(1, "scaled"), _record(2, "scaled", configs=[a, b]),
               _record(3, "negated", configs=[b]), _record(4, "negated", configs=[c])]
    outcomes = _choices(records)
    assert outcomes == {(0, 1, 2, 4), (0, 2, 4), (0, 2, 3, 4), (0, 1, 2, 3, 4)}


def test_configs_covered_by_earlier_added_trials_stay_covered():
    # Covering a adds trial 2, which ran c too; covering b then adds trial 3. c is still covered
    # (by trial 2): trial 4, its other holder, is not replayed on top.
    a, b, c = ("k", 0), ("k", 1), ("k", 2)
    records = [_record(0), _record(1, "scaled"), _record(2, "scaled", configs=[a, c]),
               _record(3, "scaled", configs=[b]), _record(4, "scaled", configs=[c])]
    assert _choices(records) == {(0, 1, 2, 3), (0, 2, 3), (0, 2, 3, 4)}


def test_every_config_of_many_kernels_is_replayed():
    configs = [[("a", i % 2), ("b", i % 3)] for i in range(6)]
    records = [_record(i, "get_inputs" if i < 3 else "scaled", configs=configs[i]) for i in range(6)]
    wanted = {c for r in records for c in r.configs}
    for chosen in _choices(records):
        assert {c for i in chosen for c in records[i].configs} == wanted
        assert list(chosen) == sorted(set(chosen))



@given(st.lists(st.tuples(st.sampled_from(["get_inputs", "negated", "scaled", "offset"]),
                          st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 3)), max_size=3)),
                min_size=1, max_size=12),
       st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_every_family_and_every_config_is_replayed_at_the_floor_at_least(trials, seed, minimum):
    records = [_record(i, family, configs) for i, (family, configs) in enumerate(trials)]
    chosen = replays.choose_replays(records, random.Random(seed), minimum=minimum)
    assert chosen == sorted(set(chosen)) and set(chosen) <= set(range(len(records)))
    assert {records[i].family for i in chosen} == {r.family for r in records}
    assert {c for i in chosen for c in records[i].configs} == {c for r in records for c in r.configs}
    assert len(chosen) >= min(minimum, len(records))

# -- host_information -----------------------------------------------------------------------


def _ref(buffer: int = 0, offset: int = 0, shape=(4,), stride=(1,), dtype="float32") -> dict:
    return {"T": buffer, "o": offset, "s": list(shape), "st": list(stride), "d": dtype}


def _launch(*args, grid=(4,), kwargs=None, key="k:1") -> dict:
    return {"launch": key, "grid": list(grid), "args": [_ref(), *args], "kwargs": kwargs or {"BLOCK": 1024}}


def _op(name: str, *args, kwargs=None, out=None) -> dict:
    return {"op": name, "args": list(args), "kwargs": kwargs or {}, "out": out if out is not None else _ref(1)}


INPUTS = [{"kind": "input", "index": 0, "nbytes": 16}, {"kind": "input", "index": 1, "nbytes": 16},
          {"kind": "new", "nbytes": 16}, {"kind": "new", "nbytes": 16}]


def _log(*events, outputs=None, blobs=(), buffers=None, kernels=None) -> dict:
    return {"events": list(events), "buffers": list(INPUTS if buffers is None else buffers), "blobs": list(blobs),
            "outputs": outputs if outputs is not None else _ref(), "kernels": kernels or {}}


def _bits(logs, position=0, **kwargs) -> int:
    return replays.host_information(logs, position, **kwargs).bits


def test_a_lone_log_has_no_peer_and_carries_nothing_measurable():
    # Nothing to compare with: the counterfactual replay alone decides (peers == 0 says so).
    report = replays.host_information([_log(_launch(5))], 0)
    assert (report.bits, report.peers, report.examples) == (0, 0, [])
    assert replays.host_information([_log(_launch(5)), _log(_launch(6))], 0, same_configs=[0]).peers == 0


def test_only_the_peers_named_are_compared():
    logs = [_log(_launch(5)), _log(_launch(6)), _log(_launch(5))]
    assert _bits(logs, 0, same_configs=[0, 2]) == 0
    assert _bits(logs, 0, same_configs=[0, 1]) == 4  # 5 is three bits and a sign
    assert _bits(logs, 1) == 4


@pytest.mark.parametrize("value, bits", [
    (True, 1), (None, 1), (0, 1), (1, 2), (5, 4), (-5, 4), (2**40, 42), (2**63 - 1, 64),
    (0.5, 64), ("", 8), ("floor", 40),
])
def test_each_leaf_is_counted_at_the_width_the_log_gives_it(value, bits):
    assert replays.value_bits(value) == bits


def test_two_float32_answers_packed_in_one_int64_count_64_bits():
    import struct

    packed = [struct.unpack("<q", struct.pack("<ff", a, b))[0] for a, b in ((1.5, -2.25), (3.75, 0.125))]
    assert _bits([_log(_launch(packed[0])), _log(_launch(packed[1]))], 0) >= 62


@pytest.mark.parametrize("mine, other, bits", [
    (_ref(offset=4), _ref(offset=0), 4),                     # a view's offset
    (_ref(shape=(8,)), _ref(shape=(4,)), 5),                 # an extent
    (_ref(stride=(2,)), _ref(stride=(1,)), 3),               # a stride: a field the old measure never read
    (_ref(dtype="float16"), _ref(dtype="float32"), 56),      # a dtype, as its name
    (_ref(buffer=1), _ref(buffer=0), replays.REFERENCE_BITS),  # which buffer: another input
    ({"str": "floor"}, {"str": "trunc"}, 40),
])
def test_every_field_of_a_reference_or_value_is_compared(mine, other, bits):
    assert _bits([_log(_launch(mine)), _log(_launch(other))], 0) == bits


def test_buffers_are_compared_by_what_they_are_not_by_their_number():
    # The same inputs under other buffer numbers are the same buffers: nothing varies.
    swapped = [INPUTS[1], INPUTS[0], *INPUTS[2:]]
    first = {"launch": "k:1", "grid": [4], "args": [_ref(0), _ref(1)], "kwargs": {}}
    second = {"launch": "k:1", "grid": [4], "args": [_ref(1), _ref(0)], "kwargs": {}}
    assert _bits([_log(first, outputs=_ref(0)), _log(second, outputs=_ref(1), buffers=swapped)], 0) == 0
    assert _bits([_log(first, outputs=_ref(0)), _log(second, outputs=_ref(1))], 0) == 3 * replays.REFERENCE_BITS


def test_one_extra_event_at_a_first_call_does_not_shift_every_later_comparison():
    # A workspace allocated at the first call: one event more in trial 0; the rest aligns by what
    # each event is, so only the extra event is charged, never the 70 scalars after it.
    rest = [_launch(*range(70), key="k:1"), _op("aten::add.Tensor", _ref(), out=_ref(3))]
    first = _log(_op("aten::empty.memory_format", {"L": [4], "tuple": False}, out=_ref(2)), *rest)
    later = _log(*rest)
    charged = _bits([first, later, later], 0)
    assert replays.EVENT_BITS < charged < 150  # the allocation's identity and fields, not 70 scalars
    assert _bits([later, first, later], 0) == 0


def test_kernel_table_constants_are_compared():
    table = {"k:1": {"name": "k", "line": 1, "globals": {"ANSWER": {"number": 2.5}}}}
    other = {"k:1": {"name": "k", "line": 1, "globals": {"ANSWER": {"number": 3.5}}}}
    assert _bits([_log(_launch(), kernels=table), _log(_launch(), kernels=table)], 0) == 0
    assert _bits([_log(_launch(), kernels=table), _log(_launch(), kernels=other)], 0) == 64


def _bytes(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)


def test_shipped_bytes_that_differ_count_eight_bits_a_byte_once():
    external = [*INPUTS, {"kind": "external", "blob": 0, "nbytes": 10}]
    a = _log(_launch(_ref(buffer=4)), outputs=_ref(buffer=4), buffers=external, blobs=[_bytes(*range(10))])
    b = _log(_launch(_ref(buffer=4)), outputs=_ref(buffer=4), buffers=external, blobs=[_bytes(*range(1, 11))])
    # 80 bits of content, charged once, plus a buffer reference's identity per place it is named
    assert _bits([a, b], 0) == 80 + 2 * replays.REFERENCE_BITS
    same = _log(_launch(_ref(buffer=4)), outputs=_ref(buffer=4), buffers=external, blobs=[_bytes(*range(10))])
    assert _bits([a, same], 0) == 0


def test_launch_metadata_is_compared_only_between_trials_of_one_config():
    a, b = _log(_launch(5, grid=(4,))), _log(_launch(5, grid=(8,)))
    assert _bits([a, b], 0) == 0
    assert _bits([a, b], 0, same_configs=[0, 1]) == 4
    c = _log(_launch(5, kwargs={"BLOCK": 256}))
    assert _bits([a, c], 0) == 0 and _bits([a, c], 0, same_configs=[0, 1]) == 12


def test_an_event_the_peers_do_not_have_is_charged_whole():
    extra = _log(_launch(5), _launch(7, key="j:9"))
    assert _bits([extra, _log(_launch(5))], 0) > 0
    assert replays.host_information([extra, _log(_launch(5))], 0).examples[0].startswith("an event (j:9)")


@given(st.lists(st.integers(-2**62, 2**62), min_size=1, max_size=6))
def test_a_log_compared_with_itself_carries_nothing(values):
    log = _log(_launch(*values))
    assert _bits([log, log, log], 1) == 0


@pytest.mark.parametrize("expected, bits", [
    (torch.zeros(()), 8), ([torch.zeros(4), torch.zeros(2, 3)], 80), (torch.zeros(5, dtype=torch.bool), 5),
])
def test_an_answers_information_and_its_budget(expected, bits):
    assert replays.answer_bits(expected) == bits
    assert replays.value_budget_bits(expected) == bits // replays.ANSWER_SHARE_DIVISOR


def test_the_budget_is_capped():
    assert replays.value_budget_bits(torch.zeros(10**6)) == replays.HOST_BITS_CAP


def test_the_receiver_caps_a_logs_events():
    log = {"events": [{}] * (replays.MAX_LOG_EVENTS + 1), "buffers": []}
    expected = f"more than {replays.MAX_LOG_EVENTS} kernel launches and PyTorch ops in one forward"
    assert replays.log_error(log) == expected
    assert replays.log_error({"events": [{}] * replays.MAX_LOG_EVENTS, "buffers": []}) is None


