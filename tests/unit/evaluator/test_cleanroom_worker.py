"""The clean-room worker's own measurements: memory bounds, the timed replay and the profile.

Bounds (`cleanroom.bounds`): every access inside a buffer the launch got.

The pure checks run here on numpy addresses; the interpreter wiring runs in a subprocess with
``TRITON_INTERPRET=1`` (the clean room's own mode). End to end, through the jail:
``tests/adversarial/cases/semantic_{store,load}_past_end.py`` (runtime_error) against
``control_honest_padded_workspace.py`` and the other honest controls (ok).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.evaluator.cleanroom import bounds
from tritongym.evaluator.cleanroom.bounds import Buffer, LaunchBounds, OutOfBounds, tensor_buffers
from tritongym.evaluator.cleanroom.worker import _cause

OUT = Buffer(1000, 1400, "out_ptr")  # 100 float32
X = Buffer(2000, 2400, "x_ptr")


def _bounds() -> LaunchBounds:
    return LaunchBounds("k", [X, OUT])


def _addresses(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def test_every_element_inside_a_buffer_passes_up_to_the_last_one():
    _bounds().check("stored", _addresses(1000, 1396, 2000, 2396), None, 4)


def test_one_element_past_the_end_is_named_by_argument_and_byte():
    with pytest.raises(OutOfBounds, match=r"kernel `k` stored 1 element out of bounds, the first at byte 400 "
                                          r"of `out_ptr`, a 400-byte buffer.*corrupts a neighbouring tensor"):
        _bounds().check("stored", _addresses(1000, 1400), None, 4)


def test_an_element_that_straddles_the_end_is_out():
    with pytest.raises(OutOfBounds, match="1 element"):
        _bounds().check("loaded", _addresses(1398), None, 4)
    _bounds().check("loaded", _addresses(1398), None, 2)  # a 2-byte element there fits


def test_masked_off_lanes_are_never_checked():
    lanes = _addresses(1396, 1400, 1404, 99)
    _bounds().check("stored", lanes, np.array([True, False, False, False]), 4)
    with pytest.raises(OutOfBounds, match="2 elements"):
        _bounds().check("stored", lanes, np.array([True, True, False, True]), 4)


def test_a_scalar_mask_is_broadcast_over_the_block():
    _bounds().check("stored", _addresses(1400, 1404), np.array(False), 4)
    with pytest.raises(OutOfBounds):
        _bounds().check("stored", _addresses(1400, 1404), np.array(True), 4)


def test_below_the_first_buffer_and_between_buffers_name_the_nearest():
    with pytest.raises(OutOfBounds, match="8 bytes before the start of `out_ptr`"):
        _bounds().check("loaded", _addresses(992), None, 4)
    with pytest.raises(OutOfBounds, match="at byte 404 of `out_ptr`"):  # nearer the end of out than x's start
        _bounds().check("loaded", _addresses(1404), None, 4)
    with pytest.raises(OutOfBounds, match="4 bytes before the start of `x_ptr`"):
        _bounds().check("loaded", _addresses(1996), None, 4)
    with pytest.raises(OutOfBounds, match="loaded.*reads memory the kernel was not given"):
        _bounds().check("loaded", _addresses(1996), None, 4)


def test_a_pointer_moved_below_zero_wraps_and_is_out():
    with pytest.raises(OutOfBounds):
        _bounds().check("stored", _addresses(2**64 - 4), None, 4)
    with pytest.raises(OutOfBounds):
        _bounds().check("stored", _addresses(2**63 - 2), None, 4)


def test_a_launch_without_buffers_allows_no_access():
    with pytest.raises(OutOfBounds, match="in no buffer"):
        LaunchBounds("k", []).check("loaded", _addresses(1000), None, 4)
    LaunchBounds("k", []).check("loaded", _addresses(1000), np.array([False]), 4)
    # An empty storage is no buffer at all.
    with pytest.raises(OutOfBounds):
        LaunchBounds("k", [Buffer(1000, 1000, "empty")]).check("loaded", _addresses(1000), None, 1)


def test_the_message_says_what_went_wrong_where_and_how_to_fix_it():
    with pytest.raises(OutOfBounds) as stored:
        _bounds().check("stored", _addresses(1400), None, 4)
    assert str(stored.value) == (
        "kernel `k` stored 1 element out of bounds, the first at byte 400 of `out_ptr`, a 400-byte buffer. On a GPU "
        "this is an illegal memory access, or silently corrupts a neighbouring tensor; mask every load and store "
        "with the buffer's size (e.g. `mask=offs < n_elements`)")
    with pytest.raises(OutOfBounds) as loaded:
        LaunchBounds("k", []).check("loaded", _addresses(1000), None, 4)
    assert str(loaded.value) == (
        "kernel `k` loaded 1 element out of bounds, the first in no buffer (the launch was given none). On a GPU "
        "this reads memory the kernel was not given: an illegal memory access, or garbage; mask every load and "
        "store with the buffer's size (e.g. `mask=offs < n_elements`)")


def test_the_nearest_buffer_is_measured_from_the_elements_far_end():
    # 1404..1408 ends 8 bytes past `out_ptr` (ending at 1400) and starts 6 bytes before `next` (at 1410).
    given = LaunchBounds("k", [OUT, Buffer(1410, 1500, "next")])
    with pytest.raises(OutOfBounds, match="6 bytes before the start of `next`"):
        given.check("loaded", _addresses(1404), None, 4)
    with pytest.raises(OutOfBounds, match="at byte 402 of `out_ptr`"):  # 1402..1404: 4 past the end, 8 before next
        given.check("loaded", _addresses(1402), None, 2)


def test_an_empty_storage_at_a_buffers_address_hides_nothing():
    # A zero-element tensor can share its address with a real buffer; it must not stand in for it.
    for order in ([OUT, Buffer(1000, 1000, "empty")], [Buffer(1000, 1000, "empty"), OUT]):
        LaunchBounds("k", order).check("stored", _addresses(1000, 1396), None, 4)


def test_an_integer_mask_means_its_truth_values_and_a_row_mask_covers_every_row():
    lanes = _addresses(1396, 1400)
    _bounds().check("stored", lanes, np.array([1, 0], dtype=np.uint8), 4)
    with pytest.raises(OutOfBounds, match="1 element"):
        _bounds().check("stored", lanes, np.array([0, 1], dtype=np.int32), 4)
    block = np.array([[1000, 1400], [1004, 1404]], dtype=np.uint64)
    _bounds().check("stored", block, np.array([[True, False]]), 4)  # broadcast over both rows
    with pytest.raises(OutOfBounds, match="2 elements"):
        _bounds().check("stored", block, np.array([[False, True]]), 4)


def _lane_by_lane(buffers: list[Buffer], lanes: list[int], itemsize: int) -> int:
    """How many lanes lie outside every buffer: the rule `check` implements, one lane at a time."""
    return sum(not any(b.start <= lane and lane + itemsize <= b.end for b in buffers if b.end > b.start)
               for lane in lanes)


@settings(max_examples=300, deadline=None)
@given(sizes=st.lists(st.integers(0, 64), min_size=0, max_size=4), gaps=st.lists(st.integers(0, 24), min_size=4,
       max_size=4), offsets=st.lists(st.integers(-16, 360), min_size=1, max_size=12),
       itemsize=st.sampled_from([1, 2, 4, 8]), mask_bits=st.lists(st.booleans(), min_size=12, max_size=12))
def test_the_one_buffer_shortcut_decides_as_the_lane_by_lane_rule(sizes, gaps, offsets, itemsize, mask_bits):
    # `check` first asks whether the lowest and the highest active lane fit in one buffer and falls back
    # to a search per lane: the verdict and the count it reports must be the rule's, whichever path ran.
    buffers, start = [], 1000
    for position, (size, gap) in enumerate(zip(sizes, gaps, strict=False)):
        buffers.append(Buffer(start + gap, start + gap + size, f"b{position}"))
        start += gap + size
    lanes = [1000 + offset for offset in offsets]
    mask = np.array(mask_bits[:len(lanes)])
    active = [lane for lane, on in zip(lanes, mask, strict=True) if on]
    outside = _lane_by_lane(buffers, active, itemsize)
    given = LaunchBounds("k", buffers)
    if outside == 0:
        given.check("loaded", _addresses(*lanes), mask, itemsize)
        return
    with pytest.raises(OutOfBounds, match=f"loaded {outside} element{'s' if outside != 1 else ''} out of bounds"):
        given.check("loaded", _addresses(*lanes), mask, itemsize)


def test_tensor_buffers_are_whole_storages_named_by_parameter():
    base = torch.zeros(64)
    view = base[8:16]
    pair = (torch.zeros(4), torch.zeros(2, dtype=torch.float64))
    found = tensor_buffers(["x_ptr", "pair", "n"], [view, pair, 5], {"out_ptr": base})
    start = base.untyped_storage().data_ptr()
    assert [(b.name, b.end - b.start) for b in found] == [("x_ptr", 256), ("pair[0]", 16), ("pair[1]", 16),
                                                          ("out_ptr", 256)]
    assert found[0].start == start and found[-1].start == start
    assert tensor_buffers([], [torch.zeros(1)], {})[0].name == "argument 0"
    # A TMA descriptor's tensor is named as its base.
    from triton.tools.tensor_descriptor import TensorDescriptor

    described = tensor_buffers(["desc"], [TensorDescriptor.from_tensor(torch.zeros(8, 8), [4, 4])], {})
    assert [(b.name, b.end - b.start) for b in described] == [("desc.base", 256)]
    # Shared storages count once in a launch's bounds.
    assert len(LaunchBounds("k", found).buffers) == 3


# Kernels shared by the subprocess script (as text: it runs in a fresh interpreter) and the tests in this process.
def _copy(x_ptr, out_ptr, n, LAST: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    if LAST:
        tl.store(out_ptr + offs, x, mask=offs <= n)
    else:
        tl.store(out_ptr + offs, x, mask=offs < n)


def _count(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.atomic_add(out_ptr + offs, 1.0, mask=offs < n)


def _swap(out_ptr, index):
    tl.atomic_cas(out_ptr + index, 0.0, 1.0)


def _wide_read(x_ptr, out_ptr, byte):
    # An 8-byte element read at a byte offset of a float32 buffer: inside only when byte + 8 <= its size.
    wide = (x_ptr.to(tl.pointer_type(tl.int8)) + byte).to(tl.pointer_type(tl.float64))
    tl.store(out_ptr, tl.load(wide))


def _jitted(*functions) -> str:
    return "".join("@triton.jit\n" + inspect.getsource(function) + "\n" for function in functions)


_SCRIPT = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    from tritongym.evaluator.worker import interpreter_fixes
    from tritongym.evaluator.cleanroom import bounds
    from tritongym.evaluator.cleanroom.worker import _cause
    interpreter_fixes.install()
    bounds.install()
    bounds.install()  # idempotent: one wrapper
''') + _jitted(_copy, _count) + textwrap.dedent('''
    def run(kernel, args, grid, **kwargs):
        names = list(kernel.arg_names)
        try:
            with bounds.launch(kernel.fn.__name__, bounds.tensor_buffers(names, args, kwargs)):
                kernel[grid](*args, **kwargs)
        except Exception as exc:
            found = _cause(exc, bounds.OutOfBounds)
            return str(found) if found is not None else "other: " + repr(exc)
        return "ok"

    x = torch.arange(10, dtype=torch.float32)
    out = torch.zeros(10)
    big = torch.zeros(16)
    print(json.dumps({
        "honest": run(_copy, [x, out, 10], (3,), LAST=False, BLOCK=4),
        "copied": out.tolist() == x.tolist(),
        "past_end": run(_copy, [x, out, 10], (3,), LAST=True, BLOCK=4),
        "load_past_end": run(_copy, [x, big, 16], (4,), LAST=False, BLOCK=4),
        "atomic_in": run(_count, [out, 10], (1,), BLOCK=16),
        "atomic_out": run(_count, [out, 11], (1,), BLOCK=16),
        # A load 8 bytes past x's end (harmless to read here; a store there would corrupt the heap).
        "outside_a_launch": (_copy[(3,)](x, big, 12, LAST=False, BLOCK=4), "unchecked")[1],
    }))
''')


def test_the_interpreter_checks_loads_stores_and_atomics_inside_a_launch_only():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["honest"] == "ok" and result["copied"]
    assert result["past_end"].startswith("kernel `_copy` stored 1 element out of bounds, the first at byte 40 of "
                                         "`out_ptr`, a 40-byte buffer")
    assert result["load_past_end"].startswith("kernel `_copy` loaded 2 elements out of bounds, the first at byte 40 of "
                                       "`x_ptr`")  # program 2 reads x[10:12], past its end
    assert result["atomic_in"] == "ok"
    assert result["atomic_out"].startswith("kernel `_count` updated 1 element out of bounds")
    assert result["outside_a_launch"] == "unchecked"


# -- the same wiring in this process, on a subclass of Triton's builder --------------------------------
# The subprocess test above checks Triton's own class as the clean room wraps it; these drive `install`
# on a fresh subclass per test (Triton's class stays untouched) so each of its entry points, argument
# positions and element sizes is pinned here.


@pytest.fixture()
def checked(monkeypatch):
    from triton.runtime import interpreter

    class Checked(interpreter.InterpreterBuilder):
        pass

    bounds.install(Checked)
    bounds.install(Checked)  # idempotent: one wrapper per entry point
    monkeypatch.setattr(interpreter.interpreter_builder, "__class__", Checked)
    checks: list[str] = []
    original = LaunchBounds.check

    def counted(self, access, addresses, mask, itemsize):
        checks.append(access)
        return original(self, access, addresses, mask, itemsize)

    monkeypatch.setattr(LaunchBounds, "check", counted)
    return checks


def _launch(function, args, grid, **kwargs) -> str:
    from triton.runtime.interpreter import InterpretedFunction

    kernel = InterpretedFunction(function)
    try:
        with bounds.launch(function.__name__, tensor_buffers(list(kernel.arg_names), args, kwargs)):
            kernel[grid](*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the interpreter wraps what a builder method raises
        found = _cause(exc, OutOfBounds)
        return str(found) if found is not None else f"other: {exc!r}"
    return "ok"


def test_installed_checks_pass_an_honest_launch_once_per_access_with_masked_lanes_past_the_end(checked):
    x, out = torch.arange(10, dtype=torch.float32), torch.zeros(10)
    assert _launch(_copy, [x, out, 10], (3,), LAST=False, BLOCK=4) == "ok"  # lanes 10 and 11 masked off
    assert torch.equal(out, x)
    assert checked == ["loaded", "stored"] * 3  # one check per access of each of 3 programs, never two


def test_installed_checks_catch_a_store_and_a_load_past_the_end(checked):
    x, out, big = torch.arange(10, dtype=torch.float32), torch.zeros(10), torch.zeros(16)
    assert _launch(_copy, [x, out, 10], (3,), LAST=True, BLOCK=4).startswith(
        "kernel `_copy` stored 1 element out of bounds, the first at byte 40 of `out_ptr`, a 40-byte buffer")
    assert _launch(_copy, [x, big, 16], (4,), LAST=False, BLOCK=4).startswith(
        "kernel `_copy` loaded 2 elements out of bounds, the first at byte 40 of `x_ptr`")


def test_installed_checks_catch_atomics_with_and_without_a_mask(checked):
    out = torch.zeros(10)
    assert _launch(_count, [out, 10], (1,), BLOCK=16) == "ok"
    assert out.tolist() == [1.0] * 10
    assert _launch(_count, [out, 11], (1,), BLOCK=16).startswith("kernel `_count` updated 1 element out of bounds")
    assert _launch(_swap, [out, 9], (1,)) == "ok"
    assert _launch(_swap, [out, 10], (1,)).startswith("kernel `_swap` updated 1 element out of bounds, the first "
                                                      "at byte 40 of `out_ptr`")


def test_installed_checks_size_each_access_by_its_element_type(checked):
    x, out = torch.zeros(10), torch.zeros(1, dtype=torch.float64)
    assert _launch(_wide_read, [x, out, 32], (1,)) == "ok"  # bytes 32..40 of 40
    assert _launch(_wide_read, [x, out, 33], (1,)).startswith(  # bytes 33..41: one byte past the end
        "kernel `_wide_read` loaded 1 element out of bounds, the first at byte 33 of `x_ptr`")
    small = torch.zeros(5, dtype=torch.int8)
    assert _launch(_copy, [small, small, 5], (1,), LAST=False, BLOCK=8) == "ok"  # byte 4 of 5 is the last one
    assert _launch(_copy, [small, small, 5], (1,), LAST=True, BLOCK=8).startswith(
        "kernel `_copy` stored 1 element out of bounds, the first at byte 5 of `out_ptr`, a 5-byte buffer")


def _handle(values, dtype):
    from triton.runtime.interpreter import TensorHandle

    return TensorHandle(np.array(values, dtype=bool if dtype is tl.int1 else np.uint64), dtype)


def test_installed_checks_read_pointers_and_masks_passed_by_keyword(checked):
    from triton.runtime.interpreter import interpreter_builder as builder

    # Three lanes, the middle one masked off: a check that lost the mask would count two lanes out.
    pointers = _handle([1000, 1400, 1404], tl.pointer_type(tl.float32))
    mask = _handle([True, False, True], tl.int1)
    with bounds.launch("k", [OUT]):
        # Each check raises before Triton's own method would dereference anything.
        with pytest.raises(OutOfBounds, match="stored 1 element"):
            builder.create_masked_store(ptrs=pointers, value=None, mask=mask, cache_policy=None)
        with pytest.raises(OutOfBounds, match="loaded 1 element"):
            builder.create_masked_load(ptrs=pointers, mask=mask, other=None, cache_policy=None, is_volatile=False)
        with pytest.raises(OutOfBounds, match="updated 1 element"):
            builder.create_atomic_rmw(rmwOp=None, ptr=pointers, val=None, mask=mask, sem=None, scope=None)
        with pytest.raises(OutOfBounds, match="updated 2 elements"):  # compare-and-swap has no mask
            builder.create_atomic_cas(ptr=pointers, cmp=None, val=None, sem=None, scope=None)
    assert checked == ["stored", "loaded", "updated", "updated"]


def test_a_checked_access_passes_its_keyword_arguments_on_to_triton(checked):
    from triton.runtime.interpreter import interpreter_builder as builder

    x = torch.arange(4, dtype=torch.float32)
    start = x.data_ptr()
    pointers = _handle([start + 4 * i for i in range(4)], tl.pointer_type(tl.float32))
    # The cache keywords differ between Tritons (3.9: cache_policy; 3.6: cache_modifier, eviction_policy).
    from triton.runtime import interpreter

    source = inspect.getsource(interpreter)
    cache = {"cache_policy": None} if "def create_masked_load(self, ptrs, mask, other, cache_policy" in source \
        else {"cache_modifier": None, "eviction_policy": None}
    with bounds.launch("k", tensor_buffers(["x_ptr"], [x], {})):
        loaded = builder.create_masked_load(pointers, _handle([True] * 4, tl.int1), other=None, **cache,
                                            is_volatile=False)
    assert loaded.data.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_install_wraps_tritons_builder_by_default_and_skips_entry_points_it_lacks(monkeypatch):
    from triton.runtime import interpreter

    class Standing(interpreter.InterpreterBuilder):  # stands in for Triton's class, which stays untouched
        pass

    monkeypatch.setattr(interpreter, "InterpreterBuilder", Standing)
    bounds.install()
    assert "create_masked_load" in vars(Standing) and Standing._tritongym_bounds

    class Older:  # another Triton: only some of the entry points exist
        def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
            return "loaded"

    bounds.install(Older)
    assert Older().create_masked_load(_handle([1000], tl.pointer_type(tl.float32)), None, None, None, False) == "loaded"
    assert not hasattr(Older, "create_masked_store") and Older.create_masked_load.__name__ == "create_masked_load"


def test_accesses_outside_a_launch_are_not_checked_and_launches_nest(checked):
    x, big = torch.arange(10, dtype=torch.float32), torch.zeros(16)
    from triton.runtime.interpreter import InterpretedFunction

    InterpretedFunction(_copy)[(3,)](x, big, 12, LAST=False, BLOCK=4)  # reads 8 bytes past x: not checked
    assert checked == []
    assert bounds._active is None
    with bounds.launch("outer", [OUT]):
        outer = bounds._active
        with bounds.launch("inner", [X]):
            assert bounds._active is not outer and bounds._active.kernel == "inner"
        assert bounds._active is outer
    assert bounds._active is None


# -- the timed replay (`cleanroom.worker.time_replay`) ----------------------------------------------

def _relu_log() -> dict:
    ref = {"d": "float32", "s": [4], "st": [1], "o": 0}
    return {"buffers": [{"kind": "input", "index": 0, "nbytes": 16}, {"kind": "new", "nbytes": 16}],
            "events": [{"op": "aten::relu.default", "args": {"L": [{"T": 0, **ref}]}, "out": {"T": 1, **ref}}],
            "outputs": {"T": 1, **ref}}


def test_a_timed_replay_runs_the_log_afresh_each_repetition():
    from tritongym.evaluator.cleanroom.kernels import KernelBuilder
    from tritongym.evaluator.cleanroom.worker import time_replay

    inputs = [torch.tensor([-1.0, 2.0, -3.0, 4.0])]
    timed = time_replay(torch.device("cpu"), KernelBuilder(""), [], {"log": _relu_log(), "inputs": inputs,
                                                                     "reps": 5, "warmup_ms": 0.0})
    assert len(timed["ms"]) == 5 and all(ms > 0 for ms in timed["ms"])
    assert timed["method"].startswith("clean-room replay of the logged launches and ops; host clock")
    assert inputs[0].tolist() == [-1.0, 2.0, -3.0, 4.0]  # the parent's copy is never the replay's buffer


@pytest.mark.parametrize("reps, warmup", [(0, 1.0), (-3, 1.0), (True, 1.0), (2.0, 1.0), (3, -1.0),
                                          (3, float("inf")), (3, float("nan")), (3, "1"), (3, True)])
def test_a_time_request_out_of_bounds_is_refused(reps, warmup):
    from tritongym.evaluator.cleanroom.kernels import KernelBuilder
    from tritongym.evaluator.cleanroom.worker import Diverged, time_replay

    with pytest.raises(Diverged, match="a positive number of repetitions and a finite warm-up"):
        time_replay(torch.device("cpu"), KernelBuilder(""), [], {"log": _relu_log(), "inputs": [torch.zeros(4)],
                                                                 "reps": reps, "warmup_ms": warmup})


@pytest.mark.parametrize("calls", [0, -1, True, 2.0, None])
def test_a_profile_request_needs_positive_calls(calls):
    from tritongym.evaluator.cleanroom.kernels import KernelBuilder
    from tritongym.evaluator.cleanroom.worker import Diverged, profile_replay

    with pytest.raises(Diverged, match="malformed profile request"):
        profile_replay(torch.device("cpu"), KernelBuilder(""), [], {"log": _relu_log(), "inputs": [torch.zeros(4)],
                                                                    "calls": calls})


def test_profiling_is_refused_without_a_gpu():
    """The coverage profile is GPU work (CUDA activities); on the CPU tier there is none to read."""
    from tritongym.evaluator.cleanroom.kernels import KernelBuilder
    from tritongym.evaluator.cleanroom.worker import Diverged, profile_replay

    with pytest.raises(Diverged, match="needs a CUDA device"):
        profile_replay(torch.device("cpu"), KernelBuilder(""), [], {"log": _relu_log(), "inputs": [torch.zeros(4)],
                                                                    "calls": 3})


# -- fresh allocations are poisoned in checked replays (`optrace.poison_uninitialised`) -------------

def _empty_log(dtype: str, nbytes: int, count: int) -> dict:
    """A forward that returns ``torch.empty_like(x)`` unwritten: its output is what the allocator gave."""
    ref = {"d": dtype, "s": [count], "st": [1], "o": 0}
    return {"buffers": [{"kind": "input", "index": 0, "nbytes": nbytes}, {"kind": "new", "nbytes": nbytes}],
            "events": [{"op": "aten::empty_like.default", "args": {"L": [{"T": 0, **ref}]}, "out": {"T": 1, **ref}}],
            "outputs": {"T": 1, **ref}}


class _Channel:
    """The clean room's side of the parent's channel: requests queued, replies kept."""

    def __init__(self, *requests: tuple[str, dict]) -> None:
        from tritongym.evaluator.common.channel import Message

        self.requests = [Message(kind, payload) for kind, payload in (*requests, ("exit", {}))]
        self.replies: list[tuple[str, dict]] = []

    def recv(self):
        return self.requests.pop(0)

    def send(self, kind: str, payload: dict) -> None:
        self.replies.append((kind, payload))


def _leftovers(nbytes: int, value: float) -> None:
    """Freed blocks of the size a replay is about to ask for, holding `value` (what malloc reuses)."""
    for _ in range(8):
        block = torch.full((nbytes // 4,), value, dtype=torch.float32)
        del block


@pytest.mark.parametrize("dtype, count, expect", [
    (torch.float32, 256, "nan"), (torch.float16, 256, "nan"), (torch.bfloat16, 256, "nan"),
    (torch.float64, 64, "nan"), (torch.int32, 256, -1), (torch.int64, 64, -1), (torch.int8, 256, -1),
    (torch.uint8, 256, 255), (torch.bool, 256, True),
])
def test_a_checked_replay_fills_fresh_allocations_so_no_leftover_reaches_an_output(dtype, count, expect):
    """An output element no event writes reads NaN (or -1, 255, True) in every replay, whatever the
    allocator held: the outputs are a function of the log and the inputs, never of this process's
    allocation history (a freed tensor's correct values handed back to `empty_like`)."""
    from tritongym.evaluator.cleanroom.worker import serve

    x = torch.zeros(count, dtype=dtype)
    nbytes = x.untyped_storage().nbytes()
    log = _empty_log(str(dtype).removeprefix("torch."), nbytes, count)
    channel = _Channel(("replay", {"inputs": [x], "log": log}), ("replay", {"inputs": [x], "log": log}))
    _leftovers(nbytes, 7.0)
    serve(channel, "", torch.device("cpu"))
    assert [kind for kind, _ in channel.replies] == ["ready", "replayed", "replayed"]
    for _, reply in channel.replies[1:]:
        out = reply["outputs"]
        assert out.dtype == dtype and out.shape == (count,)
        if expect == "nan":
            assert out.isnan().all()
        else:
            assert (out == expect).all(), out[:8]
