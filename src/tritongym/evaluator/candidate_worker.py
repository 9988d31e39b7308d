"""The candidate worker: imports the candidate's `ModelNew` and runs it, collecting evidence.

This process is untrusted: it runs hostile code, inside the OS sandbox when one is available.
It never holds expected outputs, future seeds, timers the verdict depends on, or the result
channel's meaning: it answers requests, and everything it says is a *claim* the parent checks.
Outputs go back to the parent, which compares them; the evidence below is collected by harness
code in this process and is as strong as the static gate and sandbox that protect it (see
docs/integrity.md, "What runs where").

Evidence per forward call: the Triton launches (kernel, defining file, grid, argument
storages), the ATen compute ops run outside those launches, whether each output is a plain
tensor, whether its storage was an argument of a candidate kernel (provenance), whether it
overlaps an input or parameter, and which inputs changed.

Protocol (parent → candidate): on start the worker imports the candidate and sends ``ready`` or
``error``; ``build {init_inputs, weight_seed}`` → ``built``; ``call {nonce, inputs}`` →
``called {nonce, outputs, evidence}``; the timing requests of `timing.TimingSession` and
``profile {calls}`` → ``profiled {kernels, candidate_kernels}`` (the problem module is loaded
only for these, to make fresh inputs); ``exit``. Errors:
``error {phase, kind, message}``.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
from typing import Any

import torch

from tritongym.evaluator import audit_policy
from tritongym.evaluator import worker_common as common
from tritongym.evaluator.channel import Channel
from tritongym.evaluator.launches import LaunchRecorder
from tritongym.evaluator.optrace import OpTrace, storage_span
from tritongym.evaluator.profiling import profile_forward
from tritongym.evaluator.timing import TimingSession, timing_inputs

# Captured before any candidate code runs (this module is imported first).
_active_count = threading.active_count
_torch_equal = torch.equal


def _static_get(owner: Any, name: str, _isinstance: Any = isinstance, _getattr: Any = getattr) -> Any:
    """An attribute as stored: through the class ``__dict__``s for classes (no fresh bound methods)."""
    if _isinstance(owner, type):
        for klass in owner.__mro__:
            if name in klass.__dict__:
                return klass.__dict__[name]
        return None
    return _getattr(owner, name, None)


def _watchlist() -> dict[str, Any]:
    """Functions the harness relies on or a cheat would patch, by dotted name (reward-hacking D4, E3)."""
    import tritongym.evaluator.channel as channel_module
    import tritongym.evaluator.launches as launches_module
    import tritongym.evaluator.optrace as optrace_module
    import tritongym.evaluator.timing as timing_module

    watched: dict[str, Any] = {}
    for name in ("allclose", "isclose", "equal", "manual_seed", "no_grad", "empty", "empty_like", "rand",
                 "randn", "randint", "zeros", "ones"):
        watched[f"torch.{name}"] = getattr(torch, name)
    for name in ("data_ptr", "untyped_storage", "clone", "cpu", "detach", "contiguous", "view", "reshape",
                 "numel", "to", "__eq__", "__torch_function__"):
        watched[f"torch.Tensor.{name}"] = _static_get(torch.Tensor, name)
    watched["torch.testing.assert_close"] = torch.testing.assert_close
    watched["torch.cuda.synchronize"] = torch.cuda.synchronize
    watched["torch.cuda.Event"] = torch.cuda.Event
    for name in ("record", "synchronize", "elapsed_time"):
        watched[f"torch.cuda.Event.{name}"] = _static_get(torch.cuda.Event, name)
    watched["time.perf_counter"] = time.perf_counter
    watched["time.monotonic"] = time.monotonic
    watched["threading.active_count"] = threading.active_count
    for module in (channel_module, launches_module, optrace_module, timing_module, common):
        for name, value in vars(module).items():
            if callable(value) and getattr(value, "__module__", None) == module.__name__:
                watched[f"{module.__name__}.{name}"] = value
    # The worker's own module: every callable global, captured references included (a rebound
    # `_torch_equal` would blind the mutation check).
    own = (sys.modules.get("__main__"), sys.modules.get(__name__))
    for module in {id(m): m for m in own if m is not None}.values():
        if getattr(module, "__file__", None) and os.path.realpath(module.__file__) == os.path.realpath(__file__):
            for name, value in vars(module).items():
                if callable(value) and not isinstance(value, type(sys)):
                    watched[f"{module.__name__}.{name}"] = value
    for cls in (CandidateWorker, channel_module.Channel, launches_module.LaunchRecorder, optrace_module.OpTrace,
                timing_module.RepTimer, timing_module.TimingSession):
        for name, value in vars(cls).items():
            if callable(value):
                watched[f"{cls.__module__}.{cls.__qualname__}.{name}"] = value
    from triton.runtime import jit

    watched["triton.runtime.jit.JITFunction.run"] = _static_get(jit.JITFunction, "run")
    try:
        from triton.runtime.interpreter import InterpretedFunction

        watched["triton.runtime.interpreter.InterpretedFunction.run"] = _static_get(InterpretedFunction, "run")
    except ImportError:  # pragma: no cover
        pass
    return watched


def _resolve(dotted: str, _static_get: Any = _static_get, _modules: Any = sys.modules, _range: Any = range,
             _len: Any = len) -> Any:
    """Look a dotted name up again, now (class attributes through ``__dict__`` of the MRO).

    Everything it uses is bound as a default argument when the worker starts, before candidate
    code runs: rebinding a global or a builtin later does not change how it looks things up.
    """
    module_name, _, rest = dotted.partition(".")
    if dotted.startswith("tritongym.") or dotted.startswith("triton.runtime."):
        parts = dotted.split(".")
        for cut in _range(_len(parts) - 1, 0, -1):
            module = _modules.get(".".join(parts[:cut]))
            if module is not None:
                value: Any = module
                for part in parts[cut:]:
                    value = _static_get(value, part)
                return value
        return None
    value = _modules.get(module_name)
    for part in rest.split("."):
        value = _static_get(value, part)
    return value


def _tampered(watched: dict[str, Any], channel: Channel, _resolve: Any = _resolve, _vars: Any = vars,
              _sorted: Any = sorted, _set: Any = set) -> list[str]:
    """Watched names whose current value is not the one captured, and extra channel attributes."""
    changed = [name for name, original in watched.items() if _resolve(name) is not original]
    extra = _sorted(_set(_vars(channel)) - {"sock", "max_message_bytes"})
    if extra:
        changed.append(f"result channel instance attributes {extra}")
    return changed


def _overlaps(span: tuple[int, int], spans: list[tuple[int, int]]) -> bool:
    start, end = span
    return any(start < other_end and other_start < end for other_start, other_end in spans)


def _same_bytes(a: torch.Tensor, b: torch.Tensor, _torch_equal: Any = torch.equal) -> bool:
    """Bitwise equality (NaN-safe), through class-level calls and a `torch.equal` bound at import."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    a_bytes = torch.Tensor.contiguous(a).reshape(-1).view(torch.uint8)
    b_bytes = torch.Tensor.contiguous(b).reshape(-1).view(torch.uint8)
    return bool(_torch_equal(a_bytes, b_bytes))


def _is_compile_error(exc: BaseException) -> bool:
    """Triton's kernel compilation failures (a syntax or type error inside a kernel)."""
    try:
        from triton.compiler.errors import CompilationError
    except ImportError:  # pragma: no cover
        return False
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, CompilationError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class CandidateWorker:
    def __init__(self, channel: Channel, source: str, device: torch.device, problem: str | None = None,
                 enforce_policy: bool = True) -> None:
        self.channel = channel
        self.source = os.path.realpath(source)
        self.problem = problem
        self.enforce_policy = enforce_policy
        self.timing: TimingSession | None = None
        self.device = device
        self.recorder = LaunchRecorder()
        self.model_class: Any = None
        self.model: torch.nn.Module | None = None
        self.watched: dict[str, Any] = {}
        self.refused: list[str] = []
        # The functions the evidence depends on, captured before any candidate code runs: a
        # candidate that rebinds the module's names changes nothing here (this object is
        # reachable only through frames or gc, which the audit policy refuses).
        self._send = Channel.send
        self._same_bytes = _same_bytes
        self._tampered = _tampered
        self._active_count = threading.active_count
        self._plain_outputs = _plain_outputs

    # -- phases -------------------------------------------------------------------------
    def import_candidate(self) -> None:
        import triton

        self.recorder.install()
        self.watched = _watchlist()
        self.refused = audit_policy.install(self.source, enforce=self.enforce_policy)
        module = common.load_module(self.source, "candidate")
        model_class = getattr(module, "ModelNew", None)
        if not isinstance(model_class, type):
            raise AttributeError("the solution does not define a class named ModelNew")
        self.model_class = model_class
        self._send(self.channel, "ready", {
            "python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__,
            "interpret": os.environ.get("TRITON_INTERPRET") == "1",
        })

    def build(self, init_inputs: Any, weight_seed: int) -> None:
        args, kwargs = common.split_init_inputs(init_inputs)
        common.seed_everything(weight_seed)
        model = self.model_class(*common.to_device(args, self.device), **common.to_device(kwargs, self.device))
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ModelNew(...) must build an nn.Module, got {type(model).__name__}")
        self.model = model.to(self.device)
        self._send(self.channel, "built", {"parameters": sum(p.numel() for p in self.model.parameters())})

    def call(self, nonce: str, inputs: list[Any]) -> None:
        model = self.model
        device_inputs = common.to_device(inputs, self.device, copy=True)
        input_tensors = common.tensors_in(device_inputs)
        pristine = [torch.Tensor.clone(t) for t in input_tensors]
        protected = [storage_span(t) for t in input_tensors]
        parameter_spans = [storage_span(t) for t in (*model.parameters(), *model.buffers())]
        threads_before = self._active_count()

        trace = OpTrace()
        self.recorder.start()
        try:
            with torch.no_grad(), trace:
                outputs = model(*device_inputs)
            common.synchronize(self.device)
        finally:
            launches = self.recorder.stop()

        candidate_spans = [span for launch in launches if launch.source_file == self.source
                           for span in launch.arg_spans]
        output_reports = []
        for tensor in common.tensors_in(outputs):
            plain = type(tensor) is torch.Tensor and not tensor.__dict__
            span = storage_span(tensor)
            empty = span[0] == span[1]
            aliases = None
            if not empty and _overlaps(span, protected):
                aliases = "input"
            elif not empty and _overlaps(span, parameter_spans):
                aliases = "parameter"
            output_reports.append({
                "plain": plain,
                "from_kernel": empty or _overlaps(span, candidate_spans),
                "aliases": aliases,
            })
        mutated = [i for i, (now, before) in enumerate(zip(input_tensors, pristine, strict=True))
                   if not self._same_bytes(now, before)]
        evidence = {
            "launches": [
                {"kernel": launch.kernel, "candidate": launch.source_file == self.source, "grid": launch.grid}
                for launch in launches
            ],
            "compute_ops": trace.compute_ops(),
            "compute_work": [trace.compute_elements, trace.compute_flops],
            "outputs": output_reports,
            "mutated_inputs": mutated,
            "threads_before": threads_before,
            "threads_after": self._active_count(),
            "tampered": self._tampered(self.watched, self.channel),
            "refused": list(self.refused),
        }
        self._send(self.channel, "called", {"nonce": nonce, "outputs": self._plain_outputs(outputs),
                                            "evidence": evidence})

    def observe(self) -> dict[str, Any]:
        """Thread count, tampering and refusals now (reported around every timed repetition)."""
        return {"threads": self._active_count(), "tampered": self._tampered(self.watched, self.channel),
                "refused": list(self.refused)}

    def profile(self, calls: int) -> None:
        """Kernel-level device times of a few forward calls, for the coverage of own kernels."""
        if self.problem is None or self.device.type != "cuda":
            raise ValueError("profiling needs a CUDA device and --problem")
        module = common.load_module(self.problem, "profile_problem")
        self.recorder.start()
        try:
            kernels = profile_forward(self.model, lambda: timing_inputs(module, secrets.randbits(63), self.device),
                                      calls)
        finally:
            launches = self.recorder.stop()
        mine = sorted({launch.kernel for launch in launches if launch.source_file == self.source})
        self._send(self.channel, "profiled", {
            "kernels": [[k.name, k.device_us, k.count] for k in kernels],
            "candidate_kernels": mine,
        })

    # -- loop ---------------------------------------------------------------------------
    def fail(self, phase: str, exc: BaseException) -> None:
        kind = "compile_error" if phase in ("import", "build") or _is_compile_error(exc) else "runtime_error"
        self._send(self.channel, "error", {"phase": phase, "kind": kind, "refused": list(self.refused),
                                           "message": common.format_error(exc, self.source)})

    def serve(self) -> None:
        try:
            self.import_candidate()
        except BaseException as exc:  # noqa: BLE001 - SystemExit from candidate code is a verdict too
            self.fail("import", exc)
            return
        while True:
            message = self.channel.recv()
            if message.kind == "exit":
                return
            phase = {"build": "build", "call": "forward"}.get(message.kind, "timing")
            try:
                if message.kind == "build":
                    self.build(message.payload["init_inputs"], int(message.payload["weight_seed"]))
                elif message.kind == "call":
                    self.call(str(message.payload["nonce"]), list(message.payload["inputs"]))
                elif message.kind == "time_start":
                    if self.problem is None:
                        raise ValueError("timing needs --problem")
                    module = common.load_module(self.problem, "timing_problem")
                    self.timing = TimingSession(self.channel, self.model, module, self.device,
                                                output_transform=self._plain_outputs, observe=self.observe)
                    self.timing.handle(message.kind, message.payload)
                elif message.kind == "profile":
                    self.profile(int(message.payload["calls"]))
                elif self.timing is not None and self.timing.handle(message.kind, message.payload):
                    pass
                else:
                    raise ValueError(f"unknown request {message.kind!r}")
            except BaseException as exc:  # noqa: BLE001
                self.fail(phase, exc)


def _plain_outputs(outputs: Any) -> Any:
    """Outputs rebuilt as plain tensors through class-level calls (defeats instance overrides)."""
    if isinstance(outputs, torch.Tensor):
        return torch.Tensor.detach(torch.Tensor.cpu(outputs)).as_subclass(torch.Tensor)
    if isinstance(outputs, tuple):
        return tuple(_plain_outputs(v) for v in outputs)
    if isinstance(outputs, list):
        return [_plain_outputs(v) for v in outputs]
    return outputs


def main() -> None:
    args = common.parse_worker_args("tritongym candidate worker (internal)")
    channel = common.open_channel(args.fd)
    CandidateWorker(channel, args.source, torch.device(args.device), args.problem,
                    enforce_policy=not args.allow_forbidden).serve()
    channel.close()
    # Leave without running interpreter shutdown hooks the candidate may have registered.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
