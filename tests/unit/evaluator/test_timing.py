"""The timing protocol's order of CUDA calls, with a recording fake clock (no GPU needed).

The real `CudaClock` calls torch.cuda; these fakes record every call and play a device timeline,
so the order (flush, start, call, end, device-wide sync, idle event) and the side-stream charge
are checked exactly as the worker runs them.
"""

from __future__ import annotations

import random
import sys
import types

import numpy
import pytest
import torch

from tritongym.evaluator.worker import timing
from tritongym.evaluator.worker.timing import CudaClock, RepTimer, TimingSession, timing_inputs


class FakeEvent:
    def __init__(self, label: str) -> None:
        self.label = label
        self.at_ms: float | None = None


class FakeDevice:
    """A device timeline: the flush takes `flush_ms`; the call `call_ms` on the current stream and
    `side_ms` more on another stream that only a device-wide synchronize waits for."""

    def __init__(self, flush_ms: float = 0.1, call_ms: float = 0.02, side_ms: float = 0.0,
                 wakeup_ms: float = 0.005, dispatch_ms: float = 0.01, cycles_per_ms: float = 1.5e6) -> None:
        self.flush_ms, self.call_ms, self.side_ms, self.wakeup_ms = flush_ms, call_ms, side_ms, wakeup_ms
        self.dispatch_ms, self.cycles_per_ms = dispatch_ms, cycles_per_ms
        self.calls: list[str] = []
        self.stream_ms = 0.0  # when the current stream's queued work ends
        self.device_ms = 0.0  # when every stream's work ends
        self.host_ms = 0.0
        self.events = 0

    def clock(self) -> CudaClock:
        def synchronize() -> None:
            self.calls.append("synchronize")
            self.host_ms = max(self.host_ms, self.device_ms) + self.wakeup_ms

        def new_event() -> FakeEvent:
            self.events += 1
            return FakeEvent(f"e{self.events}")

        def record(event: FakeEvent) -> None:
            self.calls.append(f"record:{event.label}")
            self.stream_ms = max(self.stream_ms, self.host_ms)
            event.at_ms = self.stream_ms

        def wait(event: FakeEvent) -> None:
            self.calls.append(f"wait:{event.label}")
            self.host_ms = max(self.host_ms, event.at_ms)

        def elapsed(a: FakeEvent, b: FakeEvent) -> float:
            return b.at_ms - a.at_ms

        def zero_(buffer: object) -> None:
            self.calls.append("flush")
            self.stream_ms = max(self.stream_ms, self.host_ms) + self.flush_ms
            self.device_ms = max(self.device_ms, self.stream_ms)

        def hold(cycles: int) -> None:
            self.calls.append("hold")
            self.stream_ms = max(self.stream_ms, self.host_ms) + cycles / self.cycles_per_ms
            self.device_ms = max(self.device_ms, self.stream_ms)

        return CudaClock(synchronize=synchronize, new_event=new_event, record=record, wait=wait,
                         elapsed_ms=elapsed, zero_=zero_, hold=hold)

    def model(self):
        def forward(*inputs):
            self.calls.append("call")
            self.host_ms += self.dispatch_ms  # host time, hidden behind the flush when short
            self.stream_ms = max(self.stream_ms, self.host_ms) + self.call_ms
            self.device_ms = max(self.device_ms, self.stream_ms + self.side_ms)
            return "out"
        return forward


def cuda_timer(fake: FakeDevice) -> RepTimer:
    return RepTimer(torch.device("cuda"), clock=fake.clock(), flush_buffer=object())


def test_flush_start_call_end_are_queued_without_a_synchronize_between():
    fake = FakeDevice()
    timed = cuda_timer(fake).time_call(fake.model(), [])
    assert fake.calls == ["flush", "record:e1", "call", "record:e2", "synchronize", "record:e3", "wait:e3"]
    # The span is the call's device time, not the host's dispatch (0.01 ms) plus the call.
    assert timed.ms == pytest.approx(0.02)
    assert not timed.charged and timed.output == "out"


def test_a_synchronize_after_the_flush_would_have_put_dispatch_into_the_span():
    # The defect this order fixes: with the GPU idle at the start event, dispatch is timed.
    fake = FakeDevice()
    clock = fake.clock()
    clock.zero_(None)
    clock.synchronize()
    start = clock.new_event()
    clock.record(start)
    fake.model()()
    end = clock.new_event()
    clock.record(end)
    assert clock.elapsed_ms(start, end) == pytest.approx(0.03)  # 0.01 dispatch + 0.02 work


def test_a_slow_dispatch_is_timed_unless_the_stream_is_held_until_it_ends():
    # The clean room's replay decodes its log in Python between launches: 0.14 ms for one 5 µs
    # kernel on an H200, most of it timed behind a flush that lasts less. Held for twice the measured
    # dispatch after the flush, the span is the device's work again.
    fake = FakeDevice(dispatch_ms=0.5)
    timer = cuda_timer(fake)
    assert timer.time_call(fake.model(), []).ms == pytest.approx(0.5 - 0.1 + 0.02)
    fake.calls.clear()
    assert timer.hide_dispatch(0.5) == pytest.approx(timing.HOLD_FACTOR * 0.5)
    assert timer.hold_cycles == pytest.approx(fake.cycles_per_ms * timing.HOLD_FACTOR * 0.5, rel=1e-6)
    fake.calls.clear()
    timed = timer.time_call(fake.model(), [])
    assert fake.calls[:2] == ["flush", "hold"] and fake.calls[2].startswith("record:") and fake.calls[3] == "call"
    assert timed.ms == pytest.approx(0.02) and not timed.charged
    assert "held" in timer.method
    # Bounded both ways: a tiny dispatch still gets the minimum hold, a huge one the maximum.
    assert timer.hide_dispatch(0.0) == timing.HOLD_MIN_MS
    assert timer.hide_dispatch(1e6) == timing.HOLD_MAX_MS


def test_the_dispatch_time_is_the_host_time_of_untimed_calls_started_on_an_idle_device():
    fake = FakeDevice(dispatch_ms=0.3)
    timer = cuda_timer(fake)
    host_clock = lambda: fake.host_ms / 1e3  # noqa: E731 - the fake's host timeline, in seconds
    assert timer.dispatch_ms(fake.model(), lambda: [], calls=3, _perf_counter=host_clock) == pytest.approx(0.3)
    # Each call starts after a device-wide synchronize and is waited for only after its clock stops.
    assert fake.calls == ["synchronize", "call", "synchronize"] * 3
    assert RepTimer(torch.device("cpu")).dispatch_ms(fake.model(), lambda: []) == 0.0


def test_the_hold_is_sized_at_the_fastest_clock_seen():
    # A GPU that boosts after the calibration would run the same cycles in less time: the cycles per
    # ms are the largest of the three readings, so the hold is never shorter than asked.
    import dataclasses

    fake = FakeDevice()
    real = fake.clock()
    rates = iter([0.5e6, 1.5e6, 1.0e6])

    def boosting_hold(cycles: int) -> None:
        fake.cycles_per_ms = next(rates, fake.cycles_per_ms)
        real.hold(cycles)

    timer = RepTimer(torch.device("cuda"), clock=dataclasses.replace(real, hold=boosting_hold), flush_buffer=object())
    assert timer.hide_dispatch(1.0) == pytest.approx(2.0)
    assert timer.hold_cycles == pytest.approx(1.5e6 * 2.0, rel=1e-6)


def test_no_hold_on_a_cpu_or_without_a_hold_call():
    assert RepTimer(torch.device("cpu")).hide_dispatch(1.0) == 0.0
    fake = FakeDevice()
    bare = fake.clock()
    timer = RepTimer(torch.device("cuda"), clock=CudaClock(**{**bare.__dict__, "hold": None}), flush_buffer=object())
    assert timer.hide_dispatch(1.0) == 0.0 and timer.hold_cycles == 0
    timer.time_call(fake.model(), [])
    assert "hold" not in fake.calls


def test_work_left_on_a_side_stream_is_charged_to_the_call():
    fake = FakeDevice(side_ms=2.0)
    timer = cuda_timer(fake)
    timed = timer.time_call(fake.model(), [])
    assert timed.charged
    assert timed.tail_ms > timer.tail_bound_ms
    assert timed.ms == pytest.approx(0.02 + 2.0 + fake.wakeup_ms)


def test_the_tail_bound_is_calibrated_from_empty_calls():
    fake = FakeDevice(wakeup_ms=0.03)
    timer = cuda_timer(fake)
    bound = timer.calibrate(reps=5)
    assert bound == pytest.approx(max(timing.MIN_TAIL_BOUND_MS, timing.TAIL_BOUND_FACTOR * 0.03))
    honest = timer.time_call(fake.model(), [])
    assert not honest.charged and honest.ms == pytest.approx(0.02)


def test_the_flush_uses_the_zero_captured_before_any_candidate_code(monkeypatch):
    captured = timing._zero
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: self)  # a candidate skipping the flush
    clock = timing.cuda_clock(torch.device("cuda"))
    assert clock.zero_ is captured and clock.zero_ is not torch.Tensor.zero_
    buffer = torch.ones(4)
    clock.zero_(buffer)
    assert buffer.sum().item() == 0.0


PROBLEM_USING_RANDOM = '''
import random
import numpy as np
import torch

def get_inputs():
    return [torch.tensor([random.random(), float(np.random.rand())]), torch.randn(2)]
'''


def _module(source: str) -> types.ModuleType:
    module = types.ModuleType("problem_using_random")
    exec(compile(source, "problem_using_random", "exec"), module.__dict__)
    return module


def test_timing_inputs_seed_random_and_numpy_as_well_as_torch():
    module = _module(PROBLEM_USING_RANDOM)
    first = timing_inputs(module, 1234, torch.device("cpu"))
    random.random(), numpy.random.rand(), torch.randn(3)  # disturb every generator in between
    second = timing_inputs(module, 1234, torch.device("cpu"))
    other = timing_inputs(module, 1235, torch.device("cpu"))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert not torch.equal(first[0], other[0])


class RecordingChannel:
    def __init__(self) -> None:
        self.sent: list[tuple[str, dict]] = []


def _session(fake: FakeDevice, observe=None, variants=None) -> tuple[TimingSession, RecordingChannel]:
    channel = RecordingChannel()
    module = _module("import torch\ndef get_inputs():\n    return [torch.randn(3)]\n")
    session = TimingSession(channel, fake.model(), module, torch.device("cpu"), observe=observe,
                            timer=cuda_timer(fake), variants=variants)
    return session, channel


@pytest.fixture()
def recorded_sends(monkeypatch):
    monkeypatch.setattr(timing, "_send", lambda channel, kind, payload: channel.sent.append((kind, payload)))


def test_a_rep_reports_the_tail_and_the_evidence_comes_on_a_separate_request(recorded_sends):
    fake = FakeDevice(side_ms=1.0)
    observations = iter([{"threads": 3}, {"threads": 4, "tampered": ["torch.cuda.Event"]}])
    session, channel = _session(fake, observe=lambda: next(observations))
    session.handle("time_start", {"warmup_ms": 0.0})
    fake.calls.clear()
    session.handle("rep", {"seed": 7})
    kind, reply = channel.sent[-1]
    assert kind == "rep_done" and reply["charged"] and reply["tail_ms"] > 0.5
    assert "tampered" not in reply  # no observation inside the parent's round-trip window
    session.handle("drop", {})
    session.handle("observe", {})
    kind, observed = channel.sent[-1]
    assert kind == "observed"
    assert observed["threads_after"] == 4 and observed["threads_before"] == 3
    assert observed["tampered"] == ["torch.cuda.Event"]


def test_keep_observes_first_so_a_left_mode_is_cleared_before_outputs_are_encoded(recorded_sends):
    order: list[str] = []
    fake = FakeDevice()

    def observe():
        order.append("observe")
        return {"threads": 1, "tampered": ["a torch-function mode left active"]}

    session, channel = _session(fake, observe=observe)
    session.output_transform = lambda output: order.append("encode") or output
    session.handle("time_start", {"warmup_ms": 0.0})
    order.clear()
    session.handle("rep", {"seed": 1})
    session.handle("keep", {})
    session.handle("observe", {})
    assert order == ["observe", "encode", "observe"]
    assert channel.sent[-1][1]["tampered"] == ["a torch-function mode left active"]


def test_reference_variants_are_built_on_request_and_a_failing_one_is_reported(recorded_sends):
    fake = FakeDevice()

    def broken():
        raise RuntimeError("inductor needs a C compiler")

    session, channel = _session(fake, variants={"compile": lambda: fake.model(), "broken": broken})
    session.handle("time_start", {"warmup_ms": 0.0, "variants": ["compile", "broken", "unknown"]})
    kind, ready = channel.sent[-1]
    assert kind == "time_ready"
    assert ready["variants"]["compile"] is None
    assert "C compiler" in ready["variants"]["broken"]
    assert ready["variants"]["unknown"] == "not available in this worker"
    session.handle("rep", {"seed": 3, "variant": "compile"})
    assert channel.sent[-1][0] == "rep_done"


def test_a_worker_reports_its_dispatch_and_holds_its_stream_for_what_the_parent_sends(recorded_sends):
    fake = FakeDevice(dispatch_ms=0.5)
    session, channel = _session(fake, variants={"compile": lambda: fake.model()})
    session.handle("time_start", {"warmup_ms": 0.0, "variants": ["compile"]})
    kind, ready = channel.sent[-1]
    assert kind == "time_ready" and ready["dispatch_ms"] >= 0.0
    session.handle("rep", {"seed": 1})
    unheld = channel.sent[-1][1]["ms"]
    assert unheld == pytest.approx(0.5 - 0.1 + 0.02)  # dispatch beyond the 0.1 ms flush is timed
    session.handle("hold", {"dispatch_ms": 0.5})
    kind, held = channel.sent[-1]
    assert kind == "held" and held["hold_ms"] == pytest.approx(timing.HOLD_FACTOR * 0.5)
    assert "held" in held["method"]
    fake.calls.clear()
    session.handle("rep", {"seed": 2, "variant": "compile"})
    assert fake.calls[:2] == ["flush", "hold"]
    assert channel.sent[-1][1]["ms"] == pytest.approx(0.02)  # the call's device work only


def test_worker_common_seeds_numpy_only_through_its_global_generator():
    # A numpy-free install still seeds torch and random (numpy is imported lazily).
    from tritongym.evaluator.worker.startup import seed_everything

    seed_everything(5)
    a = (random.random(), numpy.random.rand(), torch.rand(1).item())
    seed_everything(5)
    assert (random.random(), numpy.random.rand(), torch.rand(1).item()) == a
    assert "numpy" in sys.modules


MATMUL_PROBLEM = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 8)

    def forward(self, a, b):
        return torch.relu(self.linear(a @ b))

def get_inputs():
    return [torch.randn(4, 32), torch.randn(32, 16)]

def get_init_inputs():
    return []
'''


def test_the_reference_counts_dense_matmul_flops_for_the_flop_floor(tmp_path):
    from tritongym.evaluator.worker.reference import ReferenceWorker

    path = tmp_path / "problem.py"
    path.write_text(MATMUL_PROBLEM)
    worker = ReferenceWorker(RecordingChannel(), str(path), torch.device("cpu"))
    worker.module = _module(MATMUL_PROBLEM)
    worker.model = worker.module.Model()
    # a @ b: 2·4·32·16; the linear layer (addmm): 2·4·16·8; relu is not a matmul.
    assert worker.dense_matmul_flops() == {"dense_matmul_flops": 2 * 4 * 32 * 16 + 2 * 4 * 16 * 8}


def test_a_gpu_reference_worker_pins_ieee_fp32_before_loading_the_problem(tmp_path):
    from tritongym.evaluator.worker.reference import ReferenceWorker

    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.get_float32_matmul_precision())
    try:
        torch.backends.cudnn.allow_tf32 = True
        worker = ReferenceWorker(RecordingChannel(), str(tmp_path / "unused.py"), torch.device("cuda"))
        assert worker.fp32 and "cudnn.allow_tf32 = False" in worker.fp32
        assert not torch.backends.cudnn.allow_tf32 and not torch.backends.cuda.matmul.allow_tf32
        cpu = ReferenceWorker(RecordingChannel(), str(tmp_path / "unused.py"), torch.device("cpu"))
        assert cpu.fp32 is None
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def test_rebinding_the_timing_modules_globals_does_not_change_the_clock(monkeypatch):
    # A candidate that rebinds timing._cuda_synchronize or timing._perf_counter after the import
    # is reported by the tamper check; the clock itself keeps what was captured at import.
    captured_sync = timing._cuda_synchronize
    monkeypatch.setattr(timing, "_cuda_synchronize", lambda *a: None)
    monkeypatch.setattr(timing, "_perf_counter", lambda: 0.0)
    clock = timing.cuda_clock(torch.device("cuda"))
    assert clock.synchronize.__closure__ is not None
    assert any(cell.cell_contents is captured_sync for cell in clock.synchronize.__closure__)
    timed = RepTimer(torch.device("cpu")).time_call(lambda: time_consuming(), [])
    assert timed.ms > 0  # the captured perf_counter, not the rebound constant clock


def time_consuming() -> int:
    return sum(i * i for i in range(20000))
