"""Worker-side timing: one repetition at a time, the same method for reference and candidate.

Each worker (the clean reference worker and the candidate worker) times its own model with this
code, in blocks the parent interleaves (reference, candidate, reference, ...), so drift of
clocks and temperature hits both sides alike. One repetition:

1. fresh inputs from a seed the parent sends for this repetition only (``get_inputs()`` under
   the seed, with torch, `random` and numpy seeded, created on the device), then a device-wide
   synchronize, so no two timed calls see the same values or allocations;
2. queued on the current stream with **no synchronize in between**, as in
   ``triton.testing.do_bench``, KernelBench and GPU MODE's evaluator: the L2 flush (zeroing a
   buffer of at least twice the L2 size, 256 MiB minimum), the start event, the call, the end
   event. The flush keeps the GPU busy while the host dispatches the call, so the span measures
   the GPU's work, not Python and Triton's dispatch (a synchronize after the flush would leave
   the GPU idle and put ~10 µs of dispatch per launch into every span). A dispatch longer than
   the flush would still be timed (on an H200 a Triton launch took ~0.07 ms of host time and the
   candidate worker's forward ~0.15 ms, against ~0.06 ms of flush: an honest 5 µs kernel read
   0.10 ms), so the stream is also held after the flush for twice the host's dispatch time
   (`RepTimer.hide_dispatch`, ``torch.cuda._sleep``). Reference and candidate workers measure
   their dispatch at ``time_start`` (`RepTimer.dispatch_ms`) and the parent holds **both** for
   the larger of the two (``hold``): equal holds keep the parent's round-trip cross-check a
   difference of device times. The clean room's timed replay holds for its own dispatch;
3. the side-stream guard: a **device-wide** ``torch.cuda.synchronize()`` (work hidden on other
   streams is waited for), then a third event. The gap from the end event to it (the tail) is
   only the host's wake-up latency for honest work; when it exceeds a bound calibrated at start
   (`RepTimer.calibrate`), work continued after the end event on another stream, and the
   repetition is charged start → third event instead (``charged``).

A host clock around the same span is a cross-check. The parent then tells the worker to keep or
drop that repetition's output; kept outputs go back to the parent, which compares them with the
reference's output for the same seed. Which repetitions are kept is decided by the parent after
each repetition has finished, so the candidate cannot know, while it is being timed, whether
its output will be checked. The candidate worker's evidence (threads, tampering, refusals) is
collected by a separate ``observe`` request *after* the parent's round-trip clock stops, so the
observation costs the candidate no time in the parent's cross-check (`plausibility`).

On a CPU (``time_on_cpu``, for tests of this protocol) the clock is the host clock and there is
no flush; the figures say nothing about GPU speed.
"""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from tritongym.evaluator.common.channel import Channel
from tritongym.evaluator.worker import startup as common

#: Smallest L2 flush buffer (bytes); KernelBench and Triton's do_bench use 256 MB.
MIN_FLUSH_BYTES = 256 << 20
#: The tail (end event → event after the device-wide synchronize) is never judged against a
#: bound below this: an OS scheduling hiccup of the host is not side-stream work.
MIN_TAIL_BOUND_MS = 0.05
#: The calibrated bound is this many times the largest tail of an empty call.
TAIL_BOUND_FACTOR = 4.0
#: `RepTimer.hide_dispatch`: the stream is held this many times the host's dispatch time of the
#: call, never less than HOLD_MIN_MS nor more than HOLD_MAX_MS (a dispatch slower than that is
#: partly timed: the figure is then high, never low).
HOLD_FACTOR = 2.0
HOLD_MIN_MS = 0.05
HOLD_MAX_MS = 50.0
#: Untimed calls whose median host time is a worker's dispatch time (`RepTimer.dispatch_ms`).
DISPATCH_CALLS = 5
#: Cycles of the calibration hold (`torch.cuda._sleep`): ~1 ms on a 1–2 GHz GPU.
HOLD_CALIBRATION_CYCLES = 1_000_000

# References captured when the worker imports this module, before any candidate code runs: a
# candidate that patches time.perf_counter, torch.cuda.Event.elapsed_time or Tensor.zero_ (which
# would skip the L2 flush) changes the module attributes, not these (reward-hacking.md D4). The
# worker also reports such patches.
_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_synchronize = torch.cuda.Event.synchronize
_event_elapsed = torch.cuda.Event.elapsed_time
_zero = torch.Tensor.zero_
_hold = getattr(torch.cuda, "_sleep", None)  # spins the current stream for a number of GPU cycles
_no_grad = torch.no_grad
_send = Channel.send


@dataclass(frozen=True)
class CudaClock:
    """The CUDA calls of a timed repetition, captured at import (tests substitute recording fakes)."""

    synchronize: Callable[[], Any]  # device-wide
    new_event: Callable[[], Any]
    record: Callable[[Any], Any]  # on the current stream
    wait: Callable[[Any], Any]  # host waits for the event
    elapsed_ms: Callable[[Any, Any], float]
    zero_: Callable[[Any], Any]
    hold: Callable[[int], Any] | None = None  # keeps the current stream busy for a number of cycles


def cuda_clock(device: torch.device, _sync: Any = _cuda_synchronize, _event: Any = _Event,
               _record: Any = _event_record, _wait: Any = _event_synchronize, _elapsed: Any = _event_elapsed,
               _zero_: Any = _zero, _hold_: Any = _hold) -> CudaClock:
    """The real clock for `device` (its own device-wide synchronize).

    The calls are bound as default arguments when this module is imported, before any candidate
    code runs: rebinding this module's globals later changes nothing here (and is reported).
    """
    return CudaClock(synchronize=lambda: _sync(device), new_event=lambda: _event(enable_timing=True),
                     record=_record, wait=_wait, elapsed_ms=_elapsed, zero_=_zero_, hold=_hold_)


@dataclass(frozen=True)
class RepTime:
    """One timed repetition: the span, the host clock, the tail after the end event, the output."""

    ms: float
    host_ms: float
    tail_ms: float
    charged: bool
    output: Any


def timing_inputs(module: ModuleType, seed: int, device: torch.device) -> list[Any]:
    """The problem's inputs for one timed repetition, generated on `device` under `seed`.

    Factory calls in ``get_inputs()`` allocate on the device directly (fast for large inputs);
    anything created elsewhere is moved. Both workers use exactly this procedure, so the same
    seed gives the same inputs on both sides (torch, `random` and numpy are all seeded).
    """
    common.seed_everything(seed)
    with torch.device(device):
        inputs = module.get_inputs()
    return common.to_device(list(inputs), device)


class RepTimer:
    """Times single calls with CUDA events (GPU) or the host clock (CPU protocol tests).

    `clock` and `flush_buffer` default to the real CUDA calls and a fresh buffer sized from the
    device's L2; tests pass fakes.
    """

    def __init__(self, device: torch.device, clock: CudaClock | None = None, flush_buffer: Any = None) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.flush_buffer = flush_buffer
        self.clock = clock
        self.tail_bound_ms = MIN_TAIL_BOUND_MS
        self.hold_cycles = 0  # `hide_dispatch`: the stream is held this long after the flush
        if self.cuda and self.clock is None:
            self.clock = cuda_clock(device)
        if self.cuda and self.flush_buffer is None:
            l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
            size = max(MIN_FLUSH_BYTES, 2 * l2_bytes)
            self.flush_buffer = torch.empty(size // 4, dtype=torch.int32, device=device)

    @property
    def method(self) -> str:
        if self.cuda:
            held = ", the stream held until the host has dispatched the call" if self.hold_cycles else ""
            return (f"cuda-events: L2 flush{held}, start, call, end queued without synchronizing; device-wide "
                    f"sync after the end event, tail over {self.tail_bound_ms:.3g} ms charged; fresh inputs per rep")
        return "host clock on CPU (Triton interpreter; not meaningful for GPU speed)"

    def time_call(self, fn: Any, inputs: list[Any], _perf_counter: Any = _perf_counter,
                  _no_grad: Any = _no_grad) -> RepTime:
        """Run ``fn(*inputs)`` once and time it (see the module docstring for the order)."""
        if not self.cuda:
            start = _perf_counter()
            with _no_grad():
                output = fn(*inputs)
            elapsed = (_perf_counter() - start) * 1e3
            return RepTime(elapsed, elapsed, 0.0, False, output)
        clock = self.clock
        assert clock is not None and self.flush_buffer is not None
        start_event, end_event, idle_event = clock.new_event(), clock.new_event(), clock.new_event()
        grad_off = _no_grad()
        host_start = _perf_counter()
        clock.zero_(self.flush_buffer)
        if self.hold_cycles and clock.hold is not None:
            clock.hold(self.hold_cycles)
        clock.record(start_event)
        with grad_off:
            output = fn(*inputs)
        clock.record(end_event)
        clock.synchronize()  # device-wide: work left on side streams is waited for
        clock.record(idle_event)
        clock.wait(idle_event)
        host_ms = (_perf_counter() - host_start) * 1e3
        ms = float(clock.elapsed_ms(start_event, end_event))
        tail_ms = float(clock.elapsed_ms(end_event, idle_event))
        charged = tail_ms > self.tail_bound_ms
        if charged:
            ms = float(clock.elapsed_ms(start_event, idle_event))
        return RepTime(ms, host_ms, tail_ms, charged, output)

    def calibrate(self, reps: int = 20) -> float:
        """Set the tail bound from empty calls timed the same way; returns it (ms)."""
        if not self.cuda:
            return 0.0
        self.tail_bound_ms = float("inf")
        tails = [self.time_call(lambda: None, []).tail_ms for _ in range(reps)]
        self.tail_bound_ms = max(MIN_TAIL_BOUND_MS, TAIL_BOUND_FACTOR * max(tails))
        return self.tail_bound_ms

    def hide_dispatch(self, dispatch_ms: float) -> float:
        """Hold the stream after each flush for longer than `dispatch_ms`; returns the hold (ms).

        The flush hides only as much dispatch as it lasts itself (zeroing 256 MiB: ~0.06 ms on an
        H200). A call whose dispatch takes longer (a Triton launch, ~0.07 ms of host time on the
        H200 we measured; the clean room's replay decodes its log in Python between launches, 0.14
        ms for one 5 µs kernel) would be timed as host time; behind the hold, the span is the
        device's work on the call. No-op (0) on a CPU or where torch has no ``cuda._sleep``.
        """
        clock = self.clock
        if not self.cuda or clock is None or clock.hold is None:
            return 0.0
        # Cycles per ms at the fastest clock seen (a GPU boosting later would shorten the hold).
        per_ms = 0.0
        for _ in range(3):
            start, end = clock.new_event(), clock.new_event()
            clock.synchronize()
            clock.record(start)
            clock.hold(HOLD_CALIBRATION_CYCLES)
            clock.record(end)
            clock.wait(end)
            per_ms = max(per_ms, HOLD_CALIBRATION_CYCLES / max(float(clock.elapsed_ms(start, end)), 1e-6))
        hold_ms = min(HOLD_MAX_MS, max(HOLD_MIN_MS, HOLD_FACTOR * dispatch_ms))
        self.hold_cycles = max(1, int(per_ms * hold_ms))
        return hold_ms

    def dispatch_ms(self, fn: Any, make_inputs: Any, calls: int = DISPATCH_CALLS,
                    _perf_counter: Any = _perf_counter, _no_grad: Any = _no_grad) -> float:
        """The host's time to dispatch ``fn(*inputs)``: the median over `calls` untimed calls, each
        started on an idle device and not waited for (0 on a CPU, where nothing is held)."""
        if not self.cuda or self.clock is None:
            return 0.0
        samples = []
        for _ in range(calls):
            inputs = make_inputs()
            self.clock.synchronize()
            started = _perf_counter()
            with _no_grad():
                fn(*inputs)
            samples.append((_perf_counter() - started) * 1e3)
            self.clock.synchronize()
        return statistics.median(samples)

    def warm_up(self, fn: Any, make_inputs: Any, budget_ms: float, min_calls: int = 3) -> int:
        """Call `fn` on throwaway inputs for at least `budget_ms` and `min_calls` calls."""
        calls = 0
        deadline = _perf_counter() + budget_ms / 1e3
        while calls < min_calls or _perf_counter() < deadline:
            inputs = make_inputs()
            with _no_grad():
                fn(*inputs)
            if self.clock is not None:
                self.clock.synchronize()
            calls += 1
            if calls >= 10_000:
                break
        return calls


def measure_copy_bandwidth(device: torch.device, nbytes: int = 1 << 30, reps: int = 5) -> float:
    """Device-to-device copy bandwidth in bytes/s (read + written), median of `reps` copies."""
    source = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    target.copy_(source)
    samples = []
    for _ in range(reps):
        start, end = _Event(enable_timing=True), _Event(enable_timing=True)
        _cuda_synchronize(device)
        _event_record(start)
        target.copy_(source)
        _event_record(end)
        _event_synchronize(end)
        samples.append(_event_elapsed(start, end) / 1e3)
    del source, target
    return 2 * nbytes / statistics.median(samples)


def measure_matmul_rate(device: torch.device, size: int = 4096, reps: int = 5) -> float:
    """The fastest dense matmul rate in FLOP/s among float16 and bfloat16 (tensor cores), median of `reps`.

    The nominal FLOP floor divides by this: no candidate multiplies dense matrices faster than
    the device's own half-precision GEMM (float8 is at most twice as fast; the floor's slack
    covers it).
    """
    best = 0.0
    for dtype in (torch.float16, torch.bfloat16):
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        torch.mm(a, b)
        samples = []
        for _ in range(reps):
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _cuda_synchronize(device)
            _event_record(start)
            torch.mm(a, b)
            _event_record(end)
            _event_synchronize(end)
            samples.append(_event_elapsed(start, end) / 1e3)
        best = max(best, 2 * size**3 / statistics.median(samples))
        del a, b
    return best


class TimingSession:
    """The timing requests a worker serves (shared by the reference and candidate workers).

    Requests: ``time_start {warmup_ms, variants?}`` → ``time_ready {method, device_name,
    warmup_calls, tail_bound_ms, dispatch_ms, variants, ...extra}``; ``hold {dispatch_ms}`` →
    ``held {hold_ms, method}`` (the stream held after each flush, `RepTimer.hide_dispatch`);
    ``rep {seed, variant?}`` → ``rep_done {ms, host_ms, tail_ms, charged}``; ``keep`` → ``output
    {outputs}``; ``drop`` → ``dropped``; ``observe`` → ``observed {threads_before, threads_after,
    tampered, refused}`` (the candidate's
    evidence since the previous observation; empty for the reference); ``bandwidth`` →
    ``bandwidth {bytes_per_s, flops_per_s}`` (0 on a CPU; the parent asks only the reference
    worker). Warm-up inputs come from seeds drawn here: they are never checked.

    `models` maps variant names to callables (the reference worker adds ``compile``, its
    ``torch.compile`` build, when asked); `model` is the ``eager`` variant.
    """

    def __init__(self, channel: Any, model: torch.nn.Module, module: ModuleType, device: torch.device,
                 output_transform: Callable[[Any], Any] = lambda value: value,
                 observe: Callable[[], dict[str, Any]] | None = None,
                 timer: RepTimer | None = None,
                 variants: dict[str, Callable[[], Any]] | None = None,
                 extra_ready: Callable[[], dict[str, Any]] | None = None,
                 measured: dict[str, float] | None = None) -> None:
        self.channel = channel
        self.model = model
        self.module = module
        self.device = device
        self.output_transform = output_transform
        # The candidate worker passes its thread count and tamper check, reported on `observe`.
        self.observe = observe
        self.timer = timer if timer is not None else RepTimer(device)
        # Builders of the other variants (the compiled reference), built on `time_start` when asked.
        self.variant_builders = variants or {}
        self.models: dict[str, Any] = {"eager": model}
        self.extra_ready = extra_ready
        # Bandwidth and matmul rate measured at setup (the reference worker), else on request.
        self.measured = measured
        self.last_output: Any = None
        self.threads_before = 0
        self.pending: list[dict[str, Any]] = []

    def _make_inputs(self) -> list[Any]:
        return timing_inputs(self.module, secrets.randbits(63), self.device)

    def handle(self, kind: str, payload: dict[str, Any]) -> bool:
        """Serve one timing request; returns False when `kind` is not a timing request."""
        if kind == "time_start":
            reply: dict[str, Any] = {"variants": {}}
            for name in payload.get("variants", []) or []:
                builder = self.variant_builders.get(str(name))
                if builder is None:
                    reply["variants"][str(name)] = "not available in this worker"
                    continue
                try:
                    self.models[str(name)] = builder()
                    self.timer.warm_up(self.models[str(name)], self._make_inputs, float(payload["warmup_ms"]))
                    reply["variants"][str(name)] = None
                except Exception as exc:  # noqa: BLE001 - an optional baseline that fails is reported, not fatal
                    self.models.pop(str(name), None)
                    reply["variants"][str(name)] = f"{type(exc).__name__}: {str(exc)[:500]}"
            calls = self.timer.warm_up(self.model, self._make_inputs, float(payload["warmup_ms"]))
            self.timer.calibrate()
            dispatch = max(self.timer.dispatch_ms(model, self._make_inputs) for model in self.models.values())
            name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
            reply.update(method=self.timer.method, device_name=name, warmup_calls=calls,
                         tail_bound_ms=self.timer.tail_bound_ms, dispatch_ms=dispatch)
            if self.extra_ready is not None:
                reply.update(self.extra_ready())
            self.threads_before = self._threads()
            _send(self.channel, "time_ready", reply)
        elif kind == "hold":
            # The parent's choice for both workers: the larger of their dispatch times.
            hold_ms = self.timer.hide_dispatch(float(payload["dispatch_ms"]))
            _send(self.channel, "held", {"hold_ms": hold_ms, "method": self.timer.method})
        elif kind == "rep":
            model = self.models[str(payload.get("variant", "eager"))]
            inputs = timing_inputs(self.module, int(payload["seed"]), self.device)
            common.synchronize(self.device)
            timed = self.timer.time_call(model, inputs)
            self.last_output = timed.output
            del inputs
            _send(self.channel, "rep_done", {"ms": timed.ms, "host_ms": timed.host_ms, "tail_ms": timed.tail_ms,
                                             "charged": timed.charged})
        elif kind == "keep":
            # The candidate's leftovers (a torch-function mode) must not run while its output is
            # encoded: observing clears them; what it found is reported on the next `observe`.
            if self.observe is not None:
                self.pending.append(self.observe())
            output, self.last_output = self.last_output, None
            _send(self.channel, "output", {"outputs": self.output_transform(output)})
        elif kind == "drop":
            self.last_output = None
            _send(self.channel, "dropped", {})
        elif kind == "observe":
            after = self.observe() if self.observe is not None else {}
            earlier, self.pending = self.pending, []
            tampered = [name for seen in (*earlier, after) for name in seen.get("tampered", [])]
            _send(self.channel, "observed", {
                "threads_before": self.threads_before,
                "threads_after": max([seen.get("threads", 0) for seen in (*earlier, after)]),
                "tampered": list(dict.fromkeys(tampered)), "refused": after.get("refused", [])})
            self.threads_before = after.get("threads", 0)
        elif kind == "bandwidth":
            measured = self.measured
            if measured is None and self.device.type == "cuda":
                measured = {"bytes_per_s": measure_copy_bandwidth(self.device),
                            "flops_per_s": measure_matmul_rate(self.device)}
            _send(self.channel, "bandwidth", measured or {"bytes_per_s": 0.0, "flops_per_s": 0.0})
        else:
            return False
        return True

    def _threads(self) -> int:
        return int(self.observe().get("threads", 0)) if self.observe is not None else 0
