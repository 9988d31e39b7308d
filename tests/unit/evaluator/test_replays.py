"""The clean room's choice and measure, `evaluator/replays.py`, by value.

`log_error` (why a trial's log cannot be replayed: its text becomes the violation), `choose_replays`
(which trials the clean room re-executes: one trial of every input family, the floor of two,
every autotune config, the perturbed families preferred, nothing more than that) and
`host_origin` (how many values a log carries from the host that differ between trials: what is
charged against the host-data budget, and which external buffers the poisoned replay checks).

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

# -- host_origin ----------------------------------------------------------------------------


def _ref(buffer: int = 0, offset: int = 0, shape=(4,), stride=(1,), dtype="float32") -> dict:
    return {"T": buffer, "o": offset, "s": list(shape), "st": list(stride), "d": dtype}


def _launch(*args, grid=(4,), kwargs=None) -> dict:
    return {"launch": "k:1", "grid": list(grid), "args": [_ref(), *args], "kwargs": kwargs or {"BLOCK": 1024}}


def _op(name: str, *args, kwargs=None, out=None) -> dict:
    return {"op": name, "args": list(args), "kwargs": kwargs or {}, "out": out if out is not None else _ref(1)}


def _log(*events, outputs=None, blobs=()) -> dict:
    return {"events": list(events), "buffers": [], "blobs": list(blobs),
            "outputs": outputs if outputs is not None else _ref()}


def _elements(logs, position=0, **kwargs) -> int:
    return replays.host_origin(logs, position, **kwargs).elements


def test_a_lone_log_carries_nothing_comparable():
    # Nothing to compare with: no value can be shown to depend on the trial.
    report = replays.host_origin([_log(_launch(5))], 0)
    assert (report.elements, report.examples, report.external, report.external_elements) == (0, [], [], 0)
    lonely = [_log(_launch(5)), _log(_launch(6))]
    assert _elements(lonely, 0, same_configs=[0]) == 0


def test_only_the_peers_named_are_compared():
    logs = [_log(_launch(5)), _log(_launch(6)), _log(_launch(5))]
    assert _elements(logs, 0, same_configs=[0, 2]) == 0
    assert _elements(logs, 0, same_configs=[0, 1]) == 1
    assert _elements(logs, 1) == 1  # every other trial when no peers are named


@pytest.mark.parametrize("mine, other, count", [
    (_ref(offset=4), _ref(offset=0), 1),            # a view's offset is host data
    (_ref(shape=(8,)), _ref(shape=(4,)), 1),         # so is a shape
    (_ref(shape=(2, 8)), _ref(shape=(2, 4)), 1),     # one element per differing extent
    (_ref(buffer=3), _ref(buffer=0), 0),             # which buffer: not a value the host computed
    (_ref(stride=(2,)), _ref(stride=(1,)), 0),
    (_ref(dtype="float16"), _ref(dtype="float32"), 0),
    ({"str": "floor"}, {"str": "trunc"}, 1),
    ({"L": [1, 2, 3], "tuple": True}, {"L": [1, 9, 3], "tuple": True}, 1),
])
def test_each_differing_argument_value_counts_one_element(mine, other, count):
    assert _elements([_log(_launch(mine)), _log(_launch(other))], 0) == count


def test_a_tensor_reference_without_a_shape_is_still_measured():
    bare_a, bare_b = {"T": 0, "o": 0}, {"T": 0, "o": 3}
    assert _elements([_log(_launch(bare_a)), _log(_launch(bare_a))], 0) == 0
    assert _elements([_log(_launch(bare_a)), _log(_launch(bare_b))], 0) == 1


def test_keyword_order_is_not_a_difference():
    # The same keywords in another order are the same values.
    a = _log(_op("aten::sum.dim_IntList", _ref(), kwargs={"dim": {"L": [0], "tuple": False}, "keepdim": True}))
    b = _log(_op("aten::sum.dim_IntList", _ref(), kwargs={"keepdim": True, "dim": {"L": [0], "tuple": False}}))
    assert _elements([a, b], 0) == 0


def test_op_names_outputs_and_results_are_compared():
    # A different op at the same place is a difference (an answer chosen on the host)...
    assert _elements([_log(_op("aten::add.Tensor", _ref())), _log(_op("aten::mul.Tensor", _ref()))], 0) == 1
    # ...and so is a different kernel launched.
    other_kernel = {**_launch(5), "launch": "j:9"}
    assert _elements([_log(_launch(5)), _log(other_kernel)], 0) == 1
    # An op's result view and the forward's outputs are host data too.
    assert _elements([_log(_op("aten::add.Tensor", out=_ref(1, offset=0))),
                      _log(_op("aten::add.Tensor", out=_ref(1, offset=8)))], 0) == 1
    assert _elements([_log(_launch(5), outputs=_ref(offset=0)), _log(_launch(5), outputs=_ref(offset=4))], 0) == 1


def test_an_ops_keywords_count_even_when_launch_metadata_is_left_out():
    # Two logs and no named peers: launches are compared by their positional arguments only
    # (autotune changes grids and block sizes), but an op's keywords are the candidate's own choice.
    a = _log(_op("aten::div.Tensor_mode", _ref(), _ref(), kwargs={"rounding_mode": {"str": "floor"}}))
    b = _log(_op("aten::div.Tensor_mode", _ref(), _ref(), kwargs={"rounding_mode": {"str": "trunc"}}))
    assert _elements([a, b], 0) == 1
    # A launch's grid and keywords are compared once the peers ran the same configs, or with one log.
    a, b = _log(_launch(5, grid=(4,))), _log(_launch(5, grid=(8,)))
    assert _elements([a, b], 0) == 0
    assert _elements([a, b], 0, same_configs=[0, 1]) == 1
    c = _log(_launch(5, kwargs={"BLOCK": 256}))
    assert _elements([a, c], 0) == 0 and _elements([a, c], 0, same_configs=[0, 1]) == 1


def test_events_that_are_not_dicts_are_skipped():
    assert _elements([_log("junk", _launch(5)), _log("junk", _launch(5))], 0) == 0
    assert _elements([_log(None, _launch(5)), _log(_launch(6))], 0) == 1


def test_a_log_with_no_events_is_compared_on_its_outputs():
    a = {"events": None, "buffers": [], "outputs": {"L": [1, 2], "tuple": True}}
    b = {"buffers": [], "outputs": {"L": [1, 3], "tuple": True}}
    assert _elements([a, b], 0) == 1


def test_a_longer_or_a_shorter_log_counts_the_values_it_does_not_share():
    # One output tensor more is three values more ("o", offset, extent) and shifts the tuple flag:
    # four slots that are not the same, counted alike from either side.
    one = _log(_launch(5), outputs={"L": [_ref()], "tuple": True})
    two = _log(_launch(5), outputs={"L": [_ref(), _ref()], "tuple": True})
    assert _elements([two, one], 0) == 4
    assert _elements([one, two], 0) == 4
    # The shorter log is charged against its shortest peer.
    three = _log(_launch(5), outputs={"L": [_ref(), _ref(), _ref()], "tuple": True})
    assert _elements([one, two, three], 0) == 4


def test_examples_name_up_to_three_values_cut_to_40_characters():
    long_a, long_b = {"str": "a" * 60}, {"str": "b" * 60}
    report = replays.host_origin([_log(_launch(1, 2, 3, long_a)), _log(_launch(7, 8, 9, long_b))], 0)
    assert report.elements == 4
    assert report.examples == [f"a logged value ({v}) that differs between trials" for v in (1, 2, 3)]
    only = replays.host_origin([_log(_launch(long_a)), _log(_launch(long_b))], 0)
    assert only.examples == [f"a logged value ({'a' * 40}) that differs between trials"]


def _bytes(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.uint8)


def test_external_buffers_are_charged_in_four_byte_elements_at_least_one():
    # Blobs are the raw bytes of a buffer (`launchlog.storage_bytes`).
    ten_a, ten_b = _bytes(*range(10)), _bytes(*range(1, 11))
    report = replays.host_origin([_log(_launch(5), blobs=[ten_a]), _log(_launch(5), blobs=[ten_b])], 0)
    assert (report.elements, report.external, report.external_elements) == (2, [0], 2)
    assert report.examples == ["a tensor of unknown origin (2 elements) made on the host, different in each trial"]
    two_a, two_b = _bytes(1, 2), _bytes(3, 4)
    assert _elements([_log(blobs=[two_a]), _log(blobs=[two_b])], 0) == 1


def test_an_empty_buffer_differs_from_any_non_empty_one():
    empty = torch.empty(0, dtype=torch.uint8)
    word = torch.tensor(list(b"XXXX"), dtype=torch.uint8)
    assert _elements([_log(blobs=[empty]), _log(blobs=[empty.clone()])], 0) == 0
    assert _elements([_log(blobs=[empty]), _log(blobs=[word])], 0) == 1


def test_only_the_differing_buffers_are_external_and_extra_ones_count():
    table = _bytes(*range(8))
    a = _log(_launch(5), blobs=[table, _bytes(*[0] * 8), _bytes(*[1] * 12)])
    b = _log(_launch(6), blobs=[table.clone(), _bytes(*[9] * 8)])
    report = replays.host_origin([a, b], 0)
    # The constant table is not external; the second buffer differs and the third has no counterpart.
    assert report.external == [1, 2]
    assert report.external_elements == 2 + 3
    assert report.elements == 1 + 2 + 3  # the differing scalar, then the buffers
    assert len(report.examples) == 3
    assert report.examples[0].startswith("a logged value (5)")
    assert report.examples[2] == ("a tensor of unknown origin (3 elements) made on the host, different in each "
                                  "trial")
    # The log with fewer buffers is charged only for the one it has that differs.
    back = replays.host_origin([a, b], 1)
    assert (back.external, back.external_elements) == ([1], 2)


def test_blobs_that_are_not_tensors_compare_equal_to_each_other():
    # The channel only ships tensors; anything else is one opaque element, the same in every trial.
    assert _elements([_log(blobs=["x"]), _log(blobs=[b"y"])], 0) == 0
    report = replays.host_origin([_log(blobs=["x"]), _log(blobs=[_bytes(1, 2, 3, 4)])], 0)
    assert (report.elements, report.external) == (1, [0])


def test_examples_stop_at_three_across_values_and_buffers():
    a = _log(_launch(1, 2, 3, 4), blobs=[_bytes(1, 2, 3, 4)])
    b = _log(_launch(5, 6, 7, 8), blobs=[_bytes(4, 3, 2, 1)])
    report = replays.host_origin([a, b], 0)
    assert report.elements == 5 and report.external == [0]
    assert len(report.examples) == 3 and all("logged value" in e for e in report.examples)
