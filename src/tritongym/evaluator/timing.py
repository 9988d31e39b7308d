"""Worker-side timing: one repetition at a time, the same method for reference and candidate.

Each worker (the clean reference worker and the candidate worker) times its own model with this
code, in blocks the parent interleaves (reference, candidate, reference, ...), so drift of
clocks and temperature hits both sides alike. One repetition:

1. fresh inputs from a seed the parent sends for this repetition only (``get_inputs()`` under
   the seed, created on the device), so no two timed calls see the same values or allocations;
2. an L2 flush: zero a buffer of at least twice the L2 size (256 MiB minimum), then a
   device-wide synchronize;
3. start event, the call, **device-wide** ``torch.cuda.synchronize()`` (work hidden on side
   streams is waited for), end event; a host clock around the same span as a cross-check.

The parent then tells the worker to keep or drop that repetition's output; kept outputs go back
to the parent, which compares them with the reference's output for the same seed. Which
repetitions are kept is decided by the parent after each repetition has finished, so the
candidate cannot know, while it is being timed, whether its output will be checked.

On a CPU (``time_on_cpu``, for tests of this protocol) the clock is the host clock and there is
no flush; the figures say nothing about GPU speed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from tritongym.evaluator import worker_common as common
from tritongym.evaluator.channel import Channel

#: Smallest L2 flush buffer (bytes); KernelBench and Triton's do_bench use 256 MB.
MIN_FLUSH_BYTES = 256 << 20

# References captured when the worker imports this module, before any candidate code runs: a
# candidate that patches time.perf_counter or torch.cuda.Event.elapsed_time changes the module
# attributes, not these (reward-hacking.md D4). The worker also reports such patches.
_perf_counter = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_synchronize = torch.cuda.Event.synchronize
_event_elapsed = torch.cuda.Event.elapsed_time
_no_grad = torch.no_grad
_send = Channel.send


def timing_inputs(module: ModuleType, seed: int, device: torch.device) -> list[Any]:
    """The problem's inputs for one timed repetition, generated on `device` under `seed`.

    Factory calls in ``get_inputs()`` allocate on the device directly (fast for large inputs);
    anything created elsewhere is moved. Both workers use exactly this procedure, so the same
    seed gives the same inputs on both sides.
    """
    common.seed_everything(seed)
    with torch.device(device):
        inputs = module.get_inputs()
    return common.to_device(list(inputs), device)


class RepTimer:
    """Times single calls with CUDA events (GPU) or the host clock (CPU protocol tests)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.flush_buffer: torch.Tensor | None = None
        if self.cuda:
            l2_bytes = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 0)
            size = max(MIN_FLUSH_BYTES, 2 * l2_bytes)
            self.flush_buffer = torch.empty(size // 4, dtype=torch.int32, device=device)

    @property
    def method(self) -> str:
        if self.cuda:
            return "cuda-events, device-wide sync before the end event, L2 flush, fresh inputs per rep"
        return "host clock on CPU (Triton interpreter; not meaningful for GPU speed)"

    def time_call(self, fn: Any, inputs: list[Any]) -> tuple[float, float, Any]:
        """Run ``fn(*inputs)`` once; returns ``(event_ms, host_ms, output)``."""
        if not self.cuda:
            start = _perf_counter()
            with _no_grad():
                output = fn(*inputs)
            elapsed = (_perf_counter() - start) * 1e3
            return elapsed, elapsed, output
        assert self.flush_buffer is not None
        torch.Tensor.zero_(self.flush_buffer)
        _cuda_synchronize()
        start_event = _Event(enable_timing=True)
        end_event = _Event(enable_timing=True)
        host_start = _perf_counter()
        _event_record(start_event)
        with _no_grad():
            output = fn(*inputs)
        _cuda_synchronize()  # device-wide: side streams included
        _event_record(end_event)
        _event_synchronize(end_event)
        host_ms = (_perf_counter() - host_start) * 1e3
        return _event_elapsed(start_event, end_event), host_ms, output

    def warm_up(self, fn: Any, make_inputs: Any, budget_ms: float, min_calls: int = 3) -> int:
        """Call `fn` on throwaway inputs for at least `budget_ms` and `min_calls` calls."""
        calls = 0
        deadline = _perf_counter() + budget_ms / 1e3
        while calls < min_calls or _perf_counter() < deadline:
            inputs = make_inputs()
            with torch.no_grad():
                fn(*inputs)
            common.synchronize(self.device)
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
        _cuda_synchronize()
        _event_record(start)
        target.copy_(source)
        _event_record(end)
        _event_synchronize(end)
        samples.append(_event_elapsed(start, end) / 1e3)
    del source, target
    samples.sort()
    return 2 * nbytes / samples[len(samples) // 2]


class TimingSession:
    """The timing requests a worker serves (shared by the reference and candidate workers).

    Requests: ``time_start {warmup_ms}`` → ``time_ready {method, device_name, warmup_calls}``;
    ``rep {seed}`` → ``rep_done {ms, host_ms}``; ``keep`` → ``output {outputs}``; ``drop`` →
    ``dropped``; ``bandwidth`` → ``bandwidth {bytes_per_s}`` (0 on a CPU; the parent asks only the
    reference worker). Warm-up inputs come from seeds drawn here: they are never checked.
    """

    def __init__(self, channel: Any, model: torch.nn.Module, module: ModuleType, device: torch.device,
                 output_transform: Callable[[Any], Any] = lambda value: value,
                 observe: Callable[[], dict[str, Any]] | None = None) -> None:
        self.channel = channel
        self.model = model
        self.module = module
        self.device = device
        self.output_transform = output_transform
        # The candidate worker passes its thread count and tamper check, reported with each rep.
        self.observe = observe
        self.timer = RepTimer(device)
        self.last_output: Any = None

    def handle(self, kind: str, payload: dict[str, Any]) -> bool:
        """Serve one timing request; returns False when `kind` is not a timing request."""
        if kind == "time_start":
            calls = self.timer.warm_up(
                self.model, lambda: timing_inputs(self.module, secrets.randbits(63), self.device),
                float(payload["warmup_ms"]),
            )
            name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
            _send(self.channel, "time_ready", {"method": self.timer.method, "device_name": name,
                                             "warmup_calls": calls})
        elif kind == "rep":
            inputs = timing_inputs(self.module, int(payload["seed"]), self.device)
            common.synchronize(self.device)
            before = self.observe() if self.observe is not None else {}
            ms, host_ms, self.last_output = self.timer.time_call(self.model, inputs)
            after = self.observe() if self.observe is not None else {}
            del inputs
            reply: dict[str, Any] = {"ms": ms, "host_ms": host_ms}
            if self.observe is not None:
                reply.update(threads_before=before.get("threads", 0), threads_after=after.get("threads", 0),
                             tampered=after.get("tampered", []), refused=after.get("refused", []))
            _send(self.channel, "rep_done", reply)
        elif kind == "keep":
            output, self.last_output = self.last_output, None
            _send(self.channel, "output", {"outputs": self.output_transform(output)})
        elif kind == "drop":
            self.last_output = None
            _send(self.channel, "dropped", {})
        elif kind == "bandwidth":
            bandwidth = measure_copy_bandwidth(self.device) if self.device.type == "cuda" else 0.0
            _send(self.channel, "bandwidth", {"bytes_per_s": bandwidth})
        else:
            return False
        return True
