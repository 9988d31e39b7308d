"""Every reply of a worker's timing session and every default of its timer, field by field.

The GPU timing protocol decides the speed term of the reward, and no GPU runs here: these drive
`TimingSession` and `RepTimer` with the recording fake device of test_timing.py and assert each
field the parent reads (mutation testing of ``worker/timing.py`` found replies whose fields no
test looked at, and a CUDA set-up nothing exercised on a CPU).
"""

from __future__ import annotations

import time
import types

import pytest
import torch
from tests.unit.evaluator.test_timing import FakeDevice, RecordingChannel, _module, _session, cuda_timer

from tritongym.evaluator.worker import timing
from tritongym.evaluator.worker.timing import RepTimer, TimingSession


@pytest.fixture()
def sends(monkeypatch):
    monkeypatch.setattr(timing, "_send", lambda channel, kind, payload: channel.sent.append((kind, payload)))


def test_time_start_reports_every_field_the_parent_reads(sends):
    fake = FakeDevice()

    def slow_variant():
        def forward(*inputs):
            time.sleep(0.003)  # 3 ms of host time per call: the slowest variant's dispatch is reported
            return "slow"
        return forward

    observations = iter([{"threads": 5}])
    session, channel = _session(fake, observe=lambda: next(observations), variants={"compile": slow_variant})
    session.extra_ready = lambda: {"fp32": "ieee"}
    assert session.handle("time_start", {"warmup_ms": 0.0, "variants": ["compile"]}) is True
    kind, ready = channel.sent[-1]
    assert kind == "time_ready"
    assert set(ready) == {"variants", "method", "device_name", "warmup_calls", "tail_bound_ms", "dispatch_ms", "fp32"}
    assert ready["variants"] == {"compile": None} and ready["fp32"] == "ieee" and ready["device_name"] == "cpu"
    assert ready["warmup_calls"] == 3  # the minimum: a 0 ms budget
    assert ready["method"] == session.timer.method and "cuda-events" in ready["method"]
    assert ready["tail_bound_ms"] == session.timer.tail_bound_ms >= timing.MIN_TAIL_BOUND_MS
    assert ready["dispatch_ms"] >= 3.0  # the larger of the variants' host time per call
    assert session.threads_before == 5


def test_a_rep_times_the_variant_asked_for_and_keeps_its_output(sends):
    fake = FakeDevice(flush_ms=0.1, call_ms=0.02, dispatch_ms=0.01)
    session, channel = _session(fake, variants={"compile": lambda: (lambda *inputs: "compiled")})
    session.handle("time_start", {"warmup_ms": 0.0, "variants": ["compile"]})
    session.handle("rep", {"seed": 5})
    kind, done = channel.sent[-1]
    assert kind == "rep_done" and set(done) == {"ms", "host_ms", "tail_ms", "charged"}
    assert done["ms"] == pytest.approx(0.02) and done["charged"] is False  # the dispatch hid behind the flush
    assert done["tail_ms"] == pytest.approx(fake.wakeup_ms) and done["host_ms"] > 0
    assert session.last_output == "out"
    session.handle("rep", {"seed": 5, "variant": "compile"})
    assert session.last_output == "compiled"
    with pytest.raises(KeyError):
        session.handle("rep", {"seed": 5, "variant": "missing"})


def test_keep_sends_the_transformed_output_once_and_drop_discards_it(sends):
    session, channel = _session(FakeDevice())
    session.output_transform = lambda value: f"encoded {value}"
    session.handle("time_start", {"warmup_ms": 0.0})
    session.handle("rep", {"seed": 1})
    session.handle("keep", {})
    assert channel.sent[-1] == ("output", {"outputs": "encoded out"}) and session.last_output is None
    session.handle("rep", {"seed": 2})
    session.handle("drop", {})
    assert channel.sent[-1] == ("dropped", {}) and session.last_output is None


def test_observe_merges_what_keep_saw_and_reports_the_latest_refusals(sends):
    seen = iter([
        {"threads": 2},  # at time_start
        {"threads": 6, "tampered": ["time.perf_counter"], "refused": ["old"]},  # on keep
        {"threads": 4, "tampered": ["time.perf_counter", "torch.cuda.Event"], "refused": ["os.fork"]},
        {"threads": 3},
    ])
    session, channel = _session(FakeDevice(), observe=lambda: next(seen))
    session.handle("time_start", {"warmup_ms": 0.0})
    session.handle("rep", {"seed": 1})
    session.handle("keep", {})
    session.handle("observe", {})
    assert channel.sent[-1] == ("observed", {"threads_before": 2, "threads_after": 6,
                                             "tampered": ["time.perf_counter", "torch.cuda.Event"],
                                             "refused": ["os.fork"]})
    session.handle("observe", {})  # the next window starts where the last ended
    assert channel.sent[-1] == ("observed", {"threads_before": 4, "threads_after": 3, "tampered": [],
                                             "refused": []})


def test_observe_without_an_observer_reports_nothing_found(sends):
    session, channel = _session(FakeDevice())
    session.handle("observe", {})
    assert channel.sent[-1] == ("observed", {"threads_before": 0, "threads_after": 0, "tampered": [],
                                             "refused": []})


def test_bandwidth_is_what_was_measured_at_set_up_or_zero_on_a_cpu(sends):
    session, channel = _session(FakeDevice())
    session.handle("bandwidth", {})
    assert channel.sent[-1] == ("bandwidth", {"bytes_per_s": 0.0, "flops_per_s": 0.0})
    session.measured = {"bytes_per_s": 3.3e12, "flops_per_s": 9.9e14}
    session.handle("bandwidth", {})
    assert channel.sent[-1] == ("bandwidth", {"bytes_per_s": 3.3e12, "flops_per_s": 9.9e14})


def test_a_request_that_is_not_about_timing_is_left_to_the_worker(sends):
    session, channel = _session(FakeDevice())
    assert session.handle("call", {"inputs": []}) is False and channel.sent == []


def test_a_session_builds_its_own_timer_for_its_device():
    module = _module("import torch\ndef get_inputs():\n    return [torch.randn(2)]\n")
    session = TimingSession(RecordingChannel(), lambda x: x, module, torch.device("cpu"))
    assert isinstance(session.timer, RepTimer) and session.timer.cuda is False
    assert session.models == {"eager": session.model} and session.pending == [] and session.last_output is None
    assert session._threads() == 0
    assert len(session._make_inputs()) == 1


def test_a_cpu_timer_has_no_clock_no_flush_and_the_default_bounds():
    timer = RepTimer(torch.device("cpu"))
    assert (timer.cuda, timer.clock, timer.flush_buffer) == (False, None, None)
    assert timer.tail_bound_ms == timing.MIN_TAIL_BOUND_MS and timer.hold_cycles == 0
    assert timer.method.startswith("host clock on CPU")
    assert timer.calibrate() == 0.0 and timer.hide_dispatch(5.0) == 0.0
    assert timer.dispatch_ms(lambda: None, lambda: []) == 0.0


def test_a_cpu_rep_is_the_host_clock_around_a_call_without_autograd():
    ticks = iter([10.0, 10.25])
    grad_inside: list[bool] = []
    def add(a, b):
        grad_inside.append(torch.is_grad_enabled())
        return a + b

    timed = RepTimer(torch.device("cpu")).time_call(add, [2, 3], _perf_counter=lambda: next(ticks))
    assert (timed.ms, timed.host_ms, timed.tail_ms, timed.charged, timed.output) == (250.0, 250.0, 0.0, False, 5)
    assert grad_inside == [False]


def test_a_gpu_timer_sizes_its_flush_from_the_l2_and_makes_the_real_clock(monkeypatch):
    made: dict = {}
    properties = types.SimpleNamespace(L2_cache_size=200 << 20)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: made.setdefault("props", device) and properties)
    monkeypatch.setattr(torch, "empty",
                        lambda n, dtype, device: made.update(n=n, dtype=dtype, device=device) or "buffer")
    # torch.empty takes a whole number of elements
    monkeypatch.setattr(timing, "cuda_clock", lambda device: made.setdefault("clock", device) and "clock")
    device = torch.device("cuda", 1)
    timer = RepTimer(device)
    assert timer.clock == "clock" and made["clock"] == device and made["props"] == device
    assert timer.flush_buffer == "buffer" and made["dtype"] == torch.int32 and made["device"] == device
    assert made["n"] == 2 * (200 << 20) // 4 and type(made["n"]) is int  # twice the L2, in int32 elements
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: types.SimpleNamespace())
    RepTimer(device)
    assert made["n"] == timing.MIN_FLUSH_BYTES // 4  # no L2 figure: the minimum
    given = RepTimer(device, clock="mine", flush_buffer="flush")
    assert (given.clock, given.flush_buffer) == ("mine", "flush")


def test_the_real_clock_binds_each_cuda_call_to_its_device():
    calls: list = []
    clock = timing.cuda_clock(torch.device("cuda", 3), _sync=lambda device: calls.append(("sync", device)),
                              _event=lambda **kwargs: calls.append(("event", kwargs)) or "event",
                              _record="record", _wait="wait", _elapsed="elapsed", _zero_="zero", _hold_="hold")
    clock.synchronize()
    assert clock.new_event() == "event"
    assert calls == [("sync", torch.device("cuda", 3)), ("event", {"enable_timing": True})]
    assert (clock.record, clock.wait, clock.elapsed_ms, clock.zero_, clock.hold) == \
        ("record", "wait", "elapsed", "zero", "hold")


def test_warm_up_makes_at_least_the_minimum_calls_and_synchronizes_after_each():
    fake = FakeDevice()
    timer = cuda_timer(fake)
    made: list[int] = []
    assert timer.warm_up(fake.model(), lambda: made.append(1) or [], budget_ms=0.0, min_calls=4) == 4
    assert len(made) == 4 and fake.calls == ["call", "synchronize"] * 4
    cpu = RepTimer(torch.device("cpu"))
    assert cpu.warm_up(lambda: None, lambda: [], budget_ms=1e9, min_calls=1) == 10_000  # the cap


def test_a_failed_or_unknown_variant_does_not_stop_the_next_one_and_constructor_hooks_are_kept(sends):
    fake = FakeDevice()
    channel = RecordingChannel()
    module = _module("import torch\ndef get_inputs():\n    return [torch.randn(3)]\n")
    session = TimingSession(channel, fake.model(), module, torch.device("cpu"), timer=cuda_timer(fake),
                            variants={"compile": lambda: fake.model()}, extra_ready=lambda: {"note": 1},
                            measured={"bytes_per_s": 1.0, "flops_per_s": 2.0}, observe=lambda: {})
    session.handle("time_start", {"warmup_ms": 0.0, "variants": ["unknown", "compile"]})
    ready = channel.sent[-1][1]
    assert ready["variants"] == {"unknown": "not available in this worker", "compile": None} and ready["note"] == 1
    assert session.threads_before == 0  # an observation without a thread count
    session.handle("bandwidth", {})
    assert channel.sent[-1] == ("bandwidth", {"bytes_per_s": 1.0, "flops_per_s": 2.0})
    session.handle("observe", {})
    assert session.threads_before == 0


def test_a_gpu_session_measures_bandwidth_when_it_was_not_measured_at_set_up(sends, monkeypatch):
    fake = FakeDevice()
    asked: list = []
    monkeypatch.setattr(timing, "measure_copy_bandwidth", lambda device: asked.append(device) or 3.0e12)
    monkeypatch.setattr(timing, "measure_matmul_rate", lambda device: asked.append(device) or 5.0e14)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: f"GPU {device}")
    module = _module("def get_inputs():\n    return []\n")  # nothing to allocate on a device this machine lacks
    channel = RecordingChannel()
    session = TimingSession(channel, fake.model(), module, torch.device("cuda"), timer=cuda_timer(fake))
    session.handle("bandwidth", {})
    assert channel.sent[-1] == ("bandwidth", {"bytes_per_s": 3.0e12, "flops_per_s": 5.0e14})
    assert asked == [torch.device("cuda")] * 2
    session.handle("time_start", {"warmup_ms": 0.0})
    assert channel.sent[-1][1]["device_name"] == "GPU cuda"
    session.measured = {"bytes_per_s": 1.0, "flops_per_s": 1.0}
    session.handle("bandwidth", {})
    assert channel.sent[-1] == ("bandwidth", {"bytes_per_s": 1.0, "flops_per_s": 1.0})


def test_a_gpu_rep_flushes_the_timers_buffer_and_reports_the_host_clock_in_ms():
    import dataclasses

    fake = FakeDevice()
    flushed: list = []
    clock = fake.clock()
    clock = dataclasses.replace(clock, zero_=lambda buffer: flushed.append(buffer) or fake.clock().zero_(buffer))
    timer = RepTimer(torch.device("cuda"), clock=clock, flush_buffer="the flush buffer")
    ticks = iter([2.0, 2.004])
    timed = timer.time_call(fake.model(), [], _perf_counter=lambda: next(ticks))
    assert flushed == ["the flush buffer"]
    assert timed.host_ms == pytest.approx(4.0)


def test_a_tail_exactly_at_the_bound_is_not_charged_and_one_beyond_it_is():
    from tritongym.evaluator.worker.timing import CudaClock

    labels = iter(["start", "end", "idle"] * 2)
    spans = {("start", "end"): 1.0, ("end", "idle"): 0.5, ("start", "idle"): 1.5}
    clock = CudaClock(synchronize=lambda: None, new_event=lambda: next(labels), record=lambda e: None,
                      wait=lambda e: None, elapsed_ms=lambda a, b: spans[(a, b)], zero_=lambda b: None)
    timer = RepTimer(torch.device("cuda"), clock=clock, flush_buffer="x")
    timer.tail_bound_ms = 0.5
    at_bound = timer.time_call(lambda: None, [])
    assert (at_bound.ms, at_bound.tail_ms, at_bound.charged) == (1.0, 0.5, False)
    timer.tail_bound_ms = 0.49
    beyond = timer.time_call(lambda: None, [])
    assert (beyond.ms, beyond.charged) == (1.5, True)  # the tail is charged to the call


def test_a_cpu_timer_with_a_clock_still_neither_holds_nor_measures_dispatch():
    fake = FakeDevice()
    timer = RepTimer(torch.device("cpu"), clock=fake.clock(), flush_buffer="x")
    assert timer.hide_dispatch(1.0) == 0.0 and timer.hold_cycles == 0
    assert timer.dispatch_ms(fake.model(), lambda: []) == 0.0 and fake.calls == []


def test_warm_up_stops_at_its_budget_in_milliseconds(monkeypatch):
    """A call takes 1 ms on a fake clock, so a 5 ms budget is exactly 5 calls (as seconds it would be
    10,000, as microseconds 1). A real sleep made this flaky: a loaded machine can take 5 ms to wake."""
    ticks = [0]
    monkeypatch.setattr(timing, "_perf_counter", lambda: ticks[0] / 1e3)
    calls = RepTimer(torch.device("cpu")).warm_up(lambda: ticks.__setitem__(0, ticks[0] + 1), lambda: [],
                                                  budget_ms=5.0, min_calls=1)
    assert calls == 5
    ticks[0] = 0
    assert RepTimer(torch.device("cpu")).warm_up(lambda: ticks.__setitem__(0, ticks[0] + 1), lambda: [],
                                                 budget_ms=5.0, min_calls=8) == 8


def test_a_variant_that_fails_to_build_is_dropped_and_named_with_its_exception(sends):
    fake = FakeDevice()

    def broken():
        raise ValueError("x" * 900)

    session, channel = _session(fake, variants={"compile": broken})
    session.handle("time_start", {"warmup_ms": 0.0, "variants": ["compile"]})
    message = channel.sent[-1][1]["variants"]["compile"]
    assert message == "ValueError: " + "x" * 500  # the type, then at most 500 characters
    assert set(session.models) == {"eager"}
