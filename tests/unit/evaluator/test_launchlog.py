"""The launch log the candidate worker records, `evaluator/worker/launchlog.py`, by value.

What the clean room re-executes is exactly what this log says, so each part is pinned here on real
objects: buffers (inputs, state not yet seen, outputs of ops, external host tensors and their
bytes, the 64 MiB bound), the encoding of every argument kind and what is refused with which
reason, the kernel table (key, globals, closures, kernels named by kernels, the cache across
calls), ops and launches as events (names, outputs, grids, the event bound), and the call's
lifecycle (`start`, `fail`, `finish`).

Kernels are real `triton.jit` functions in a solution file written to a temporary folder; they are
only encoded, never launched (the launch wrapper is `launches.LaunchRecorder`'s, tested with it).
`test_cleanroom.py` holds the first, coarser encoding tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
import types

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from tritongym.evaluator.common.channel import MAX_EXTERNAL_BYTES
from tritongym.evaluator.worker.launchlog import (
    MAX_EVENTS,
    LaunchLog,
    Unloggable,
    distinct_storages,
    storage_bytes,
)

SOLUTION = textwrap.dedent('''
    import math

    import torch
    import triton
    import triton.language as tl

    SCALE = 3
    RATIO = 0.5
    ACT = "relu"
    FLAG = True
    NOTHING = None
    WIDTH = tl.constexpr(4)
    NO_WIDTH = tl.constexpr(None)
    PAIR = tl.constexpr((1, 2))
    KIND = tl.float16
    clamp = min
    root = math.sqrt
    TABLE = {"a": 1}
    elsewhere = None  # a kernel of another file, set by the tests
    NESTED = 7
    NONE_TYPE = type(None)  # a class whose __module__ is "builtins" but which is no builtin
    twice = lambda v: v * 2  # noqa: E731 - a function its module cannot be asked for by name


    def plain(v):
        return v


    @triton.jit
    def helper(x):
        return x * SCALE


    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(x_ptr + offs, helper(x), mask=offs < n)


    @triton.jit
    def names_everything(x_ptr):
        v = SCALE + RATIO + WIDTH + NO_WIDTH + PAIR + clamp(1, 2) + root(4.0) + TABLE + plain(1) + elsewhere
        v = v + twice(NONE_TYPE)
        w = [NESTED for _ in range(1)]
        tl.store(x_ptr, v + w, KIND, ACT, FLAG, NOTHING, math, torch, range)


    @triton.jit
    def walk(x, n):
        if n > 0:
            walk(x, n - 1)  # names itself: the table has a cycle
        return helper(x)


    def make():
        @triton.jit
        def inner(x_ptr):
            tl.store(x_ptr, LATER + OFFSET)
        OFFSET = 2
        return inner
        LATER = 1  # never reached: the cell stays empty
    ''')

LIBRARY = textwrap.dedent('''
    import triton


    @triton.jit
    def lib_kernel(x):
        pass
    ''')


def _import(path, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a real import: `_binding` finds plain functions through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("solution")
    (folder / "solution.py").write_text(SOLUTION)
    (folder / "library.py").write_text(LIBRARY)
    os.symlink(folder / "solution.py", folder / "link.py")
    names = ("tritongym_test_launchlog_solution", "tritongym_test_launchlog_library")
    solution = _import(folder / "solution.py", names[0])
    library = _import(folder / "library.py", names[1])
    solution.elsewhere = library.lib_kernel
    yield types.SimpleNamespace(folder=folder, solution=solution, library=library, path=str(folder / "solution.py"))
    for name in names:
        sys.modules.pop(name, None)


def _key(name: str) -> str:
    # A kernel is named by its function and first line, decorator included (CPython's co_firstlineno):
    # the 0-based index of the `def` line is the 1-based number of the `@triton.jit` line above it.
    lines = SOLUTION.splitlines()
    definition = next(i for i, line in enumerate(lines) if line.strip().startswith(f"def {name}("))
    assert lines[definition - 1].strip() == "@triton.jit"
    return f"{name}:{definition}"


def _started(files, inputs=(), state=()) -> LaunchLog:
    log = LaunchLog(files.path)
    log.start(list(inputs), list(state))
    return log


# -- storages -------------------------------------------------------------------------------


def test_storage_bytes_copy_the_whole_storage_under_a_view():
    x = torch.arange(4, dtype=torch.int32)
    content = storage_bytes(x[1:3])
    assert content.dtype == torch.uint8 and content.shape == (16,)
    assert torch.equal(content.view(torch.int32), x)
    assert storage_bytes(torch.empty(0)).shape == (0,)


@pytest.mark.gpu
def test_storage_bytes_of_a_device_tensor_come_back_to_the_host():
    # The blob of an external CUDA tensor is read on its own device, then copied to a CPU tensor.
    x = torch.arange(4, dtype=torch.int32, device="cuda")
    content = storage_bytes(x[2:])
    assert content.device.type == "cpu"
    assert torch.equal(content.view(torch.int32), x.cpu())


def test_distinct_storages_keep_the_first_tensor_of_each_storage_in_order():
    a, b, d = torch.zeros(4), torch.ones(6), torch.full((2,), 2.0)
    e1, e2 = torch.empty(0), torch.empty(0)
    kept = distinct_storages([a, b, a[1:], b.view(2, 3), d, e1, e2])
    assert [id(t) for t in kept] == [id(a), id(b), id(d), id(e1), id(e2)]


# -- buffers --------------------------------------------------------------------------------


def test_inputs_then_state_not_yet_seen_are_the_buffers(files):
    x, y = torch.zeros(3), torch.zeros(2, dtype=torch.float64)
    w = torch.nn.Parameter(torch.ones(5))
    b = torch.ones(7)
    # State that is an input, or tied to earlier state, is not a buffer of its own; the index is
    # the state tensor's position, which the clean room uses to find its copy.
    log = _started(files, [x, y], [w, w[1:], x, b])
    assert log.log.to_payload()["buffers"] == [
        {"kind": "input", "index": 0, "nbytes": 12, "blob": -1},
        {"kind": "input", "index": 1, "nbytes": 16, "blob": -1},
        {"kind": "state", "index": 0, "nbytes": 20, "blob": -1},
        {"kind": "state", "index": 3, "nbytes": 28, "blob": -1},
    ]
    assert [buffer.device for buffer in log.log.buffers] == ["cpu"] * 4
    assert log.encode(w[2:])["T"] == 2 and log.encode(b)["T"] == 3 and log.encode(x)["T"] == 0


def test_a_tensor_reference_is_its_buffer_and_view(files):
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    log = _started(files, [x])
    assert log.encode(x[1:, ::2]) == {"T": 0, "o": 4, "s": [2, 2], "st": [4, 2], "d": "float32"}
    assert log.encode(torch.nn.Parameter(torch.zeros(2, dtype=torch.bfloat16)))["d"] == "bfloat16"

    class Sub(torch.Tensor):
        pass

    with pytest.raises(Unloggable, match=r"^a tensor subclass \(Sub\) reached an op or a kernel$"):
        log.encode(x.as_subclass(Sub))


def test_an_external_tensor_ships_its_whole_storage_once(files):
    log = _started(files, [torch.zeros(2)])
    host = torch.tensor([1.0, 2.0, 3.0])
    first = log.encode(host[1:])
    assert first == {"T": 1, "o": 1, "s": [2], "st": [1], "d": "float32"}
    assert log.encode(host)["T"] == 1  # the same storage: the same buffer, no second blob
    other = log.encode(torch.tensor([5], dtype=torch.int16))
    assert other["T"] == 2
    assert log.log.to_payload()["buffers"][1:] == [{"kind": "external", "index": -1, "nbytes": 12, "blob": 0},
                                                   {"kind": "external", "index": -1, "nbytes": 2, "blob": 1}]
    assert len(log.log.blobs) == 2 and torch.equal(log.log.blobs[0], storage_bytes(host))


def test_two_tensors_over_the_same_memory_are_one_buffer(files):
    # `torch.from_numpy(x.numpy())` makes a second storage over an input's memory: writes through it
    # change the input, so the log must name the input, not ship a copy.
    memory = np.zeros(4, dtype=np.float32)
    x = torch.from_numpy(memory)
    log = _started(files, [x])
    assert log.encode(torch.from_numpy(memory))["T"] == 0
    assert log.log.blobs == []


@pytest.mark.parametrize("size", [4, 1 << 16])
def test_a_tensor_the_forward_dropped_keeps_its_buffer_for_the_whole_call(files, size):
    # A buffer is named by its storage's address; the log keeps each storage alive, so a later tensor
    # cannot reuse the address and be taken for the dropped one (its own bytes would not be shipped).
    log = _started(files)
    log.encode(torch.ones(size))
    later = torch.full((size,), 2.0)
    assert log.encode(later)["T"] == 1
    assert len(log.log.blobs) == 2 and torch.equal(log.log.blobs[1], storage_bytes(later))


def test_external_tensors_are_bounded_to_64_mib_per_call(files):
    log = _started(files)
    log.encode(torch.empty(MAX_EXTERNAL_BYTES, dtype=torch.uint8))  # exactly the bound: accepted
    with pytest.raises(Unloggable, match=r"^more than 64 MiB of tensors of unknown origin$"):
        log.encode(torch.empty(1, dtype=torch.uint8))
    assert len(log.log.blobs) == 1  # the refused tensor's bytes were not copied
    log.start([], [])  # a new call starts its own count
    assert log.encode(torch.empty(1, dtype=torch.uint8))["T"] == 0
    assert len(log.log.blobs) == 1


# -- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value, encoded", [
    (None, None),
    (True, True),
    (False, False),
    (0, 0),
    (2**63 - 1, 2**63 - 1),
    (-(2**63) + 1, -(2**63) + 1),
    (1.5, 1.5),
    ("floor", {"str": "floor"}),
    ("x" * 200, {"str": "x" * 200}),
    ([1, 2], {"L": [1, 2], "tuple": False}),
    ((), {"L": [], "tuple": True}),
    (torch.Size([2, 3]), {"L": [2, 3], "tuple": True}),
    (torch.float16, {"dtype": "float16"}),
    (torch.device("cpu"), {"device": "cpu"}),
    (torch.strided, {"layout": "strided"}),
    (torch.channels_last, {"memory_format": "channels_last"}),
    (tl.float16, {"tl_dtype": "fp16"}),
    (tl.constexpr(4), {"constexpr": 4}),
    (tl.constexpr("relu"), {"constexpr": {"str": "relu"}}),
])
def test_values_are_encoded_as_tagged_json(files, value, encoded):
    assert _started(files).encode(value) == encoded


def _wrap(value, levels: int):
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("value, reason", [
    (2**64, "an integer argument beyond 64 bits"),
    (-(2**63) - 1, "an integer argument beyond 64 bits"),
    ("x" * 201, "a string argument longer than 200 characters"),
    (_wrap(1, 9), "an argument nested more than 8 levels"),
    (tl.constexpr(_wrap(1, 8)), "an argument nested more than 8 levels"),
    (object(), "an argument of type object (only tensors, numbers, strings, dtypes, tensor descriptors and kernels "
               "can be replayed)"),
    (np.float64(1.0), "an argument of type float64"),  # a float subclass could compute when read
    (types.SimpleNamespace(fn=len), "an argument of type SimpleNamespace"),
])
def test_what_cannot_be_replayed_is_refused_with_its_reason(files, value, reason):
    with pytest.raises(Unloggable) as refused:
        _started(files).encode(value)
    assert str(refused.value).startswith(reason)


def test_eight_levels_of_nesting_are_allowed(files):
    expected = 1
    for _ in range(8):
        expected = {"L": [expected], "tuple": False}
    assert _started(files).encode(_wrap(1, 8)) == expected


def test_a_constexpr_and_a_descriptor_count_one_level_each(files):
    # A constexpr's value is one level below it: seven list levels inside one are allowed.
    expected = 1
    for _ in range(7):
        expected = {"L": [expected], "tuple": False}
    assert _started(files).encode(tl.constexpr(_wrap(1, 7))) == {"constexpr": expected}
    descriptors = pytest.importorskip("triton.tools.tensor_descriptor")
    x = torch.zeros(4, 8)
    log = _started(files, [x])
    descriptor = descriptors.TensorDescriptor.from_tensor(x, [2, 4])
    # Its shapes are lists inside it: two levels below the descriptor.
    encoded = log.encode(_wrap(descriptor, 6))
    for _ in range(6):
        encoded = encoded["L"][0]
    assert encoded["descriptor"]["shape"] == {"L": [4, 8], "tuple": True}  # a torch.Size
    with pytest.raises(Unloggable, match="nested more than 8 levels"):
        log.encode(_wrap(descriptor, 7))


def test_the_int64_minimum_is_a_64_bit_integer(files):
    # Triton passes it as i64: refusing it made an honest launch unreplayable (found by mutation testing).
    assert _started(files).encode(-(2**63)) == -(2**63)


def test_an_unsigned_64_bit_integer_is_a_64_bit_integer(files):
    # Triton passes 2**63 .. 2**64 - 1 as u64 (a 64-bit hash constant such as 0x9E3779B97F4A7C15).
    assert _started(files).encode(2**64 - 1) == 2**64 - 1
    assert _started(files).encode(0x9E3779B97F4A7C15) == 0x9E3779B97F4A7C15


# -- kernels --------------------------------------------------------------------------------


def test_a_kernel_is_named_by_its_first_line_and_brings_the_kernels_it_calls(files):
    log = _started(files)
    assert log.encode(files.solution.kernel) == {"kernel": _key("kernel")}
    assert log.log.kernels == {
        _key("kernel"): {"name": "kernel", "line": int(_key("kernel").split(":")[1]),
                         "globals": {"helper": {"kernel": _key("helper")}, "tl": {"module": "triton.language"}},
                         "header": {"annotations": {"BLOCK": {"attr": ["triton.language.core", "constexpr"]}},
                                    "defaults": {}}},
        _key("helper"): {"name": "helper", "line": int(_key("helper").split(":")[1]),
                         "globals": {"SCALE": {"const": 3}}, "header": {"annotations": {}, "defaults": {}}},
    }
    # Autotune and heuristics wrap the same function: the same key.
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 4})], key=["n"])(files.solution.kernel)
    assert log.encode(triton.heuristics({"BLOCK": lambda args: 4})(tuned)) == {"kernel": _key("kernel")}


def test_the_next_call_gets_the_whole_table_again(files):
    log = _started(files)
    log.encode(files.solution.kernel)
    first = dict(log.log.kernels)
    log.finish(None)
    log.start([], [])
    assert log.log.kernels == {}
    log.encode(files.solution.kernel)  # from the cache: the kernel and the helper it calls
    assert log.log.kernels == first
    log.start([], [])
    log.encode(files.solution.helper)  # a kernel named by no other: itself only
    assert list(log.log.kernels) == [_key("helper")]


def test_a_kernel_that_names_itself_still_brings_its_helpers_on_the_next_call(files):
    log = _started(files)
    log.encode(files.solution.walk)
    first = dict(log.log.kernels)
    assert set(first) == {_key("walk"), _key("helper")}
    log.start([], [])
    log.encode(files.solution.walk)  # the cached table's cycle ends, and the helper is not lost
    assert log.log.kernels == first


def test_a_global_rebound_after_the_first_call_is_not_read_again(files, monkeypatch):
    # The table is fixed at the kernel's first use: a value that changes between trials must be an
    # argument (compared across trials by `replays.host_origin`), not a global the log re-reads.
    log = _started(files)
    log.encode(files.solution.helper)
    monkeypatch.setattr(files.solution, "SCALE", 5)
    log.start([], [])
    log.encode(files.solution.helper)
    assert log.log.kernels[_key("helper")]["globals"] == {"SCALE": {"const": 3}}
    fresh = _started(files)
    fresh.encode(files.solution.helper)
    assert fresh.log.kernels[_key("helper")]["globals"] == {"SCALE": {"const": 5}}


def test_globals_are_bound_by_kind(files):
    log = _started(files)
    key = log.encode(files.solution.names_everything)["kernel"]
    module = files.solution.__name__
    assert log.log.kernels[key]["globals"] == {
        "ACT": {"const": "relu"},
        "FLAG": {"const": True},
        "KIND": {"tl_dtype": "fp16"},
        "NESTED": {"const": 7},  # named inside a comprehension: its own code object
        "NONE_TYPE": {"unknown": "type"},
        "NOTHING": {"const": None},
        "NO_WIDTH": {"constexpr": None},
        "PAIR": {"unknown": "constexpr"},  # a constexpr of a tuple is not a constant the room rebuilds
        "RATIO": {"const": 0.5},
        "SCALE": {"const": 3},
        "TABLE": {"unknown": "dict"},
        "WIDTH": {"constexpr": 4},
        "clamp": {"builtin": "min"},
        "elsewhere": {"attr": [files.library.__name__, "lib_kernel"]},
        "math": {"module": "math"},
        "plain": {"attr": [module, "plain"]},
        "root": {"attr": ["math", "sqrt"]},
        "tl": {"module": "triton.language"},
        "torch": {"module": "torch"},
        "twice": {"unknown": "function"},
    }
    # `range` is a builtin the module never bound: not in the table, the room's builtins serve it.
    assert list(log.log.kernels) == [key]  # a kernel of another file is not shipped


def test_closure_cells_are_bound_and_an_empty_one_is_unknown(files):
    inner = files.solution.make()
    log = _started(files)
    key = log.encode(inner)["kernel"]
    assert log.log.kernels[key]["globals"] == {"LATER": {"unknown": "empty cell"}, "OFFSET": {"const": 2},
                                               "tl": {"module": "triton.language"}}


def test_a_kernel_of_another_file_cannot_be_launched(files):
    log = _started(files)
    with pytest.raises(Unloggable, match=r"^kernel lib_kernel is not defined in the solution file$"):
        log.encode(files.library.lib_kernel)


def test_the_solution_file_is_recognised_through_a_link(files):
    log = LaunchLog(str(files.folder / "link.py"))
    log.start([], [])
    assert log.encode(files.solution.helper) == {"kernel": _key("helper")}


# -- lifecycle ------------------------------------------------------------------------------


def test_nothing_is_logged_before_start(files):
    log = LaunchLog(files.path)
    assert log.active is False
    assert log.before_op(torch.ops.aten.neg.default, (torch.zeros(1),), {}) is None
    assert log.before_launch(files.solution.helper, (1,), {}) is None


def test_start_resets_the_launch_depth(files):
    # `launches.LaunchRecorder` logs a launch only while `depth == 0` and counts it up and down
    # around each launch: a call must start at 0 whatever the last one left.
    log = _started(files)
    log.depth = 2
    log.start([], [])
    assert log.depth == 0


def test_finish_hands_over_the_call_and_starts_afresh(files):
    x = torch.zeros(3)
    log = _started(files, [x])
    done = log.finish((x, 2))
    assert log.active is False
    assert done.outputs == {"L": [{"T": 0, "o": 0, "s": [3], "st": [1], "d": "float32"}, 2], "tuple": True}
    assert done.error is None
    assert log.log is not done and log.log.buffers == []
    assert log.finish(None).outputs is None


def test_outputs_that_cannot_be_logged_are_the_calls_error(files):
    log = _started(files)
    done = log.finish(object())
    assert done.error.startswith("an argument of type object") and done.outputs is None


def test_the_first_failure_is_kept_cut_to_500_characters_and_drops_the_events(files):
    x = torch.zeros(2)
    log = _started(files, [x])
    log.after_op(log.before_op(torch.ops.aten.neg.default, (x,), {}), torch.neg(x))
    assert len(log.log.events) == 1
    log.fail("y" * 600)
    log.fail("second")
    assert log.log.error == "y" * 500 and log.log.events == []
    done = log.finish(x)
    assert done.error == "y" * 500 and done.outputs is None  # outputs are not encoded after a failure


def test_the_payload_holds_every_part(files):
    x = torch.zeros(2)
    log = _started(files, [x])
    log.encode(torch.ones(1))
    payload = log.finish(x).to_payload()
    assert set(payload) == {"buffers", "events", "kernels", "blobs", "outputs", "error"}
    assert payload["events"] == [] and payload["kernels"] == {} and payload["error"] is None
    assert len(payload["blobs"]) == 1 and payload["outputs"]["T"] == 0


# -- ops ------------------------------------------------------------------------------------


def _op(log: LaunchLog, func, *args, **kwargs):
    event = log.before_op(func, args, kwargs)
    out = func(*args, **kwargs)
    log.after_op(event, out)
    return out


def test_an_op_is_logged_with_its_name_arguments_and_new_output(files):
    x = torch.arange(4, dtype=torch.float32)
    log = _started(files, [x])
    _op(log, torch.ops.aten.add.Tensor, x, x, alpha=2)
    _op(log, torch.ops.aten.neg.default, x[1:])
    assert log.log.events[0] == {
        "op": "aten::add.Tensor",
        "args": {"L": [{"T": 0, "o": 0, "s": [4], "st": [1], "d": "float32"}] * 2, "tuple": False},
        "kwargs": {"alpha": 2},
        "out": {"T": 1, "o": 0, "s": [4], "st": [1], "d": "float32"},
    }
    assert log.log.events[1]["op"] == "aten::neg.default"
    _op(log, torch.ops.prims.neg.default, x)  # another namespace keeps its own name
    assert log.log.events[2]["op"] == "prims::neg.default"
    assert log.log.events[1]["out"]["T"] == 2
    assert [b.kind for b in log.log.buffers] == ["input", "new", "new", "new"]


def test_an_in_place_op_writes_its_input_buffer(files):
    x = torch.zeros(4)
    log = _started(files, [x])
    _op(log, torch.ops.aten.add_.Tensor, x, 1.0)
    assert log.log.events[0]["out"]["T"] == 0 and len(log.log.buffers) == 1


def test_tuple_list_and_scalar_results(files):
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    log = _started(files, [x])
    _op(log, torch.ops.aten.max.dim, x, 1)
    _op(log, torch.ops.aten.split.Tensor, x, 1)
    _op(log, torch.ops.aten._local_scalar_dense.default, x[0, 0])
    values, indices = log.log.events[0]["out"]["L"]
    assert log.log.events[0]["out"]["tuple"] is True and (values["d"], indices["d"]) == ("float32", "int64")
    assert log.log.events[1]["out"]["tuple"] is False and len(log.log.events[1]["out"]["L"]) == 2
    assert log.log.events[2]["out"] == 0.0


def test_ops_inside_a_launch_or_after_a_failure_are_not_logged(files):
    x = torch.zeros(2)
    log = _started(files, [x])
    log.depth = 1  # inside a launch (the recorder's count): the interpreter's own ops
    assert log.before_op(torch.ops.aten.neg.default, (x,), {}) is None
    log.depth = 0
    pending = log.before_op(torch.ops.aten.neg.default, (x,), {})
    assert log.before_op(torch.ops.aten.neg.default, (object(),), {}) is None
    assert log.log.error.startswith("an argument of type object")
    log.after_op(pending, torch.neg(x))  # begun before the failure: still not logged
    log.after_op(None, x)
    assert log.log.events == []
    assert log.before_op(torch.ops.aten.neg.default, (x,), {}) is None


def test_an_unloggable_keyword_fails_the_call(files):
    log = _started(files, [torch.zeros(2)])
    assert log.before_op(torch.ops.aten.neg.default, (), {"weird": object()}) is None
    assert log.log.error.startswith("an argument of type object")


def test_an_unloggable_result_fails_the_call(files):
    x = torch.zeros(2)
    log = _started(files, [x])
    log.after_op(log.before_op(torch.ops.aten.neg.default, (x,), {}), object())
    assert log.log.error.startswith("an argument of type object") and log.log.events == []


def test_an_op_after_the_call_finished_is_not_logged(files):
    x = torch.zeros(2)
    log = _started(files, [x])
    pending = log.before_op(torch.ops.aten.neg.default, (x,), {})
    done = log.finish(None)
    log.after_op(pending, torch.neg(x))
    assert done.events == [] and log.log.events == []


def test_a_forward_is_bounded_to_20000_events(files):
    x = torch.zeros(1)
    log = _started(files, [x])
    for _ in range(MAX_EVENTS):
        log.after_op(log.before_op(torch.ops.aten.neg.default, (x,), {}), x)
    assert len(log.log.events) == MAX_EVENTS and log.log.error is None
    log.after_op(log.before_op(torch.ops.aten.neg.default, (x,), {}), x)
    assert log.log.error == "more than 20000 kernel launches and PyTorch ops in one forward"
    assert log.log.events == []


# -- launches -------------------------------------------------------------------------------


def _launch(log: LaunchLog, function, grid, *args, **kwargs):
    event = log.before_launch(function, args, kwargs)
    log.after_launch(event, grid)
    return event


class _Size(int):
    def __index__(self):  # never called: Triton reads an int subclass's own value
        return 1000


@pytest.mark.parametrize("grid, dims", [
    (4, [4]),
    ((2, 3), [2, 3]),
    ([1, 2, 3], [1, 2, 3]),
    ((np.int64(5),), [5]),
    # Triton reads each size through __index__: a bool and an int subclass are the ints they hold
    # (an int subclass's __index__ is never called; its value is what Triton's launcher reads).
    ((1, True), [1, 1]),
    ((_Size(4),), [4]),
])
def test_a_launch_is_logged_with_its_kernel_arguments_and_resolved_grid(files, grid, dims):
    x = torch.zeros(8)
    log = _started(files, [x])
    _launch(log, files.solution.kernel, grid, x, 8, BLOCK=4)
    assert log.log.events == [{"launch": _key("kernel"), "grid": dims,
                               "args": {"L": [{"T": 0, "o": 0, "s": [8], "st": [1], "d": "float32"}, 8],
                                        "tuple": False},
                               "kwargs": {"BLOCK": 4}}]
    assert type(log.log.events[0]["grid"][0]) is int
    assert set(log.log.kernels) == {_key("kernel"), _key("helper")}


@pytest.mark.parametrize("grid, reason", [
    ((), "was launched with a grid that is not 1 to 3 integers"),
    ((1, 1, 1, 1), "was launched with a grid that is not 1 to 3 integers"),
    (None, "was launched with a grid that is not 1 to 3 integers"),
    (True, "was launched with a grid that is not 1 to 3 integers"),
    (_Size(4), "was launched with a grid that is not 1 to 3 integers"),
    ((2.0,), ": a grid size of type float"),
    ((np.float64(4),), ": a grid size of type float64"),
    ((torch.zeros(2, dtype=torch.int64),), ": a grid size of type Tensor"),  # two elements: no __index__
])
def test_a_grid_that_is_not_one_to_three_integers_fails_the_call(files, grid, reason):
    log = _started(files, [torch.zeros(1)])
    _launch(log, files.solution.helper, grid, 1)
    assert log.log.error == f"kernel {_key('helper')}{' ' if reason.startswith('was') else ''}{reason}"
    assert log.log.events == []


def test_a_launch_of_something_else_fails_the_call(files):
    log = _started(files)
    assert log.before_launch(len, (), {}) is None
    assert log.log.error == "a launch of builtin_function_or_method, not a Triton JIT function"
    # Nothing more is logged once the call failed.
    assert log.before_launch(files.solution.helper, (1,), {}) is None
    log.after_launch({"launch": _key("helper"), "grid": None, "args": [], "kwargs": {}}, 1)
    assert log.log.events == []


def test_a_launch_with_an_unloggable_argument_fails_the_call(files):
    log = _started(files)
    assert log.before_launch(files.solution.helper, (object(),), {}) is None
    assert log.log.error.startswith("an argument of type object")
    log = _started(files)
    assert log.before_launch(files.solution.helper, (), {"BLOCK": object()}) is None
    assert log.log.error.startswith("an argument of type object")


def test_launch_wrappers_are_looked_through_six_deep_and_no_deeper(files):
    # Autotune over heuristics over jit is three; a loop of wrappers must end, refused.
    wrapped = files.solution.helper.fn
    for _ in range(6):
        wrapped = types.SimpleNamespace(fn=wrapped)
    log = _started(files)
    assert log.before_launch(wrapped, (1,), {})["launch"] == _key("helper")
    log = _started(files)
    assert log.before_launch(types.SimpleNamespace(fn=wrapped), (1,), {}) is None
    assert log.log.error == "a launch of SimpleNamespace, not a Triton JIT function"
    loop = types.SimpleNamespace()
    loop.fn = loop
    log = _started(files)
    assert log.before_launch(loop, (), {}) is None


def test_a_launch_after_the_call_finished_is_not_logged(files):
    log = _started(files, [torch.zeros(1)])
    event = log.before_launch(files.solution.helper, (1,), {})
    done = log.finish(None)
    log.after_launch(event, 1)
    assert done.events == [] and log.log.events == []
