"""How much work `OpTrace` attributes to the candidate's PyTorch ops, and how `DataFlow` follows data.

The fallback rule (`checks.check_no_pytorch_fallback` via `oprules.heavy_share`) compares these
figures with the reference's, so a miscount decides verdicts; before issue 14 they were reached
only through whole evaluations. Found by mutation testing (benchmarks/mutation.py). Fast, CPU only:
the device-to-host path is driven with a stand-in op on a ``meta`` tensor.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from tritongym.evaluator import oprules
from tritongym.evaluator.worker import optrace
from tritongym.evaluator.worker.optrace import Attribution, DataFlow, OpTrace


def test_a_fresh_trace_has_counted_nothing():
    trace = OpTrace()
    assert (trace.compute_elements, trace.compute_flops, trace.seen, trace.device_to_host_elements) == (0, 0, 0, 0)
    assert trace.compute_ops() == [] and not trace.counts


def test_elements_read_are_summed_over_every_compute_op_and_tensor_argument():
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with OpTrace() as trace:
        z = x + y  # reads 12
        z.relu()  # reads 6
        x.view(6)  # a view: seen, not compute
    assert trace.compute_elements == 18
    assert trace.compute_ops() == ["aten::add", "aten::relu"]
    assert trace.seen == 3 and trace.counts["aten::view"] == 1


def test_tensor_keyword_arguments_count_and_reach_the_op():
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    with OpTrace() as trace:
        out = torch.ops.aten.add.Tensor(x, other=y)
    torch.testing.assert_close(out, x + y)
    assert trace.compute_elements == 12


def test_flops_are_torchs_flop_counter_figures_summed():
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    image, weight = torch.randn(1, 1, 4, 4), torch.randn(1, 1, 3, 3)

    def work():
        torch.mm(a, b)
        F.conv2d(image, weight)  # torch's conv formula needs the output's shape

    with OpTrace() as trace:
        work()
    with FlopCounterMode(display=False) as counter:
        work()
    assert trace.compute_flops == counter.get_total_flops() == 2 * 2 * 3 * 4 + 2 * 4 * 9
    assert trace.compute_elements == (6 + 12) + (16 + 9)


def test_the_flop_formulas_are_a_copy_of_torchs_registry():
    registry = optrace._flop_registry()
    assert torch.ops.aten.mm in registry and torch.ops.aten.convolution in registry
    assert set(optrace._FLOPS) == set(registry)


def test_ops_asked_for_by_others_are_seen_but_not_counted():
    x = torch.randn(4)
    mine = Attribution(__file__)
    with OpTrace(attribution=mine) as trace:
        x * 2  # asked for by this file: "the candidate"
    assert trace.compute_ops() == ["aten::mul"] and trace.compute_elements == 4
    elsewhere = Attribution(optrace.__file__.replace("optrace.py", "compare.py"))
    with OpTrace(attribution=elsewhere) as trace:
        x * 2
    assert trace.seen == 1 and trace.compute_ops() == [] and trace.compute_elements == 0 and not trace.counts


def test_attribution_names_the_first_deciding_frame():
    assert Attribution(__file__).who() == "candidate"
    assert Attribution("/nowhere/solution.py").who() == "other"  # only pytest and the stdlib above


def _frames_in(filename: str, body: str) -> dict:
    """Functions whose frames carry `filename`, as a wrapper in that file would have."""
    namespace: dict = {}
    exec(compile(body, filename, "exec"), namespace)  # noqa: S102 - test scaffolding, our own text
    return namespace


def test_attribution_skips_any_number_of_the_tracers_own_frames():
    # A tool (mutmut's trampolines) or a refactor adding wrapper frames inside optrace.py must not
    # turn the candidate's ops into the harness's: the walk starts past all of them.
    wrappers = _frames_in(optrace.__file__, "def one(who):\n    return who()\n"
                                            "def two(who):\n    return one(who)\n")
    mine = Attribution(__file__)
    assert wrappers["one"](mine.who) == "candidate"
    assert wrappers["two"](mine.who) == "candidate"
    # ... nor can a frame merely named like the tracer, further out, hide the candidate behind it.
    outer = _frames_in(optrace.__file__, "def asks(middle, who):\n    return middle(who)\n")
    library = _frames_in("/nowhere/library.py", "def middle(who):\n    return ONE(who)\n")
    library["ONE"] = wrappers["one"]
    assert outer["asks"](library["middle"], Attribution(__file__).who) == "candidate"
    # ... and a launch hook (launches.py) or the kernel checks (kernels.py) are the harness too.
    hook = _frames_in(optrace.__file__.replace("optrace.py", "launches.py"), "def hook(who):\n    return who()\n")
    assert hook["hook"](Attribution(__file__).who) == "harness"


def test_package_dir_is_the_imported_packages_real_folder():
    import triton

    assert optrace._package_dir("triton") == os.path.realpath(os.path.dirname(triton.__file__)) + os.sep
    assert optrace._package_dir("tritongym_no_such_package") is None  # not imported
    assert optrace._package_dir("sys") is None  # built in: no file


@pytest.mark.parametrize("inside, verdict", [
    ("runtime/jit.py", "triton"), ("language/core.py", "triton"), ("backends/driver.py", "triton"),
    ("compiler/compiler.py", "triton"), ("__init__.py", "triton"),
    ("testing.py", "candidate"),  # Triton's other modules are looked through, to this test file
])
def test_tritons_runtime_frames_decide_triton(inside, verdict):
    machinery = _frames_in(optrace._package_dir("triton") + inside, "def launch(who):\n    return who()\n")
    assert machinery["launch"](Attribution(__file__).who) == verdict


def test_without_triton_imported_no_frame_is_tritons(monkeypatch):
    import triton

    frames = _frames_in(os.path.dirname(triton.__file__) + "/runtime/jit.py", "def launch(who):\n    return who()\n")
    monkeypatch.delitem(sys.modules, "triton")
    assert frames["launch"](Attribution(__file__).who) == "candidate"


def test_the_candidate_file_is_recognised_through_a_symlink(tmp_path):
    real = tmp_path / "solution.py"
    real.write_text("")
    link = tmp_path / "link.py"
    link.symlink_to(real)
    by_link = _frames_in(str(link), "def forward(who):\n    return who()\n")
    assert by_link["forward"](Attribution(str(real)).who) == "candidate"
    by_real = _frames_in(str(real), "def forward(who):\n    return who()\n")
    assert by_real["forward"](Attribution(str(link)).who) == "candidate"


def test_a_pseudo_file_name_is_never_resolved_as_a_path(tmp_path, monkeypatch):
    # Code compiled from a string ("<string>") is not the candidate's file, even when a file of that
    # name happens to sit in the working directory.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "<string>").write_text("")
    from_string = _frames_in("<string>", "def forward(who):\n    return who()\n")
    assert from_string["forward"](Attribution(str(tmp_path / "<string>")).who) == "other"


# -- data flow -----------------------------------------------------------------------------------------


def test_input_derived_data_follows_ops_but_not_fresh_allocations():
    x = torch.randn(3)
    flow = DataFlow(inputs=[x], protected=[x])
    with OpTrace(flow=flow):
        doubled = x * 2
        ones = torch.ones(3)
        shifted = ones + 1
        like = torch.zeros_like(x)  # a fresh op reading x's shape only
        mixed = torch.add(shifted, other=doubled)  # a keyword argument carries the data too
    assert flow.is_input_derived(doubled) and flow.is_input_derived(mixed)
    assert not flow.is_input_derived(ones) and not flow.is_input_derived(shifted)
    assert not flow.is_input_derived(like)


def test_kernel_written_storage_follows_ops_and_never_includes_protected_inputs():
    x, out = torch.randn(3), torch.empty(3)
    flow = DataFlow(inputs=[x], protected=[x])
    flow.after_launch([x, out])  # a kernel read x and wrote out
    assert flow.is_kernel_written(out) and not flow.is_kernel_written(x)
    assert flow.is_input_derived(out)  # it was computed from the input
    with OpTrace(flow=flow):
        total = out.sum()
        x.add_(out)  # writes into the protected input
    assert flow.is_kernel_written(total) and not flow.is_kernel_written(x)
    other = torch.empty(2)
    flow.after_launch([other])  # a launch that reads no input
    assert flow.is_kernel_written(other) and not flow.is_input_derived(other)


def test_ops_without_tensor_arguments_derive_nothing():
    flow = DataFlow(inputs=[], protected=[])
    flow.after_op((), {}, torch.ones(2), "aten::custom")
    assert flow.input_derived == set() and flow.kernel_written == set()


def test_tensors_are_collected_four_levels_deep_in_lists_tuples_and_dicts():
    t = torch.ones(2)
    assert optrace._tensors([[[[t]]]], []) == [t]
    assert optrace._tensors([[[[[t]]]]], []) == []
    assert optrace._tensors({"a": {"b": {"c": {"d": t}}}}, []) == [t]
    assert optrace._tensors({"a": {"b": {"c": {"d": {"e": t}}}}}, []) == []
    assert optrace._tensors(({"a": [t, 3]}, "s", t), []) == [t, t]
    assert optrace._input_elements((t, [t]), {"other": torch.ones(3)}) == 7


# -- the device-to-host path, on a CPU ------------------------------------------------------------------


class _Packet:
    __name__ = "_to_copy"


class _ToHost:
    """Stands in for ``aten::_to_copy`` from a device: returns a host tensor of 5 elements."""

    overloadpacket = _Packet()
    namespace = "aten"
    is_view = False

    def __call__(self, *args, **kwargs):
        return torch.ones(5)


def test_a_device_to_host_copy_of_input_data_is_counted():
    on_device = torch.empty(3, device="meta")
    trace = OpTrace(flow=DataFlow(inputs=[on_device], protected=[]))
    trace.__torch_dispatch__(_ToHost(), (), (on_device,), {})
    assert trace.device_to_host_elements == 5 and trace.counts["aten::_to_copy"] == 1
    assert trace.compute_ops() == []  # a copy is not compute
    untracked = OpTrace(flow=DataFlow(inputs=[], protected=[]))
    untracked.__torch_dispatch__(_ToHost(), (), (on_device,), {})
    assert untracked.device_to_host_elements == 0  # not input data
    on_host = torch.ones(2)
    host = OpTrace(flow=DataFlow(inputs=[on_host], protected=[]))
    host.__torch_dispatch__(_ToHost(), (), (on_host,), {})
    assert host.device_to_host_elements == 0  # a host-to-host copy of input data exposes nothing new
    trace.__torch_dispatch__(_ToHost(), (), (on_device,), {})
    assert trace.device_to_host_elements == 10  # copies add up


# -- naming ops --------------------------------------------------------------------------------------------


class _Unnamed:
    def __str__(self) -> str:
        return "custom"


class _PrimOp:
    overloadpacket = type("P", (), {"__name__": "add"})()
    namespace = "prim"


def test_op_names_default_to_aten_and_the_objects_text():
    assert optrace.op_name(_Unnamed()) == "aten::custom"
    assert optrace.op_name(_PrimOp()) == "prim::add"
    assert optrace.op_name(torch.ops.aten.add.Tensor) == "aten::add"


def test_an_op_without_is_view_is_compute_unless_prim_or_listed():
    assert optrace.is_compute(_Unnamed())
    assert not optrace.is_compute(_PrimOp())


def test_dunder_ops_keep_their_trailing_underscores():
    assert oprules.canonical_op("aten::__and__") == "aten::__and__"
    assert oprules.canonical_op("aten::relu_") == "aten::relu"


def test_one_element_or_one_flop_of_reference_work_still_counts():
    assert oprules.heavy_share((1, 0), (1, 0)) is not None
    assert oprules.heavy_share((0, 1), (0, 1)) is not None
    assert oprules.heavy_share((0, 0), (0, 0)) is None


def test_keyword_only_arguments_reach_the_op():
    x, y = torch.ones(3), torch.ones(3)
    with OpTrace() as trace:
        out = torch.ops.aten.add.Tensor(x, y, alpha=2)  # alpha is keyword-only: it stays in kwargs
    assert out.tolist() == [3.0, 3.0, 3.0] and trace.compute_elements == 6


def test_every_launch_and_op_adds_to_the_written_and_derived_sets():
    x, first, second = torch.randn(3), torch.empty(3), torch.empty(3)
    flow = DataFlow(inputs=[x], protected=[x])
    flow.after_launch([x, first])
    flow.after_launch([second])  # a second kernel, reading no input
    assert flow.is_kernel_written(first) and flow.is_kernel_written(second)
    assert flow.is_input_derived(x) and flow.is_input_derived(first) and not flow.is_input_derived(second)
    with OpTrace(flow=flow):
        doubled = first * 2
        tripled = first * 3
        plain = x * 2  # from the input, not from a kernel's output
    assert flow.is_kernel_written(doubled) and flow.is_kernel_written(tripled)
    assert not flow.is_kernel_written(plain) and flow.is_input_derived(plain)


class _NegPacket:
    __name__ = "neg"


class _DeviceNeg(_ToHost):
    """A compute op (not a transfer) that happens to return a host tensor."""

    overloadpacket = _NegPacket()


def test_only_transfer_ops_count_as_device_to_host_copies():
    on_device = torch.empty(3, device="meta")
    trace = OpTrace(flow=DataFlow(inputs=[on_device], protected=[]))
    trace.__torch_dispatch__(_DeviceNeg(), (), (on_device,), {})
    assert trace.device_to_host_elements == 0 and trace.compute_ops() == ["aten::neg"]


def test_out_buffers_passed_by_keyword_count_as_read():
    x, y, buffer = torch.ones(3), torch.ones(3), torch.empty(3)
    with OpTrace() as trace:
        torch.ops.aten.add.out(x, y, out=buffer)  # out= is keyword-only: it reaches the op in kwargs
    assert buffer.tolist() == [2.0, 2.0, 2.0] and trace.compute_elements == 9


def test_copies_into_a_new_layout_or_dtype_are_counted_as_moved_and_memcpys_are_not():
    # A reference that only moves data has this as its whole work (`oprules.heavy_share`); glue
    # that copies without transforming (a contiguous clone, a no-op .contiguous()) moves nothing.
    # Counted as (new layout, new dtype).
    x = torch.randn(2, 3, 4)
    with OpTrace() as trace:
        x.contiguous()  # already contiguous: no op at all
        x.clone()  # same layout, same dtype: a memcpy
    assert trace.moved_elements == [0, 0] and trace.compute_elements == 0
    with OpTrace() as trace:
        x.transpose(1, 2).contiguous()  # 24 elements into a new layout
    assert trace.moved_elements == [24, 0] and trace.compute_ops() == []
    with OpTrace() as trace:
        x.double()  # a cast: 24 elements in a new dtype
        x.half()  # and another: the moves add up
    assert trace.moved_elements == [0, 48]
    with OpTrace() as trace:
        torch.empty(2, 4, 3).copy_(x.transpose(1, 2))  # copy_ reads its second argument
        torch.empty(2, 3, 4).copy_(x)  # same layout: nothing
        torch.empty(2, 4, 3, dtype=torch.float64).copy_(x.transpose(1, 2))  # both at once
    assert trace.moved_elements == [48, 24]
    with OpTrace() as trace:
        x + 1  # compute is counted as compute, never as moved
    assert trace.moved_elements == [0, 0] and trace.compute_elements == 24


def test_op_moves_reads_the_source_each_copy_op_names():
    aten = torch.ops.aten
    x = torch.randn(3, 4)
    wide = torch.empty(3, 4, dtype=torch.float64)
    # copy_(self, src): the source is the second argument; _copy_from(self, dst): the first.
    assert optrace.op_moves(aten.copy_.default, (wide, x), {}, wide) == (0, 12)
    assert optrace.op_moves(aten._copy_from.default, (x, wide), {}, wide) == (0, 12)
    assert optrace.op_moves(aten._copy_from.default, (x.t(), torch.empty(4, 3)), {}, torch.empty(4, 3)) == (12, 0)
    # Tensor.to(other): the source is the tensor converted, not the one whose dtype it takes.
    assert optrace.op_moves(aten.to.other, (x, torch.empty(0, dtype=torch.float64)), {}, wide) == (0, 12)
    # Not a copy, or a copy with no tensor result: nothing moved.
    assert optrace.op_moves(aten.add.Tensor, (x, x), {}, x + x) == (0, 0)
    assert optrace.op_moves(aten.clone.default, (x,), {}, None) == (0, 0)


def test_a_data_movement_reference_is_fallen_back_on_by_as_many_moved_or_read_elements():
    # Reference: no compute op, 100 elements moved into a new layout. Candidate: its layout moves and
    # compute reads add up; its dtype moves do not (an upcast is not a transpose).
    transpose = (100, 0)
    assert oprules.heavy_share((0, 0), (0, 0), (99, 0), transpose) is None
    assert "into a new layout" in oprules.heavy_share((0, 0), (0, 0), (100, 0), transpose)
    assert "only moves data" in oprules.heavy_share((60, 0), (0, 0), (40, 0), transpose)  # stack/cat spellings
    assert oprules.heavy_share((0, 0), (0, 0), (0, 10_000), transpose) is None
    # A cast reference: the dtype moves count, layout copies do not.
    cast = (0, 100)
    assert "into a new dtype" in oprules.heavy_share((0, 0), (0, 0), (0, 100), cast)
    assert oprules.heavy_share((0, 0), (0, 0), (500, 99), cast) is None
    # Both kinds in the reference: both count, against their sum.
    assert oprules.heavy_share((0, 0), (0, 0), (100, 99), (100, 100)) is None
    assert "a new layout and a new dtype" in oprules.heavy_share((0, 0), (0, 0), (100, 100), (100, 100))
    # A reference that computes is judged by its compute work only: glue copies stay free.
    assert oprules.heavy_share((0, 0), (1000, 0), (10_000, 10_000), (10_000, 10_000)) is None
    # A reference that moves nothing: nothing to compare with; one element is something.
    assert oprules.heavy_share((0, 0), (0, 0), (10_000, 10_000), (0, 0)) is None
    assert oprules.heavy_share((0, 0), (0, 0), (1, 0), (1, 0)) is not None
