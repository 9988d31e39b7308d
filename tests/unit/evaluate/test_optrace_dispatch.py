"""`OpTrace.__torch_dispatch__` by value, one path at a time.

What a dispatched op does to the trace (counts, compute ops, the work measure, copies moved), to the
launch log (`launchlog.LaunchLog`, real), to the data flow (`DataFlow`, real) and to the fills of a
checked trial: annotation ops (run, seen, never logged or counted), custom ops with a Python body
(the body is traced, the op itself is not), ops of other namespaces without one (an op like any),
and ops asked for by something other than the solution file (logged and flowed, not counted).
The end-to-end side (a custom op in a whole evaluation) is in ``tests/e2e``.
"""

from __future__ import annotations

import torch
from torch.library import custom_op

from tritongym.evaluator.worker.launchlog import LaunchLog
from tritongym.evaluator.worker.optrace import Attribution, DataFlow, OpTrace

NAMESPACE = "tgdispatchtest"


@custom_op(f"{NAMESPACE}::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, *, scale: float = 3.0) -> torch.Tensor:
    return x * scale + y


# An op of another namespace with a C++-style kernel registration and no Python body that
# `custom_op_function` could find: the trace sees only the op.
_LIBRARY = torch.library.Library(NAMESPACE, "FRAGMENT")
_LIBRARY.define("twice(Tensor x) -> Tensor")
_LIBRARY.impl("twice", lambda x: x * 2, "CPU")


def _logged_ops(log: LaunchLog, outputs: object) -> list[str]:
    return [event["op"] for event in log.finish(outputs).to_payload()["events"]]


def _started_log(*inputs: torch.Tensor) -> LaunchLog:
    log = LaunchLog(__file__)
    log.start(list(inputs), [])
    return log


def test_annotation_ops_run_and_are_seen_but_neither_logged_nor_counted():
    x = torch.randn(5)
    log = _started_log(x)
    tracer = OpTrace(log=log)
    with torch.no_grad(), tracer:
        with torch.profiler.record_function("span"):  # profiler::_record_function_enter_new / _exit
            y = x + 1
    assert torch.equal(y, x + 1)
    assert tracer.seen == 3  # enter, add, exit: every op the mode saw
    assert dict(tracer.counts) == {"aten::add": 1}
    assert tracer.compute_ops() == ["aten::add"]
    payload = log.finish(y).to_payload()
    [event] = payload["events"]
    assert event["op"] == "aten::add.Tensor"
    # The op's result is the log's: a "new" buffer the forward's output names (not an external one).
    assert event["out"]["T"] == payload["outputs"]["T"]
    assert [b["kind"] for b in payload["buffers"]] == ["input", "new"]


def test_a_custom_ops_body_is_traced_and_the_op_itself_is_neither_logged_nor_counted():
    x, y = torch.randn(4), torch.randn(4)
    log = _started_log(x, y)
    tracer = OpTrace(log=log)
    with torch.no_grad(), tracer:
        out = scaled_add(x, y)
    assert torch.equal(out, x * 3.0 + y)
    assert tracer.seen == 3  # the custom op, then the two ops its body ran
    assert dict(tracer.counts) == {"aten::mul": 1, "aten::add": 1}
    assert tracer.compute_ops() == ["aten::mul", "aten::add"]
    assert tracer.compute_elements == 4 + 8  # mul reads x; add reads its result and y
    assert _logged_ops(log, out) == ["aten::mul.Tensor", "aten::add.Tensor"]


def test_a_custom_ops_body_receives_its_keyword_only_arguments():
    x, y = torch.randn(4), torch.randn(4)
    with torch.no_grad(), OpTrace():
        out = scaled_add(x, y, scale=-2.0)  # the dispatcher passes keyword-only arguments as kwargs
    assert torch.equal(out, x * -2.0 + y)


def test_an_op_of_another_namespace_without_a_python_body_is_an_op_like_any_other():
    x = torch.randn(6)
    log = _started_log(x)
    tracer = OpTrace(log=log)
    with torch.no_grad(), tracer:
        out = torch.ops.tgdispatchtest.twice(x)
    assert torch.equal(out, x * 2)
    assert tracer.seen == 1  # its kernel runs below the mode: its multiplication is not seen
    assert dict(tracer.counts) == {f"{NAMESPACE}::twice": 1}
    assert tracer.compute_ops() == [f"{NAMESPACE}::twice"]
    assert (tracer.compute_elements, tracer.compute_flops) == (6, 0)
    assert _logged_ops(log, out) == [f"{NAMESPACE}::twice.default"]  # the clean room then refuses it


def _candidate_function(tmp_path, body: str):
    """A function whose frames belong to a solution file (Attribution reads the code's file name)."""
    path = tmp_path / "solution.py"
    path.write_text(body)
    namespace: dict = {"torch": torch}
    exec(compile(body, str(path), "exec"), namespace)  # noqa: S102 - test code, written just above
    return str(path), namespace["run"]


def test_only_the_candidates_ops_are_counted_but_every_op_is_logged_and_flows(tmp_path):
    solution, run = _candidate_function(tmp_path, "def run(t):\n    return (t * 2).sum()\n")
    x = torch.randn(3, 4)
    log = _started_log(x)
    flow = DataFlow([x], [])
    tracer = OpTrace(Attribution(solution), flow, log=log)
    with torch.no_grad(), tracer:
        total = run(x)
        negated = torch.neg(x)  # asked for by this test file, not the solution: "other"
    assert dict(tracer.counts) == {"aten::mul": 1, "aten::sum": 1}
    assert tracer.compute_ops() == ["aten::mul", "aten::sum"]
    assert tracer.compute_elements == 12 + 12
    assert tracer.seen == 3
    assert flow.is_input_derived(negated) and flow.is_input_derived(total)
    assert _logged_ops(log, [total, negated]) == ["aten::mul.Tensor", "aten::sum.default", "aten::neg.default"]


def test_without_an_attribution_every_op_counts():
    x = torch.randn(3)
    tracer = OpTrace()
    with torch.no_grad(), tracer:
        torch.neg(x)
    assert dict(tracer.counts) == {"aten::neg": 1}
    assert tracer.compute_elements == 3


def test_the_flow_is_told_each_ops_name_so_fresh_results_stay_clean():
    """``empty_like(x)`` reads only x's shape: its result holds nothing derived from the input."""
    x = torch.randn(8)
    flow = DataFlow([x], [])
    with torch.no_grad(), OpTrace(flow=flow):
        fresh = torch.empty_like(x)
        zeros = torch.zeros_like(x)
        derived = x.exp()
    assert not flow.is_input_derived(fresh) and not flow.is_input_derived(zeros)
    assert flow.is_input_derived(derived)


def test_kernel_written_storages_flow_through_ops_but_protected_ones_never_count_as_written():
    x, weight = torch.randn(4), torch.randn(4)
    flow = DataFlow([x], [weight])
    written = torch.empty(4)
    flow.after_launch([x, written, weight])
    with torch.no_grad(), OpTrace(flow=flow):
        scaled = written * weight
        weight.add_(written)  # in place into a protected storage
    assert flow.is_kernel_written(written) and flow.is_kernel_written(scaled)
    assert not flow.is_kernel_written(weight)


def test_compute_work_reads_every_tensor_argument_and_counts_matmul_flops():
    a, b = torch.randn(2, 3), torch.randn(3, 5)
    tracer = OpTrace()
    with torch.no_grad(), tracer:
        product = a @ b
        product.relu()
    assert tracer.compute_ops() == ["aten::mm", "aten::relu"]
    assert tracer.compute_elements == (6 + 15) + 10
    assert tracer.compute_flops == 2 * 2 * 3 * 5
    assert tracer.moved_elements == [0, 0]


def test_copies_are_not_compute_and_are_measured_as_moves_in_layout_and_dtype():
    x = torch.randn(3, 4)
    tracer = OpTrace()
    with torch.no_grad(), tracer:
        x.t().contiguous()  # a transpose made contiguous: 12 elements in a new layout
        x.double()  # 12 in a new dtype
        x.clone()  # a same-layout memcpy: moves nothing
    assert tracer.compute_ops() == []
    assert (tracer.compute_elements, tracer.compute_flops) == (0, 0)
    assert tracer.moved_elements == [12, 12]
    assert tracer.device_to_host_elements == 0  # host-to-host copies expose nothing


def test_fills_need_both_a_logged_event_and_a_checked_trial(monkeypatch):
    """`poison_fresh` fills what the log records, through the module's two fills (spied here, so
    that no assertion reads uninitialised bytes); the reference's trace (no fill), a trace without
    a log and a log between calls (no event) fill nothing."""
    from tritongym.evaluator.worker import optrace

    calls: list[tuple[str, tuple]] = []
    real_fresh, real_growth = optrace.poison_uninitialised, optrace.poison_growth

    def fresh(out):
        calls.append(("fresh", tuple(out.shape)))
        real_fresh(out)

    def growth(tensor, before):
        calls.append(("growth", (before, optrace.storage_nbytes(tensor))))
        real_growth(tensor, before)

    monkeypatch.setattr(optrace, "poison_uninitialised", fresh)
    monkeypatch.setattr(optrace, "poison_growth", growth)

    def forward():
        made = torch.empty(3)
        kept = torch.full((4,), 5.0)
        kept.resize_(6)  # grows the storage from 16 to 24 bytes
        return made, kept

    x = torch.randn(2)
    log = _started_log(x)
    with torch.no_grad(), OpTrace(log=log, poison_fresh=True):
        made, kept = forward()
    log.finish([made, kept])
    # (the fresh fill is a growth fill from byte 0: `poison_uninitialised` calls `poison_growth`)
    assert calls == [("fresh", (3,)), ("growth", (0, 12)), ("growth", (16, 24))]
    assert made.isnan().all() and kept[:4].eq(5.0).all() and kept[4:].isnan().all()

    for tracer in (OpTrace(log=_started_log(x), poison_fresh=False), OpTrace(poison_fresh=True)):
        calls.clear()
        with torch.no_grad(), tracer:
            forward()
        assert calls == []
    inactive = _started_log(x)
    inactive.active = False
    calls.clear()
    with torch.no_grad(), OpTrace(log=inactive, poison_fresh=True):
        forward()
    assert calls == []
