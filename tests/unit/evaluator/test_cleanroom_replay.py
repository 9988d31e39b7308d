"""The clean room's replay (`cleanroom.worker`), value by value: what decides a candidate's reward.

The clean room never runs candidate code; it rebuilds a forward from the candidate's launch log and
its outputs are the ones the parent judges. So a log must be rebuilt *exactly* (dtype, shape, stride,
offset, shared storages, model state, inputs, external blobs) and a malformed one must
fail as `Diverged` with the reason the parent reports. Covered here, all in this process on the CPU:

* `Replay.load_buffers`, `view`, `decode` and `_descriptor`: honest logs rebuild exact tensors; each
  malformed field is refused with its own words.
* `_op` (the ATen allow-list), `_run_op` and `bind_outputs`: exact outputs, the work and copy counters
  the parent compares with the reference's, the fill of fresh allocations in checked replays.
* `execute`/`run`, `_run_launch`: grid and argument validation, a real kernel from the checked source
  run in Triton's interpreter (``TRITON_INTERPRET=1``), a memory bound crossed, an interpreter gap.
* `time_replay`'s request checks and fresh buffers, `profile_replay`'s on a CPU, `plain`.
* `serve`, the request loop, over a real `Channel` on a socket pair (the parent's end here, `serve`
  in a thread on the other): every reply kind and its payload.

The bounds checks themselves are in test_cleanroom_worker.py; the jailed process end to end in
tests/adversarial/test_cleanroom.py.
"""

from __future__ import annotations

import socket
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
import triton.language as tl

from tritongym.evaluator.cleanroom import bounds
from tritongym.evaluator.cleanroom.kernels import KernelBuilder, KernelRefused
from tritongym.evaluator.cleanroom.worker import (
    Diverged,
    Replay,
    Unsupported,
    _op,
    plain,
    profile_replay,
    serve,
    time_replay,
)
from tritongym.evaluator.common.channel import Channel, ChannelClosed

CPU = torch.device("cpu")

# The "checked source" the clean room holds: kernels are rebuilt from this text only.
SOURCE = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def scale(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


    @triton.jit
    def unmasked(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs))


    @triton.jit
    def asm(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs)
        y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
        tl.store(out_ptr + offs, y)


    @triton.jit
    def narrow(x_ptr, BLOCK: tl.constexpr):
        tl.static_assert(BLOCK < 4, "BLOCK must stay below four: wider blocks read past the rows this kernel owns "
                                    "and write partial sums over the neighbouring rows, which the reduction then "
                                    "counts twice; launch it with BLOCK=2 and a grid of one program per pair of "
                                    "rows, or pad the input to a multiple of four columns before the launch")
    ''')
NARROW_MESSAGE = ("BLOCK must stay below four: wider blocks read past the rows this kernel owns and write partial sums "
                  "over the neighbouring rows, which the reduction then counts twice; launch it with BLOCK=2 and a "
                  "grid of one program per pair of rows, or pad the input to a multiple of four columns before the "
                  "launch")


def _key(name: str) -> str:
    """The log's key of a kernel: its name and the line of its decorator."""
    lines = SOURCE.splitlines()
    return f"{name}:{next(i for i, text in enumerate(lines, 1) if text.startswith(f'def {name}(')) - 1}"


SCALE, UNMASKED, ASM, NARROW = _key("scale"), _key("unmasked"), _key("asm"), _key("narrow")
KERNELS = {key: {"name": key.partition(":")[0], "line": int(key.partition(":")[2]),
                 "globals": {"tl": {"module": "triton.language"}}} for key in (SCALE, UNMASKED, ASM, NARROW)}


def ref(number: int, shape=(4,), stride=(1,), offset: int = 0, dtype: str = "float32") -> dict:
    """A logged tensor reference: buffer number, dtype, shape, stride, storage offset."""
    return {"T": number, "d": dtype, "s": list(shape), "st": list(stride), "o": offset}


def replay(state=(), kernels=None, poison_fresh: bool = False, source: str = SOURCE, tmp=None) -> Replay:
    return Replay(CPU, KernelBuilder(source, tmp), list(state), KERNELS if kernels is None else kernels,
                  poison_fresh=poison_fresh)


def diverges(call, message: str) -> None:
    """The call fails as `Diverged` with exactly `message` (the parent shows it as the reason)."""
    with pytest.raises(Diverged) as caught:
        call()
    assert str(caught.value) == message


def _input(nbytes: int = 16, index: int = 0) -> dict:
    return {"kind": "input", "index": index, "nbytes": nbytes}


def _new(nbytes: int = 16) -> dict:
    return {"kind": "new", "nbytes": nbytes}


@pytest.fixture
def interpret(monkeypatch):
    """Triton's CPU interpreter, the clean room's own mode on this tier (read when a kernel is built)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture
def checked(monkeypatch, interpret):
    """The bounds checks wired into the interpreter as the clean room's `main` does, on a subclass of
    Triton's builder so Triton's own class stays untouched for other tests."""
    from triton.runtime import interpreter

    class Bounded(interpreter.InterpreterBuilder):
        pass

    bounds.install(Bounded)
    monkeypatch.setattr(interpreter.interpreter_builder, "__class__", Bounded)


# -- load_buffers: the buffers a log names -----------------------------------------------------------

def test_inputs_are_copied_contiguous_and_never_the_parents_tensor():
    # The replay writes its buffers; the parent's copy of the inputs must stay as it sent them.
    parent = torch.arange(6, dtype=torch.float32)
    made = replay()
    made.load_buffers({"buffers": [_input(24)]}, [parent])
    view = made.view(ref(0, (6,)))
    assert view.tolist() == parent.tolist()
    view.fill_(-1.0)
    assert parent.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    # A transposed input arrives as its values in row-major order (the candidate's own `contiguous` layout).
    transposed = torch.arange(6, dtype=torch.float32).reshape(2, 3).t()
    made = replay()
    made.load_buffers({"buffers": [_input(24)]}, [transposed])
    assert made.view(ref(0, (3, 2), (2, 1))).tolist() == transposed.tolist()


def test_each_input_buffer_takes_the_input_it_names():
    first, second = torch.tensor([1.0, 2.0]), torch.tensor([7, 8, 9], dtype=torch.int64)
    made = replay()
    made.load_buffers({"buffers": [_input(24, 1), _input(8, 0)]}, [first, second])
    assert made.view(ref(0, (3,), dtype="int64")).tolist() == [7, 8, 9]
    assert made.view(ref(1, (2,))).tolist() == [1.0, 2.0]


@pytest.mark.parametrize("index", [2, -1, "0", None, 1.0])
def test_an_input_that_does_not_exist_is_refused(index):
    diverges(lambda: replay().load_buffers({"buffers": [_input(4, index)]}, [torch.zeros(1), torch.zeros(1)]),
             "a buffer names an input that does not exist")


def test_state_buffers_are_the_shipped_bytes_by_index_first_and_last():
    # Model state arrives once as byte strings (uint8, 1-D); a buffer names one by index.
    state = [torch.tensor([1.5, 2.5]).view(torch.uint8), torch.tensor([3, 4], dtype=torch.int32).view(torch.uint8)]
    made = replay(state)
    made.load_buffers({"buffers": [{"kind": "state", "index": 1, "nbytes": 8},
                                   {"kind": "state", "index": 0, "nbytes": 8}]}, [])
    assert made.view(ref(0, (2,), dtype="int32")).tolist() == [3, 4]
    assert made.view(ref(1, (2,))).tolist() == [1.5, 2.5]
    made.view(ref(1, (2,))).fill_(0.0)  # the shipped state serves every later replay unchanged
    assert state[0].view(torch.float32).tolist() == [1.5, 2.5]


@pytest.mark.parametrize("index", [2, -1, "1", None])
def test_state_that_was_not_shipped_is_refused(index):
    state = [torch.zeros(4, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8)]
    diverges(lambda: replay(state).load_buffers({"buffers": [{"kind": "state", "index": index, "nbytes": 4}]}, []),
             "a buffer names model state that was not shipped")


@pytest.mark.parametrize("content", [torch.zeros(2), torch.zeros(2, 2, dtype=torch.uint8), "bytes"])
def test_state_that_is_not_a_byte_string_is_refused(content):
    diverges(lambda: replay([content]).load_buffers({"buffers": [{"kind": "state", "index": 0, "nbytes": 4}]}, []),
             "a shipped buffer is not a byte string")


def _external_log(*blobs: torch.Tensor) -> dict:
    return {"buffers": [{"kind": "external", "blob": i, "nbytes": blob.numel()} for i, blob in enumerate(blobs)],
            "blobs": list(blobs)}


def test_external_buffers_are_their_blobs_byte_for_byte():
    first = torch.tensor([1.0, -2.0]).view(torch.uint8)
    last = torch.arange(6, dtype=torch.uint8)
    made = replay()
    made.load_buffers(_external_log(first, last), [])
    assert made.view(ref(0, (2,))).tolist() == [1.0, -2.0]
    assert made.view(ref(1, (6,), dtype="uint8")).tolist() == [0, 1, 2, 3, 4, 5]
    assert made.storages[1].nbytes() == 6
    made.view(ref(1, (6,), dtype="uint8")).fill_(9)
    assert last.tolist() == [0, 1, 2, 3, 4, 5]  # a copy: the parent's blob itself is untouched


@pytest.mark.parametrize("blob", [1, -1, "0", None])
def test_an_external_buffer_without_its_blob_is_refused(blob):
    log = {"buffers": [{"kind": "external", "blob": blob, "nbytes": 1}], "blobs": [torch.zeros(1, dtype=torch.uint8)]}
    diverges(lambda: replay().load_buffers(log, []), "an external buffer has no bytes")


def test_a_log_without_blobs_has_no_external_bytes():
    diverges(lambda: replay().load_buffers({"buffers": [{"kind": "external", "blob": 0, "nbytes": 1}]}, []),
             "an external buffer has no bytes")


def test_a_buffer_whose_bytes_differ_from_the_logged_size_is_refused():
    diverges(lambda: replay().load_buffers({"buffers": [_input(12)]}, [torch.zeros(4)]),
             "buffer of 12 bytes arrived with 16")
    diverges(lambda: replay().load_buffers(_external_log(torch.zeros(3, dtype=torch.uint8)) | {
        "buffers": [{"kind": "external", "blob": 0, "nbytes": 4}]}, []), "buffer of 4 bytes arrived with 3")


@pytest.mark.parametrize("log, message", [
    ({}, "malformed log"),
    ({"buffers": {"0": _input()}}, "malformed log"),
    ({"buffers": [], "blobs": {"0": 1}}, "malformed log"),
    ({"buffers": [[0]]}, "malformed buffer entry"),
    ({"buffers": [{"kind": "pinned", "nbytes": 4}]}, "unknown buffer kind 'pinned'"),
    ({"buffers": [{"kind": "k" * 60, "nbytes": 4}]}, f"unknown buffer kind {'k' * 40!r}"),
])
def test_malformed_buffer_lists_are_refused_with_their_reason(log, message):
    diverges(lambda: replay().load_buffers(log, [torch.zeros(1)]), message)


# -- view: a logged tensor over its buffer ------------------------------------------------------------

def _loaded(*tensors: torch.Tensor, new: int = 0, poison_fresh: bool = False) -> Replay:
    made = replay(poison_fresh=poison_fresh)
    made.load_buffers({"buffers": [_input(t.untyped_storage().nbytes(), i) for i, t in enumerate(tensors)]
                       + [_new() for _ in range(new)]}, list(tensors))
    return made


def test_a_view_has_the_logged_dtype_shape_stride_and_offset_and_shares_its_buffer():
    made = _loaded(torch.arange(12, dtype=torch.float32))
    view = made.view(ref(0, (2, 3), (1, 4), 2))
    assert (view.dtype, list(view.shape), list(view.stride()), view.storage_offset()) == (
        torch.float32, [2, 3], [1, 4], 2)
    assert view.tolist() == [[2.0, 6.0, 10.0], [3.0, 7.0, 11.0]]
    other = made.view(ref(0, (12,)))
    assert other.untyped_storage().data_ptr() == view.untyped_storage().data_ptr()
    view.fill_(0.0)  # two views of one buffer are one memory, as in the candidate's forward
    assert other.tolist() == [0.0, 1.0, 0.0, 0.0, 4.0, 5.0, 0.0, 0.0, 8.0, 9.0, 0.0, 0.0]
    assert made.view(ref(0, (4,), dtype="int32")).dtype == torch.int32  # the bytes reinterpreted, as logged


@pytest.mark.parametrize("number", [1, -1, "0", None])
def test_a_view_of_a_buffer_that_does_not_exist_is_refused(number):
    diverges(lambda: _loaded(torch.zeros(4)).view(ref(0) | {"T": number}),
             "a tensor refers to a buffer that does not exist")


def test_a_view_of_a_buffer_no_event_made_yet_is_refused():
    diverges(lambda: _loaded(torch.zeros(4), new=1).view(ref(1)), "a tensor is used before the event that makes it")


@pytest.mark.parametrize("change", [{"d": "float128"}, {"d": None}, {"s": [2.0]}, {"s": None}, {"st": [True]},
                                    {"st": (1,)}, {"o": "0"}, {"o": None}, {"s": [2, 2]}])
def test_each_malformed_field_of_a_reference_is_refused(change):
    diverges(lambda: _loaded(torch.zeros(4)).view(ref(0) | change), "malformed tensor reference")


@pytest.mark.parametrize("shape, offset", [([-1], 0), ([2], -1)])
def test_a_view_torch_cannot_make_is_refused_with_torchs_reason(shape, offset):
    with pytest.raises(Diverged, match=r"^a tensor view does not fit its buffer: \S"):
        _loaded(torch.zeros(4)).view(ref(0, shape, (1,), offset))


def test_a_view_past_the_end_of_its_buffer_is_refused():
    # A log whose reference reaches past its 16-byte buffer is not what the candidate ran: it must diverge,
    # never be replayed over allocator leftovers (unpoisoned bytes of this process's earlier work). Tensor.set_
    # alone would grow the storage (found by mutation testing).
    made = _loaded(torch.zeros(4))
    with pytest.raises(Diverged, match=r"^a tensor view does not fit its buffer: elements 0\.\.7 of 4$"):
        made.view(ref(0, (8,)))
    with pytest.raises(Diverged, match=r"elements 3\.\.4 of 4$"):  # the offset counts
        made.view({**ref(0, (2,)), "o": 3})
    with pytest.raises(Diverged, match=r"elements 0\.\.4 of 4$"):  # so does every dimension's stride
        made.view({**ref(0, (2, 2)), "st": [3, 1]})
    with pytest.raises(Diverged, match=r"elements -1\.\.0 of 4$"):  # a negative stride reaching below the start
        made.view(ref(0, (2,), stride=(-1,)))
    assert made.storages[0].nbytes() == 16
    assert made.view({**ref(0, (2, 2)), "st": [2, 1]}).tolist() == [[0.0, 0.0], [0.0, 0.0]]  # the whole buffer
    assert made.view({**ref(0, (0, 9)), "st": [9, 1], "o": 4}).numel() == 0  # an empty view reads nothing
    assert made.view(ref(0, (0,), offset=10)).numel() == 0  # wherever it starts
    with pytest.raises(Diverged, match=r"elements 0\.\.7 of 4$"):  # a dimension of one still counts the others
        made.view(ref(0, (1, 8), stride=(8, 1)))
    assert made.storages[0].nbytes() == 16


# -- decode: the values of an event ------------------------------------------------------------------

def _nested(value, depth: int):
    for _ in range(depth):
        value = {"L": [value]}
    return value


def test_plain_values_pass_through_and_lists_keep_list_or_tuple():
    made = replay()
    for value in (None, True, False, 3, -2.5):
        assert made.decode(value) is value or made.decode(value) == value
    assert made.decode({"L": [1, {"L": [2.0], "tuple": True}]}) == [1, (2.0,)]
    assert type(made.decode({"L": [1], "tuple": False})) is list
    assert type(made.decode({"L": [1]})) is list
    assert made.decode({"str": "mean"}) == "mean"


def test_nesting_is_bounded_at_ten_levels():
    made = replay()
    expected = 7
    for _ in range(10):
        expected = [expected]
    assert made.decode(_nested(7, 10)) == expected
    diverges(lambda: made.decode(_nested(7, 11)), "a value nested too deep")
    assert made.decode(7, depth=10) == 7
    diverges(lambda: made.decode(7, depth=11), "a value nested too deep")


def test_torch_values_are_the_clean_rooms_own_objects():
    made = replay()
    assert made.decode({"dtype": "float16"}) is torch.float16
    assert made.decode({"device": "cuda:7"}) == CPU  # the clean room's device, whatever the log says
    assert made.decode({"layout": "strided"}) is torch.strided
    assert made.decode({"memory_format": "channels_last"}) is torch.channels_last
    assert made.decode({"tl_dtype": "fp16"}) is tl.float16


@pytest.mark.parametrize("value, message", [
    ({"dtype": "float128"}, "unknown dtype 'float128'"),
    ({"dtype": "d" * 60}, f"unknown dtype {'d' * 40!r}"),
    ({"layout": "sparse_coo"}, "only strided tensors can be replayed"),
    ({"memory_format": "float32"}, "unknown memory format"),  # a torch attribute, not a memory format
    ({"memory_format": "no_such_format"}, "unknown memory format"),
    ({"constexpr": ref(0)}, "a tensor constexpr"),
    ("sum", "a value that cannot be replayed (str)"),
    ({"mystery": 1}, "a value that cannot be replayed (dict)"),
    ({"descriptor": [1]}, "a value that cannot be replayed (dict)"),
    ({"L": "12"}, "a value that cannot be replayed (dict)"),
    ({"str": 5}, "a value that cannot be replayed (dict)"),
    ([1, 2], "a value that cannot be replayed (list)"),
])
def test_values_that_cannot_be_replayed_are_refused_by_name(value, message):
    diverges(lambda: _loaded(torch.zeros(4)).decode(value), message)


def test_a_constexpr_wraps_its_decoded_value_one_level_deeper():
    made = replay()
    wrapped = made.decode({"constexpr": {"L": [1, 2], "tuple": True}})
    assert isinstance(wrapped, tl.constexpr) and wrapped.value == (1, 2)
    assert made.decode({"constexpr": _nested(3, 9)}).value == [[[[[[[[[3]]]]]]]]]
    diverges(lambda: made.decode({"constexpr": _nested(3, 10)}), "a value nested too deep")


def test_a_kernel_value_is_the_kernel_built_from_the_checked_source(tmp_path, interpret):
    made = replay(tmp=str(tmp_path))
    built = made.decode({"kernel": SCALE})
    (cached,) = [k for key, k in made.builder.built.items() if key.partition("|")[0] == SCALE]
    assert built is cached.jit
    with pytest.raises(KernelRefused, match="is not described in the log"):
        replay(kernels={}).decode({"kernel": SCALE})


def _descriptor(base: dict, block=(2, 4)) -> dict:
    return {"descriptor": {"base": base, "shape": {"L": [4, 8]}, "strides": {"L": [8, 1]},
                           "block_shape": {"L": list(block)}}}


def test_a_descriptor_is_rebuilt_over_the_replays_buffer_within_the_nesting_bound():
    from triton.tools.tensor_descriptor import TensorDescriptor

    made = _loaded(torch.zeros(32))
    rebuilt = made.decode(_descriptor(ref(0, (4, 8), (8, 1))))
    assert type(rebuilt) is TensorDescriptor
    assert rebuilt.base.untyped_storage().data_ptr() == made.storages[0].data_ptr()
    assert (list(rebuilt.shape), list(rebuilt.strides), list(rebuilt.block_shape)) == ([4, 8], [8, 1], [2, 4])
    # Its fields are one level below it, their items two: at eight levels around it the items reach ten.
    assert isinstance(made.decode(_nested(_descriptor(ref(0, (4, 8), (8, 1))), 8)), list)
    diverges(lambda: made.decode(_nested(_descriptor(ref(0, (4, 8), (8, 1))), 9)), "a value nested too deep")


def test_a_descriptor_with_unknown_fields_or_no_base_is_refused():
    made = _loaded(torch.zeros(32))
    honest = _descriptor(ref(0, (4, 8), (8, 1)))["descriptor"]
    diverges(lambda: made.decode({"descriptor": {**honest, "handle": 1}}),
             "a tensor descriptor with fields this Triton does not have")
    diverges(lambda: made.decode({"descriptor": {k: v for k, v in honest.items() if k != "base"}}),
             "a tensor descriptor with fields this Triton does not have")
    diverges(lambda: made.decode({"descriptor": {**honest, "base": 3}}), "a tensor descriptor without a base tensor")
    with pytest.raises(Diverged, match=r"^a tensor descriptor that cannot be rebuilt: "):
        made.decode({"descriptor": {**honest, "strides": {"L": [3, 1]}}})


# -- _op: the ATen allow-list -------------------------------------------------------------------------

def test_an_aten_name_is_torchs_own_overload_and_no_overload_means_default():
    assert _op("aten::add.Tensor") is torch.ops.aten.add.Tensor
    assert _op("aten::relu") is torch.ops.aten.relu.default


@pytest.mark.parametrize("name, message", [
    (5, "op '5' is not an ATen op"),
    ("prims::add.default", "op 'prims::add.default' is not an ATen op"),
    ("x" * 100, f"op {'x' * 80!r} is not an ATen op"),
    ("aten::__and__.Tensor", "op 'aten::__and__.Tensor' cannot be replayed"),
    ("aten::__and__", "op 'aten::__and__' cannot be replayed"),
    ("aten::_print", "op 'aten::_print' cannot be replayed"),
    ("aten::record_stream.default", "op 'aten::record_stream.default' cannot be replayed"),
    ("aten::add-x.Tensor", "op 'aten::add-x.Tensor' cannot be replayed"),
    ("aten::add.Ten-sor", "op 'aten::add.Ten-sor' cannot be replayed"),
    ("aten::add.Tensor.out", "op 'aten::add.Tensor.out' cannot be replayed"),
    ("aten::__" + "a" * 100, f"op {('aten::__' + 'a' * 100)[:80]!r} cannot be replayed"),
    ("aten::no_such_op_here", "op 'aten::no_such_op_here' does not exist in this torch"),
    ("aten::add.NoSuchOverload", "op 'aten::add.NoSuchOverload' does not exist in this torch"),
    ("aten::" + "b" * 100, f"op {('aten::' + 'b' * 100)[:80]!r} does not exist in this torch"),
])
def test_names_outside_the_allow_list_are_refused_by_reason(name, message):
    diverges(lambda: _op(name), message)


# -- _run_op and bind_outputs: ATen ops as logged -----------------------------------------------------

def _op_event(op: str, args: list, out, **kwargs) -> dict:
    event = {"op": op, "args": {"L": args}, "out": out}
    if kwargs:
        event["kwargs"] = kwargs
    return event


def test_ops_run_in_order_and_count_their_work_exactly():
    x = torch.tensor([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]])
    w = torch.ones(3, 2)
    image, filters = torch.ones(1, 1, 3, 3), torch.ones(1, 1, 2, 2)
    made = _loaded(x, w, image, filters, new=3)
    conv = [ref(2, (1, 1, 3, 3), (9, 9, 3, 1)), ref(3, (1, 1, 2, 2), (4, 4, 2, 1)), None, {"L": [1, 1]},
            {"L": [0, 0]}, {"L": [1, 1]}, False, {"L": [0, 0]}, 1]
    made.execute({"events": [
        _op_event("aten::relu", [ref(0, (2, 3), (3, 1))], ref(4, (2, 3), (3, 1))),
        _op_event("aten::mm.default", [ref(4, (2, 3), (3, 1)), ref(1, (3, 2), (2, 1))], ref(5, (2, 2), (2, 1))),
        _op_event("aten::convolution.default", conv, ref(6, (1, 1, 2, 2), (4, 4, 2, 1))),
    ], "outputs": None})
    assert made.view(ref(5, (2, 2), (2, 1))).tolist() == [[2.0, 2.0], [10.0, 10.0]]
    assert made.view(ref(6, (1, 1, 2, 2), (4, 4, 2, 1))).flatten().tolist() == [4.0] * 4
    # relu read 6 elements; mm read 6 + 6 and did 2*2*2*3 FLOPs; the convolution read 9 + 4 and did
    # 2 * 4 outputs * 4 weights (its formula needs the result's shape): one name per op, no overload.
    assert list(made.compute_ops) == ["aten::relu", "aten::mm", "aten::convolution"]
    assert (made.elements, made.flops, made.moved, made.launches) == (31, 56, [0, 0], 0)


def test_copies_count_as_moved_elements_by_layout_and_by_dtype_never_as_compute():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    made = _loaded(x, new=4)
    contiguous = {"memory_format": {"memory_format": "contiguous_format"}}
    made.execute({"events": [
        _op_event("aten::clone.default", [ref(0, (3, 2), (1, 3))], ref(1, (3, 2), (2, 1)), **contiguous),
        _op_event("aten::_to_copy.default", [ref(0, (2, 3), (3, 1))], ref(2, (2, 3), (3, 1), dtype="float64"),
                  dtype={"dtype": "float64"}),
        _op_event("aten::clone", [ref(0, (3, 2), (1, 3))], ref(3, (3, 2), (2, 1)), **contiguous),
        # The source passed by keyword is the source all the same.
        _op_event("aten::_to_copy.default", [], ref(4, (2, 3), (3, 1), dtype="float64"), self=ref(0, (2, 3), (3, 1)),
                  dtype={"dtype": "float64"}),
    ], "outputs": None})
    assert made.view(ref(1, (3, 2), (2, 1))).tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    assert made.view(ref(2, (2, 3), (3, 1), dtype="float64")).dtype == torch.float64
    assert made.moved == [12, 12]
    assert (list(made.compute_ops), made.elements, made.flops) == ([], 0, 0)


def test_keyword_arguments_are_decoded_and_passed():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    made = _loaded(x, new=1)
    made.execute({"events": [_op_event("aten::sum.dim_IntList", [ref(0, (2, 3), (3, 1)), {"L": [1]}],
                                       ref(1, (2, 1), (1, 1)), keepdim=True)], "outputs": None})
    assert made.view(ref(1, (2, 1), (1, 1))).tolist() == [[3.0], [12.0]]
    assert (list(made.compute_ops), made.elements) == (["aten::sum"], 6)


def test_an_in_place_op_keeps_its_buffer():
    made = _loaded(torch.tensor([-1.0, 2.0, -3.0, 4.0]))
    made.execute({"events": [_op_event("aten::relu_", [ref(0)], ref(0))], "outputs": None})
    assert made.view(ref(0)).tolist() == [0.0, 2.0, 0.0, 4.0]


@pytest.mark.parametrize("event", [
    {"op": "aten::relu.default"},
    {"op": "aten::relu.default", "args": {"str": "x"}},
    {"op": "aten::relu.default", "args": {"L": []}, "kwargs": [1]},
])
def test_malformed_op_arguments_are_refused(event):
    diverges(lambda: _loaded(torch.zeros(4)).execute({"events": [event]}), "malformed op arguments")


def test_an_op_that_raises_diverges_with_the_op_and_the_first_300_characters_of_the_error():
    made = replay()
    text = "y" * 400
    try:
        torch.ops.aten._assert_scalar.default(False, text)
    except RuntimeError as exc:
        expected = str(exc)[:300]
    diverges(lambda: made.execute({"events": [_op_event("aten::_assert_scalar.default", [False, {"str": text}],
                                                         None)]}),
             f"aten::_assert_scalar.default raised when replayed: RuntimeError: {expected}")


def test_a_checked_replay_fills_what_resize_adds_exactly_as_the_candidates_trial_did():
    # The log comes from a real candidate-side trace (`OpTrace` with the fill on): the replay's outputs
    # must be the candidate's, bit for bit, the added bytes included; kept bytes keep their values.
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
    payload = log.finish([out, flags, like]).to_payload()
    assert [e["op"] for e in payload["events"] if "resize" in e["op"]] == [
        "aten::resize_.default", "aten::resize_.default", "aten::resize_as_.default"]
    with torch.no_grad():
        replayed = replay(poison_fresh=True).run(payload, [x.clone()])
    for mine, theirs in zip(replayed, [out, flags, like], strict=True):
        assert torch.equal(mine.view(torch.uint8) if mine.dtype != torch.bool else mine,
                           theirs.view(torch.uint8) if theirs.dtype != torch.bool else theirs)
    assert replayed[0][:4].tolist() == [1.0, -2.0, 3.0, -4.0] and replayed[0][4:].isnan().all()


def test_fresh_allocations_are_filled_in_checked_replays_only_where_the_op_is_an_empty():
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0])
    log = {"events": [_op_event("aten::empty_like", [ref(0)], ref(1)),
                      _op_event("aten::relu.default", [ref(0)], ref(2))], "outputs": {"L": [ref(1), ref(2)]}}
    empty, relu = _loaded(x, new=2, poison_fresh=True).execute(log)
    assert empty.isnan().all()  # with or without the overload in the name
    assert relu.tolist() == [0.0, 2.0, 0.0, 4.0]  # a computed result is never filled
    # Timed and profiled replays leave the fills out of the measured span: not filling is the default.
    assert Replay(CPU, KernelBuilder(""), [], {}).poison_fresh is False


def test_a_fresh_allocation_with_an_overload_is_filled_too():
    made = replay(poison_fresh=True)
    made.load_buffers({"buffers": [_new()]}, [])
    out = made.execute({"events": [_op_event("aten::empty.memory_format", [{"L": [4]}], ref(0, dtype="int32"),
                                             dtype={"dtype": "int32"})], "outputs": ref(0, dtype="int32")})
    assert out.tolist() == [-1, -1, -1, -1]


def test_bind_outputs_makes_a_new_buffer_the_results_storage():
    made = _loaded(torch.zeros(4), new=1)
    result = torch.ones(4)
    made.bind_outputs(ref(1), result)
    assert made.storages[1].data_ptr() == result.untyped_storage().data_ptr()
    first = replay()
    first.storages = [None]
    first.bind_outputs(ref(0), result)  # buffer 0 is a buffer too
    assert first.storages[0].data_ptr() == result.untyped_storage().data_ptr()
    made.bind_outputs(None, result)  # an op the log gives no result for binds nothing
    made.bind_outputs(3, 3)
    made.bind_outputs({"str": "x"}, "x")
    assert len(made.storages) == 2


@pytest.mark.parametrize("change", [{"s": [2, 2]}, {"st": [2]}, {"d": "float64"}, {"o": 1}])
def test_a_result_with_another_layout_than_logged_is_refused(change):
    made = _loaded(torch.zeros(4), new=1)
    diverges(lambda: made.bind_outputs(ref(1) | change, torch.ones(4)),
             "an op result has another shape, stride or dtype than the log says")


def test_bind_outputs_refuses_results_that_do_not_match_the_log():
    made = _loaded(torch.zeros(4), new=1)
    diverges(lambda: made.bind_outputs(ref(1), 4.0), "an op returned no tensor where the log has one")
    for number in (2, -1, "1"):
        diverges(lambda number=number: made.bind_outputs(ref(number), torch.ones(4)),
                 "an op result refers to a buffer that does not exist")
    diverges(lambda: made.bind_outputs(ref(0), torch.ones(4)),
             "an op result landed in another buffer than the log says")
    for actual in (torch.ones(4), [torch.ones(4)]):
        diverges(lambda actual=actual: made.bind_outputs({"L": [ref(1), ref(1)]}, actual),
                 "an op returned another number of results than the log says")


def test_a_list_of_results_binds_each_to_its_buffer():
    x = torch.tensor([[1.0, 5.0], [7.0, 2.0]])
    made = _loaded(x, new=2)
    values, indices = made.execute({"events": [_op_event("aten::max.dim", [ref(0, (2, 2), (2, 1)), 1],
                                                         {"L": [ref(1, (2,)), ref(2, (2,), dtype="int64")]})],
                                    "outputs": {"L": [ref(1, (2,)), ref(2, (2,), dtype="int64")], "tuple": True}})
    assert (values.tolist(), indices.tolist()) == ([5.0, 7.0], [1, 0])
    diverges(lambda: made.bind_outputs({"L": [ref(2, (2,), dtype="int64"), ref(1, (2,))]}, (values, indices)),
             "an op result landed in another buffer than the log says")


# -- execute / run --------------------------------------------------------------------------------------

@pytest.mark.parametrize("log, message", [
    ({}, "malformed log"),
    ({"events": {"0": {}}}, "malformed log"),
    ({"events": [["aten::relu"]]}, "malformed event"),
    ({"events": [{"call": "relu"}]}, "an event that is neither an op nor a launch"),
])
def test_malformed_event_lists_are_refused(log, message):
    diverges(lambda: replay().execute(log), message)


def test_run_loads_then_executes_and_returns_the_logged_outputs():
    log = {"buffers": [_input(16), _new()],
           "events": [_op_event("aten::neg.default", [ref(0)], ref(1))], "outputs": {"L": [ref(1), 2]}}
    out, scalar = replay().run(log, [torch.tensor([1.0, -2.0, 3.0, 0.5])])
    assert (out.tolist(), scalar) == ([-1.0, 2.0, -3.0, -0.5], 2)


# -- _run_launch: a kernel from the checked source -----------------------------------------------------

def _launch(grid=(2,), args=None, key: str = SCALE, **kwargs) -> dict:
    args = [ref(0, (6,)), ref(1, (6,)), 6, 2.5] if args is None else args
    return {"launch": key, "grid": list(grid), "args": {"L": args}, "kwargs": kwargs or {"BLOCK": 4}}


def _scale_log(*events: dict) -> dict:
    return {"buffers": [_input(24), _new(24)],
            "events": [_op_event("aten::empty.memory_format", [{"L": [6]}], ref(1, (6,)),
                                 dtype={"dtype": "float32"}), *events],
            "outputs": ref(1, (6,)), "kernels": KERNELS}


def test_a_logged_launch_runs_the_rebuilt_kernel_on_the_replays_buffers(tmp_path, interpret):
    made = replay(tmp=str(tmp_path))
    x = torch.arange(6, dtype=torch.float32)
    out = made.run(_scale_log(_launch()), [x])
    assert out.tolist() == [0.0, 2.5, 5.0, 7.5, 10.0, 12.5]
    assert (made.launches, made.compiled) == (1, {})  # the interpreter returns no compiled kernel to name
    again = replay(tmp=str(tmp_path))
    again.run(_scale_log(_launch(), _launch(args=[ref(1, (6,)), ref(1, (6,)), 6, 2.0])), [x])
    assert again.launches == 2 and again.view(ref(1, (6,))).tolist() == [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]


def test_a_launch_with_arguments_by_keyword(tmp_path, interpret):
    made = replay(tmp=str(tmp_path))
    event = _launch(args=[ref(0, (6,)), ref(1, (6,))], n=6, factor=-1.0, BLOCK=8) | {"grid": [1]}
    assert made.run(_scale_log(event), [torch.arange(6, dtype=torch.float32)]).tolist() == [
        0.0, -1.0, -2.0, -3.0, -4.0, -5.0]


@pytest.mark.parametrize("grid", [None, [], [1, 1, 1, 1], [-1], [1.0], [True], "2", [2, -1]])
def test_a_launch_without_a_valid_grid_is_refused(tmp_path, interpret, grid):
    event = _launch() | {"grid": grid}
    diverges(lambda: replay(tmp=str(tmp_path)).run(_scale_log(event), [torch.zeros(6)]),
             "a launch without a valid grid")


def test_grids_of_one_to_three_dimensions_and_of_zero_programs_run(tmp_path, interpret):
    for grid, expected in (([0], [0.0] * 6), ([2, 1, 1], [2.5] * 6), ([1, 1], [2.5] * 4 + [0.0] * 2)):
        made = replay(tmp=str(tmp_path))
        made.load_buffers({"buffers": [_input(24), _input(24, 1)]}, [torch.ones(6), torch.zeros(6)])
        made.execute({"events": [_launch(grid)], "outputs": None})
        assert made.view(ref(1, (6,))).tolist() == expected and made.launches == 1


@pytest.mark.parametrize("change", [{"args": {"str": "x"}}, {"kwargs": [4]}])
def test_malformed_launch_arguments_are_refused(tmp_path, interpret, change):
    diverges(lambda: replay(tmp=str(tmp_path)).run(_scale_log(_launch() | change), [torch.zeros(6)]),
             "malformed launch arguments")


def test_a_kernel_that_raises_diverges_with_its_key_and_error(tmp_path, interpret):
    event = _launch(args=[ref(0, (6,)), ref(1, (6,)), 6])  # `factor` missing
    with pytest.raises(Diverged) as caught:
        replay(tmp=str(tmp_path)).run(_scale_log(event), [torch.zeros(6)])
    assert str(caught.value).startswith(f"kernel {SCALE} raised when replayed: TypeError: ")
    assert "factor" in str(caught.value)


def test_a_kernels_error_is_cut_to_its_first_300_characters(tmp_path, interpret):
    event = {"launch": NARROW, "grid": [1], "args": {"L": [ref(0, (6,))]}, "kwargs": {"BLOCK": 8}}
    with pytest.raises(Diverged) as caught:
        replay(tmp=str(tmp_path)).run(_scale_log(event), [torch.zeros(6)])
    # The interpreter wraps the assertion; the candidate's feedback gets its first 300 characters.
    assert str(caught.value) == (f"kernel {NARROW} raised when replayed: InterpreterError: "
                                 f"{f'AssertionError({NARROW_MESSAGE!r})'[:300]}")


def test_a_kernel_the_log_does_not_describe_is_refused(tmp_path, interpret):
    with pytest.raises(KernelRefused, match=r"^kernel nowhere:3 is not described in the log$"):
        replay(tmp=str(tmp_path)).run(_scale_log(_launch(key="nowhere:3")), [torch.zeros(6)])


def test_an_access_past_a_buffer_is_out_of_bounds_and_names_the_kernel(tmp_path, checked):
    event = {"launch": UNMASKED, "grid": [1], "args": {"L": [ref(0, (6,)), ref(1, (6,))]}, "kwargs": {"BLOCK": 8}}
    with pytest.raises(bounds.OutOfBounds, match=r"^kernel `unmasked` loaded 2 elements out of bounds, the first "
                                                 r"at byte 24 of `x_ptr`"):
        replay(tmp=str(tmp_path)).run(_scale_log(event), [torch.zeros(6)])


def test_a_construct_the_interpreter_lacks_is_unsupported(tmp_path, interpret):
    event = {"launch": ASM, "grid": [1], "args": {"L": [ref(0, (6,)), ref(1, (6,))]}, "kwargs": {"BLOCK": 2}}
    with pytest.raises(Unsupported, match=r"^NotImplementedError\('inline_asm not supported in interpreter mode'\)$"):
        replay(tmp=str(tmp_path)).run(_scale_log(event), [torch.zeros(6)])


# -- time_replay, profile_replay and plain ---------------------------------------------------------

def test_a_timed_replay_rebuilds_state_and_kernels_from_the_log_for_one_repetition(tmp_path, interpret):
    state = [torch.tensor([2.0] * 6).view(torch.uint8)]
    log = {"buffers": [{"kind": "state", "index": 0, "nbytes": 24}, _new(24)],
           "events": [_op_event("aten::empty.memory_format", [{"L": [6]}], ref(1, (6,)),
                                dtype={"dtype": "float32"}), _launch()],
           "outputs": ref(1, (6,)), "kernels": KERNELS}
    timed = time_replay(CPU, KernelBuilder(SOURCE, str(tmp_path)), state,
                        {"log": log, "inputs": [], "reps": 1, "warmup_ms": 0})
    assert len(timed["ms"]) == 1 and timed["ms"][0] > 0


@pytest.mark.parametrize("payload", [{"log": None, "inputs": []}, {"log": {}, "inputs": None},
                                     {"log": [], "inputs": ()}])
def test_a_time_request_without_a_log_or_inputs_is_malformed(payload):
    diverges(lambda: time_replay(CPU, KernelBuilder(""), [], payload | {"reps": 1, "warmup_ms": 0}),
             "malformed time request")


def test_a_time_request_needs_a_positive_number_of_repetitions():
    diverges(lambda: time_replay(CPU, KernelBuilder(""), [], {"log": {}, "inputs": [], "reps": 0, "warmup_ms": 0}),
             "a time request needs a positive number of repetitions and a finite warm-up")


@pytest.mark.parametrize("payload", [{"log": None, "inputs": [], "calls": 1}, {"log": {}, "inputs": None, "calls": 1},
                                     {"log": {}, "inputs": [], "calls": 0}])
def test_a_malformed_profile_request_is_refused(payload):
    diverges(lambda: profile_replay(CPU, KernelBuilder(""), [], payload), "malformed profile request")


def test_one_profiled_call_is_well_formed_and_needs_a_gpu_here():
    diverges(lambda: profile_replay(CPU, KernelBuilder(""), [], {"log": {}, "inputs": [], "calls": 1}),
             "profiling needs a CUDA device")


def test_plain_outputs_are_detached_copies_in_the_same_containers():
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    copied = plain((y, [x, 3], None))
    assert type(copied) is tuple and type(copied[1]) is list
    assert copied[0].tolist() == [2.0, 2.0] and not copied[0].requires_grad
    assert copied[0].data_ptr() != y.data_ptr() and copied[1][0].data_ptr() != x.data_ptr()
    assert copied[1][1] == 3 and copied[2] is None


# -- serve: the request loop over a real channel -------------------------------------------------------

@contextmanager
def _serving(tmp_path, source: str = SOURCE) -> Iterator[Channel]:
    """`serve` in a thread on one end of a socket pair; the parent's `Channel` on the other. The
    worker's end is closed when `serve` returns, so a loop that ends early shows as a closed channel."""
    parent_end, worker_end = socket.socketpair()
    parent, worker = Channel(parent_end), Channel(worker_end)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            serve(worker, source, CPU)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            worker.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        ready = parent.recv(timeout=30)
        assert (ready.kind, ready.payload) == ("ready", {"torch": torch.__version__})
        yield parent
        parent.send("exit", {})
        with pytest.raises(ChannelClosed):  # `exit` ends the loop at once, with no reply
            parent.recv(timeout=30)
        thread.join(30)
        assert not thread.is_alive() and errors == []
    finally:
        parent.close()


def ask(channel: Channel, kind: str, payload) -> tuple[str, object]:
    channel.send(kind, payload)
    reply = channel.recv(timeout=60)
    return reply.kind, reply.payload


@pytest.fixture
def kernels_dir(tmp_path, monkeypatch, interpret):
    """Kernels `serve` builds go to a fresh temporary folder of this test."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    return tmp_path


def test_serve_replays_a_log_and_reports_outputs_work_moves_and_launches(kernels_dir):
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0, 5.0, -6.0])
    log = _scale_log(_op_event("aten::relu.default", [ref(0, (6,))], ref(3, (6,))),
                     _op_event("aten::_to_copy.default", [ref(3, (6,))], ref(2, (6,), dtype="float64"),
                               dtype={"dtype": "float64"}),
                     _launch(args=[ref(3, (6,)), ref(1, (6,)), 6, 2.5]))
    log["buffers"] += [_new(48), _new(24)]
    with _serving(kernels_dir) as parent:
        kind, reply = ask(parent, "replay", {"inputs": [x], "log": log})
    assert kind == "replayed"
    assert reply["outputs"].tolist() == [0.0, 5.0, 0.0, 10.0, 12.5, 0.0]
    # relu on the input's floats before any kernel wrote them: arithmetic on the problem's data
    assert {k: v for k, v in reply.items() if k != "outputs"} == {
        "compute_ops": ["aten::relu"], "work": [6, 0], "moved": [0, 6], "launches": 1,
        "raw_compute": [["aten::relu", 6]]}
    assert x.tolist() == [-1.0, 2.0, -3.0, 4.0, 5.0, -6.0]


# -- raw_compute: arithmetic on the inputs' values before a kernel wrote them ------------------------


def _raw(*events: dict, buffers: list | None = None, inputs=None) -> list:
    x = torch.tensor([-1.0, 2.0, -3.0, 4.0, 5.0, -6.0]) if inputs is None else inputs
    log = _scale_log(*events)
    log["buffers"] += buffers if buffers is not None else [_new(24), _new(24)]
    made = replay()
    with torch.no_grad():
        made.run(log, [x])
    return made.raw_compute


def test_arithmetic_on_the_inputs_floats_is_raw_compute_views_copies_and_selections_are_not():
    assert _raw(_op_event("aten::exp.default", [ref(0, (6,))], ref(2, (6,)))) == [["aten::exp", 6]]
    # a copy of the input carries its values: arithmetic on the copy is arithmetic on the input
    assert _raw(_op_event("aten::clone.default", [ref(0, (6,))], ref(2, (6,))),
                _op_event("aten::neg.default", [ref(2, (6,))], ref(3, (6,)))) == [["aten::neg", 6]]
    # views, copies, data movement and selections are glue
    assert _raw(_op_event("aten::clone.default", [ref(0, (6,))], ref(2, (6,))),
                _op_event("aten::flip.default", [ref(0, (6,)), {"L": [0]}], ref(3, (6,)))) == []
    assert _raw(_op_event("aten::sort.default", [ref(0, (6,))],
                          {"L": [ref(2, (6,)), ref(3, (6,), dtype="int64")]}),
                buffers=[_new(24), _new(48)]) == []


def test_ops_random_by_name_that_read_their_arguments_are_arithmetic():
    assert _raw(_op_event("aten::normal.Tensor_float", [ref(0, (6,)), 0.0], ref(2, (6,)))) == [["aten::normal", 6]]
    # filling a buffer with random values reads nothing: the result holds no input value
    assert _raw(_op_event("aten::clone.default", [ref(0, (6,))], ref(2, (6,))),
                _op_event("aten::normal_.default", [ref(2, (6,))], ref(2, (6,))),
                _op_event("aten::neg.default", [ref(2, (6,))], ref(3, (6,)))) == []


def test_integer_metadata_is_glue_and_a_kernels_output_is_no_longer_the_inputs():
    lengths = torch.tensor([3, 1, 2, 0, 5, 4], dtype=torch.int64)
    log = {"buffers": [_input(48), _new(48)], "kernels": KERNELS, "outputs": ref(1, (6,), dtype="int64"),
           "events": [_op_event("aten::cumsum.default", [ref(0, (6,), dtype="int64"), 0],
                                ref(1, (6,), dtype="int64"))]}
    made = replay()
    made.run(log, [lengths])
    assert made.raw_compute == []  # offsets from lengths: addressing metadata, not the problem's floats


def test_a_buffer_a_kernel_stored_into_no_longer_holds_the_inputs(checked):
    # a copy of the input (buffer 2) holds its values until a kernel stores into it (measured by the
    # bounds check's stores); a kernel that only reads it leaves it the input's
    copy = _op_event("aten::clone.default", [ref(0, (6,))], ref(2, (6,)))
    negate = _op_event("aten::neg.default", [ref(2, (6,))], ref(3, (6,)))
    written = _launch(args=[ref(0, (6,)), ref(2, (6,)), 6, 2.5])
    read = _launch(args=[ref(2, (6,)), ref(1, (6,)), 6, 2.5])
    assert _raw(copy, written, negate) == []
    assert _raw(copy, read, negate) == [["aten::neg", 6]]


def test_serve_keeps_the_shipped_state_for_later_replays(kernels_dir):
    state_log = {"buffers": [{"kind": "state", "index": 1, "nbytes": 8}], "events": [], "outputs": ref(0, (2,))}
    with _serving(kernels_dir) as parent:
        # Before any state arrives there is none.
        assert ask(parent, "replay", {"inputs": [], "log": state_log}) == (
            "error", {"kind": "diverged", "message": "a buffer names model state that was not shipped"})
        state = [torch.zeros(4, dtype=torch.uint8), torch.tensor([1.0, 3.0]).view(torch.uint8)]
        assert ask(parent, "state", {"tensors": state}) == ("state_set", {"count": 2})
        kind, reply = ask(parent, "replay", {"inputs": [], "log": state_log})
        assert kind == "replayed" and reply["outputs"].tolist() == [1.0, 3.0]
        assert ask(parent, "state", {"tensors": "none"}) == ("state_set", {"count": 0})
        assert ask(parent, "state", [1, 2]) == ("state_set", {"count": 0})
        assert ask(parent, "replay", {"inputs": [], "log": state_log})[1]["kind"] == "diverged"


def test_serve_answers_each_refusal_with_its_kind_and_goes_on(kernels_dir, checked):
    oob = {"launch": UNMASKED, "grid": [1], "args": {"L": [ref(0, (6,)), ref(1, (6,))]}, "kwargs": {"BLOCK": 8}}
    asm = {"launch": ASM, "grid": [1], "args": {"L": [ref(0, (6,)), ref(1, (6,))]}, "kwargs": {"BLOCK": 2}}
    x = torch.zeros(6)
    with _serving(kernels_dir) as parent:
        assert ask(parent, "bogus", {}) == ("error", {"kind": "diverged", "message": "unknown request 'bogus'"})
        kind, reply = ask(parent, "replay", {"inputs": [x], "log": _scale_log(oob)})
        assert (kind, reply["kind"]) == ("error", "out_of_bounds")
        assert reply["message"].startswith("kernel `unmasked` loaded 2 elements out of bounds")
        assert ask(parent, "replay", {"inputs": [x], "log": _scale_log(asm)}) == (
            "error", {"kind": "unsupported",
                      "message": "NotImplementedError('inline_asm not supported in interpreter mode')"})
        assert ask(parent, "replay", {"inputs": [x], "log": _scale_log(_launch(key="elsewhere:1"))}) == (
            "error", {"kind": "refused", "message": "kernel elsewhere:1 is not described in the log"})
        long_key = "k" * 2500
        assert ask(parent, "replay", {"inputs": [x], "log": _scale_log(_launch(key=long_key))}) == (
            "error", {"kind": "refused", "message": f"kernel {long_key} is not described in the log"[:2000]})
        assert ask(parent, "replay", {"inputs": [x], "log": _scale_log(_launch())})[0] == "replayed"


@pytest.mark.parametrize("payload, message", [
    ({"log": {"buffers": []}}, "no inputs"),
    ({"log": {"buffers": []}, "inputs": {"x": 1}}, "no inputs"),
    ({"log": None, "inputs": []}, "malformed log"),
    ({"log": {"buffers": [_input(12)]}, "inputs": [torch.zeros(4)]}, "buffer of 12 bytes arrived with 16"),
    ({"log": {"buffers": [_input(2000 * "9")]}, "inputs": [torch.zeros(4)]},
     f"buffer of {2000 * '9'} bytes arrived with 16"[:2000]),
])
def test_serve_answers_a_diverged_log_with_its_reason(tmp_path, payload, message):
    with _serving(tmp_path) as parent:
        assert ask(parent, "replay", payload) == ("error", {"kind": "diverged", "message": message})


def test_serve_answers_any_other_failure_as_diverged_with_its_type(kernels_dir):
    log = _scale_log({"launch": ["k"], "grid": [1]})
    # A kernel whose name makes its file name too long for the file system: an OSError, cut to 1,000 characters.
    name = "k" * 1500
    long_key = f"{name}:4"
    source = textwrap.dedent(f'''
        import triton

        @triton.jit
        def {name}(x_ptr, out_ptr, n, scale, BLOCK):
            pass
        ''')
    table = {long_key: {"name": name, "line": 4, "globals": {}}}
    with _serving(kernels_dir, source) as parent:
        assert ask(parent, "replay", {"inputs": [torch.zeros(6)], "log": log}) == (
            "error", {"kind": "diverged", "message": "TypeError: unhashable type: 'list'"})
        kind, reply = ask(parent, "replay", {"inputs": [torch.zeros(6)],
                                             "log": _scale_log(_launch(key=long_key)) | {"kernels": table}})
        assert (kind, reply["kind"]) == ("error", "diverged")
        assert reply["message"].startswith("OSError: [Errno 36] File name too long: ")
        assert len(reply["message"]) == len("OSError: ") + 1000


def _to_device_log() -> dict:
    """A forward that names the device: ``x.to(device, float64)`` (the device must be the clean room's own)."""
    return {"buffers": [_input(16), _new(32), {"kind": "state", "index": 0, "nbytes": 4}],
            "events": [_op_event("aten::to.device", [ref(0), {"device": "cuda:0"}, {"dtype": "float64"}],
                                 ref(1, dtype="float64"))],
            "outputs": {"L": [ref(1, dtype="float64"), ref(2, (1,), dtype="int32")]}}


def test_serve_replays_on_its_own_device_with_its_state(tmp_path):
    with _serving(tmp_path) as parent:
        assert ask(parent, "state", {"tensors": [torch.tensor([7], dtype=torch.int32).view(torch.uint8)]}) == (
            "state_set", {"count": 1})
        kind, reply = ask(parent, "replay", {"inputs": [torch.tensor([1.0, 2.0, 3.0, 4.0])], "log": _to_device_log()})
        assert kind == "replayed"
        converted, state = reply["outputs"]
        assert converted.dtype == torch.float64 and converted.tolist() == [1.0, 2.0, 3.0, 4.0]
        assert state.tolist() == [7]
        # A timed replay rebuilds the same buffers, state included, on the same device.
        kind, reply = ask(parent, "time", {"inputs": [torch.ones(4)], "log": _to_device_log(), "reps": 1,
                                           "warmup_ms": 0})
        assert kind == "timed" and len(reply["ms"]) == 1


def test_a_timed_replay_runs_on_the_clean_rooms_device():
    timed = time_replay(CPU, KernelBuilder(""), [torch.zeros(4, dtype=torch.uint8)],
                        {"log": _to_device_log(), "inputs": [torch.ones(4)], "reps": 1, "warmup_ms": 0})
    assert len(timed["ms"]) == 1


def test_serve_times_and_refuses_to_profile_on_a_cpu(kernels_dir):
    log = _scale_log(_launch())
    with _serving(kernels_dir) as parent:
        kind, reply = ask(parent, "time", {"inputs": [torch.ones(6)], "log": log, "reps": 2, "warmup_ms": 0})
        assert kind == "timed" and len(reply["ms"]) == 2
        assert reply["method"].startswith("clean-room replay of the logged launches and ops; ")
        assert ask(parent, "time", {"inputs": [], "log": log, "reps": 0, "warmup_ms": 0}) == (
            "error", {"kind": "diverged",
                      "message": "a time request needs a positive number of repetitions and a finite warm-up"})
        assert ask(parent, "profile", {"inputs": [torch.ones(6)], "log": log, "calls": 1}) == (
            "error", {"kind": "diverged", "message": "profiling needs a CUDA device"})
