"""The clean-room worker's own measurements: memory bounds, the timed replay and the profile.

Bounds (`cleanroom.bounds`): every access inside a buffer the launch got.

The pure checks run here on numpy addresses; the interpreter wiring runs in a subprocess with
``TRITON_INTERPRET=1`` (the clean room's own mode). End to end, through the jail:
``tests/adversarial/cases/semantic_{store,load}_past_end.py`` (runtime_error) against
``control_honest_padded_workspace.py`` and the other honest controls (ok).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from tritongym.evaluator.cleanroom.bounds import Buffer, LaunchBounds, OutOfBounds, tensor_buffers

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
    # Shared storages count once in a launch's bounds.
    assert len(LaunchBounds("k", found).buffers) == 3


_SCRIPT = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    from tritongym.evaluator.worker import interpreter_fixes
    from tritongym.evaluator.cleanroom import bounds
    from tritongym.evaluator.cleanroom.worker import _cause
    interpreter_fixes.install()
    bounds.install()
    bounds.install()  # idempotent: one wrapper

    @triton.jit
    def copy(x_ptr, out_ptr, n, LAST: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
        if LAST:
            tl.store(out_ptr + offs, x, mask=offs <= n)
        else:
            tl.store(out_ptr + offs, x, mask=offs < n)

    @triton.jit
    def count(out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.atomic_add(out_ptr + offs, 1.0, mask=offs < n)

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
        "honest": run(copy, [x, out, 10], (3,), LAST=False, BLOCK=4),
        "copied": out.tolist() == x.tolist(),
        "past_end": run(copy, [x, out, 10], (3,), LAST=True, BLOCK=4),
        "load_past_end": run(copy, [x, big, 16], (4,), LAST=False, BLOCK=4),
        "atomic_in": run(count, [out, 10], (1,), BLOCK=16),
        "atomic_out": run(count, [out, 11], (1,), BLOCK=16),
        # A load 8 bytes past x's end (harmless to read here; a store there would corrupt the heap).
        "outside_a_launch": (copy[(3,)](x, big, 12, LAST=False, BLOCK=4), "unchecked")[1],
    }))
''')


def test_the_interpreter_checks_loads_stores_and_atomics_inside_a_launch_only():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["honest"] == "ok" and result["copied"]
    assert result["past_end"].startswith("kernel `copy` stored 1 element out of bounds, the first at byte 40 of "
                                         "`out_ptr`, a 40-byte buffer")
    assert result["load_past_end"].startswith("kernel `copy` loaded 2 elements out of bounds, the first at byte 40 of "
                                       "`x_ptr`")  # program 2 reads x[10:12], past its end
    assert result["atomic_in"] == "ok"
    assert result["atomic_out"].startswith("kernel `count` updated 1 element out of bounds")
    assert result["outside_a_launch"] == "unchecked"


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
