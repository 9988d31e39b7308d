"""Tests for tritongym.evaluator.worker.optrace: which ATen ops count as compute, op canonicalisation, the
PyTorch-fallback rule `covers_reference`, and tracing real forwards."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tritongym.evaluator.oprules import canonical_op, covers_reference
from tritongym.evaluator.worker.optrace import (
    NON_COMPUTE_OPS,
    OpTrace,
    is_compute,
    op_name,
    storage_span,
    untraced,
)

aten = torch.ops.aten


def test_op_name_drops_the_overload():
    assert op_name(aten.add.Tensor) == "aten::add"
    assert op_name(aten.addmm.default) == "aten::addmm"
    assert op_name(aten.relu_.default) == "aten::relu_"


@pytest.mark.parametrize(
    "op",
    [
        aten.add.Tensor,
        aten.mul.Tensor,
        aten.relu.default,
        aten.relu_.default,
        aten.mm.default,
        aten.addmm.default,
        aten.sum.dim_IntList,
        aten.exp.default,
        aten.where.self,
        aten.gelu.default,
        aten._softmax.default,
        aten.convolution.default,
        aten.cumsum.default,
        aten.max.dim,
    ],
    ids=str,
)
def test_arithmetic_ops_are_compute(op):
    assert is_compute(op)


@pytest.mark.parametrize(
    "op",
    [
        aten.view.default,
        aten.t.default,
        aten.transpose.int,
        aten.permute.default,
        aten.expand.default,
        aten.slice.Tensor,
        aten.unsqueeze.default,
        aten.select.int,
        aten.empty.memory_format,
        aten.empty_like.default,
        aten.zeros.default,
        aten.full.default,
        aten.fill_.Scalar,
        aten.zero_.default,
        aten.clone.default,
        aten.copy_.default,
        aten._to_copy.default,
        aten.detach.default,
        aten.lift_fresh.default,
        aten._local_scalar_dense.default,
        aten.alias.default,
    ],
    ids=str,
)
def test_views_allocations_fills_and_copies_are_not_compute(op):
    assert not is_compute(op)


def test_non_compute_list_is_namespaced():
    assert all(name.startswith("aten::") and "." not in name for name in NON_COMPUTE_OPS)


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("aten::relu_", "aten::relu"),
        ("aten::add_", "aten::add"),
        ("aten::relu", "aten::relu"),
        ("aten::_softmax", "aten::_softmax"),  # leading underscore: not an in-place suffix
        ("aten::mm", "aten::matmul"),
        ("aten::addmm", "aten::matmul"),
        ("aten::addmm_", "aten::matmul"),
        ("aten::bmm", "aten::matmul"),
        ("aten::baddbmm", "aten::matmul"),
        ("aten::linear", "aten::matmul"),
        ("aten::_addmm_activation", "aten::matmul"),
        ("aten::conv2d", "aten::convolution"),
        ("aten::mkldnn_convolution", "aten::convolution"),
        ("aten::sum", "aten::sum"),
    ],
)
def test_canonical_op(name, canonical):
    assert canonical_op(name) == canonical


@pytest.mark.parametrize(
    ("candidate", "reference", "covers"),
    [
        (["aten::relu"], ["aten::relu"], True),
        (["aten::relu_"], ["aten::relu"], True),  # in-place spelling of the same op
        (["aten::relu"], ["aten::relu_"], True),
        (["aten::mm"], ["aten::addmm"], True),  # the matmul family counts as one op
        (["aten::bmm", "aten::add"], ["aten::addmm"], True),
        (["aten::mm", "aten::gelu"], ["aten::addmm", "aten::gelu"], True),
        (["aten::mm"], ["aten::addmm", "aten::gelu"], False),  # only part of the reference in torch
        (["aten::mul"], ["aten::relu"], False),
        ([], ["aten::relu"], False),
        (["aten::relu", "aten::mul", "aten::add"], ["aten::relu"], True),  # extra ops do not help
        (["aten::relu"], [], False),  # a reference with no compute ops cannot be "covered"
        ([], [], False),
    ],
)
def test_covers_reference(candidate, reference, covers):
    assert covers_reference(candidate, reference) is covers


# -- tracing real forwards -------------------------------------------------------------------------


def trace(fn, *args):
    tracer = OpTrace()
    with torch.no_grad(), tracer:
        out = fn(*args)
    return tracer, out


def test_trace_lists_compute_ops_in_first_use_order_once_each():
    x = torch.randn(4, 4)

    def forward(t):
        y = torch.relu(t)
        y = y * 2 + 1
        y = y.view(16).clone().reshape(4, 4).t().contiguous()
        z = torch.empty_like(y).fill_(0)
        return torch.relu(y) + z

    tracer, out = trace(forward, x)
    assert tracer.compute_ops() == ["aten::relu", "aten::mul", "aten::add"]
    assert tracer.counts["aten::relu"] == 2
    assert torch.allclose(out, (torch.relu(x) * 2 + 1).t())


def test_trace_sees_operators_methods_and_functional_calls():
    tracer, _ = trace(lambda t: (t @ t).sigmoid().sum(dim=0), torch.randn(3, 3))
    assert tracer.compute_ops() == ["aten::mm", "aten::sigmoid", "aten::sum"]
    tracer, _ = trace(lambda t: torch.ops.aten.tanh(t), torch.randn(3))
    assert tracer.compute_ops() == ["aten::tanh"]


def test_nn_linear_runs_addmm_not_views():
    linear = torch.nn.Linear(8, 4)
    tracer, _ = trace(linear, torch.randn(2, 8))
    ops = tracer.compute_ops()
    assert ops and all(canonical_op(op) == "aten::matmul" for op in ops)
    assert "aten::t" not in ops and "aten::t" in tracer.counts


def test_in_place_relu_covers_reference_relu():
    reference, _ = trace(F.relu, torch.randn(5))
    candidate, _ = trace(lambda t: t.relu_(), torch.randn(5))
    assert reference.compute_ops() == ["aten::relu"]
    assert candidate.compute_ops() == ["aten::relu_"]
    assert covers_reference(candidate.compute_ops(), reference.compute_ops())


def test_untraced_suspends_the_trace():
    tracer = OpTrace()
    x = torch.randn(3)
    with torch.no_grad(), tracer:
        torch.exp(x)
        with untraced():
            torch.sin(x)
        torch.cos(x)
    assert tracer.compute_ops() == ["aten::exp", "aten::cos"]


def test_storage_span_covers_the_whole_storage_of_views():
    base = torch.zeros(10)
    start, end = storage_span(base)
    assert end - start == 40
    assert storage_span(base[3:5]) == (start, end)
    assert storage_span(base.view(2, 5).t()) == (start, end)
    other = storage_span(torch.zeros(10))
    assert other[1] <= start or other[0] >= end


# -- fresh allocations filled in checked trials (`poison_uninitialised`; the clean room's side is
# tests/unit/evaluator/test_cleanroom_worker.py) ------------------------------------------------

def test_poisoning_fills_the_whole_storage_of_a_strided_or_empty_result():
    from tritongym.evaluator.worker.optrace import poison_uninitialised

    strided = torch.empty_strided((3, 2), (4, 1), dtype=torch.float32)  # storage of 10 elements, gaps included
    poison_uninitialised([strided, (torch.empty(0),)])
    whole = torch.empty(0, dtype=torch.float32).set_(strided.untyped_storage(), 0, (10,), (1,))
    assert whole.isnan().all()
    assert torch.tensor([0xFF] * 4, dtype=torch.uint8).view(torch.float32).isnan().all()
    poison_uninitialised(torch.empty(3, device="meta"))  # a storage without memory: nothing raised
    flags = torch.empty(9, dtype=torch.bool)
    poison_uninitialised(flags)
    assert flags.view(torch.uint8).eq(1).all()  # True as bool's one valid byte, not 0xFF
    sparse = torch.empty((2, 2), layout=torch.sparse_coo)
    poison_uninitialised(sparse)  # no single storage: left alone (the clean room refuses the layout)
    assert sparse._nnz() == 0
    poison_uninitialised("not a tensor")


def test_a_candidate_trace_poisons_the_allocations_its_log_records():
    """The candidate's checked forward fills what its log records (ops outside launches), exactly
    what the clean room's replay of that log fills; other fresh factories keep their values."""
    from tritongym.evaluator.worker.launchlog import LaunchLog
    from tritongym.evaluator.worker.optrace import OpTrace

    x = torch.randn(64)
    log = LaunchLog(__file__)
    log.start([x], [])
    with torch.no_grad(), OpTrace(log=log, poison_fresh=True):
        fresh = torch.empty_like(x)
        made = torch.empty(5, dtype=torch.int32)
        grown = x.new_empty((2, 3), dtype=torch.float16)
        zeros = torch.zeros(4)
    call = log.finish(fresh).to_payload()
    assert fresh.isnan().all() and (made == -1).all() and grown.isnan().all() and (zeros == 0).all()
    assert [e["op"] for e in call["events"] if "detach" not in e["op"]] == [
        "aten::empty_like.default", "aten::empty.memory_format", "aten::new_empty.default", "aten::zeros.default"]


def test_a_candidate_trace_fills_what_resize_adds_and_keeps_what_was_there():
    """``resize_`` that grows a tensor leaves the added bytes uninitialised: a checked trial fills
    them as it fills a fresh allocation (the clean room's replay fills the same logged op)."""
    from tritongym.evaluator.worker.launchlog import LaunchLog
    from tritongym.evaluator.worker.optrace import OpTrace

    x = torch.tensor([1.0, -2.0, 3.0, -4.0])
    log = LaunchLog(__file__)
    log.start([x], [])
    with torch.no_grad(), OpTrace(log=log, poison_fresh=True):
        out = x.clone()
        out.resize_(6)
        flags = torch.zeros(2, dtype=torch.bool)
        flags.resize_(5)
        like = torch.zeros(3, dtype=torch.int32)
        like.resize_as_(out)
        shrunk = x.clone()
        shrunk.resize_(2)
    log.finish(out)
    assert out[:4].tolist() == [1.0, -2.0, 3.0, -4.0] and out[4:].isnan().all()
    assert flags.tolist() == [False, False, True, True, True]
    assert like.tolist() == [0, 0, 0, -1, -1, -1]
    assert shrunk.tolist() == [1.0, -2.0] and shrunk.untyped_storage().nbytes() == 16  # nothing added


def test_poison_growth_fills_only_the_bytes_past_the_old_size():
    from tritongym.evaluator.worker.optrace import poison_growth, storage_nbytes

    grown = torch.zeros(3, dtype=torch.int16)
    grown.resize_(8)
    grown[:3] = 7
    poison_growth(grown, 6)
    assert grown.tolist() == [7, 7, 7, -1, -1, -1, -1, -1]
    assert grown.untyped_storage().nbytes() == 16  # filled in place, never grown further
    flags = torch.zeros(2, dtype=torch.bool)
    flags.resize_(4)
    poison_growth(flags, 2)
    assert flags.view(torch.uint8).tolist() == [0, 0, 1, 1]  # True is byte 1: other bytes are no valid bool
    kept = torch.zeros(4)
    for before in (None, 16, 32):  # unknown, the same size, larger: nothing added
        poison_growth(kept, before)
    assert kept.tolist() == [0.0] * 4
    poison_growth("not a tensor", 0)
    assert storage_nbytes(kept) == 16 and storage_nbytes([kept]) is None
    assert storage_nbytes(torch.zeros(2, 2).to_sparse()) is None  # no single storage


def test_inductor_allocators_fill_only_while_checked_trials_run(monkeypatch):
    """Wrapped on a copy of torch's allocator module (the process's own stays as it is)."""
    import types

    from tritongym.evaluator.worker import optrace
    from tritongym.evaluator.worker.optrace import allocator_poison, install_allocator_poison

    real = torch._C._dynamo.guards._empty_strided_cpu
    guards = types.SimpleNamespace(_empty_strided_cpu=real, _empty_strided_cuda=real)
    install_allocator_poison(guards)
    wrapped = guards._empty_strided_cpu
    assert wrapped is not real and guards._empty_strided_cuda is not real
    assert wrapped.__name__ == wrapped.__qualname__ == "_empty_strided_cpu" and wrapped._tritongym_poisons is True
    install_allocator_poison(guards)  # idempotent: not wrapped twice
    assert guards._empty_strided_cpu is wrapped and not hasattr(guards, "_empty_strided_xpu")
    with allocator_poison():
        made = wrapped((3, 4), (4, 1), torch.float32)
        flags = guards._empty_strided_cuda((6,), (1,), torch.bool)  # (the same function here)
    assert made.shape == (3, 4) and made.stride() == (4, 1) and made.isnan().all() and flags.all()
    assert optrace._ALLOCATOR_POISON == [False]  # off again: timed forwards are not filled
    filled = []
    monkeypatch.setattr(optrace, "poison_uninitialised", filled.append)
    plain = wrapped((2, 5), (5, 1), torch.int32)
    assert filled == [] and plain.shape == (2, 5) and plain.dtype == torch.int32
    with allocator_poison():
        inside = wrapped((7,), (1,), torch.float16)
    assert len(filled) == 1 and filled[0] is inside


def test_without_a_module_torchs_own_allocators_are_wrapped(monkeypatch):
    import types

    from tritongym.evaluator.worker.optrace import allocator_poison, install_allocator_poison

    real = torch._C._dynamo.guards._empty_strided_cpu
    stand_in = types.SimpleNamespace(_empty_strided_cpu=real)
    monkeypatch.setattr(torch._C._dynamo, "guards", stand_in)  # what `torch._C._dynamo.guards` names
    install_allocator_poison()
    assert stand_in._empty_strided_cpu is not real
    with allocator_poison():
        assert stand_in._empty_strided_cpu((5,), (1,), torch.float64).isnan().all()


def test_a_torch_without_inductors_allocator_module_is_left_as_it_is(monkeypatch):
    from tritongym.evaluator.worker.optrace import install_allocator_poison

    monkeypatch.delattr(torch._C._dynamo, "guards")
    install_allocator_poison()  # nothing to wrap, nothing raised
    assert not hasattr(torch._C._dynamo, "guards")
    monkeypatch.delattr(torch._C, "_dynamo")
    install_allocator_poison()
