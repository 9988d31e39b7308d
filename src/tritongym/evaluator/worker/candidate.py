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

Protocol (parent → candidate): the parent's first frame is ``hello {key, source_sha256}``, read
before any candidate code runs: from then on every frame the worker sends is authenticated with
that key (`channel.Channel.enable_signing`), so a candidate that finds the socket cannot speak for
the harness. The worker checks that the solution file is the one the parent checked, imports the
candidate and sends ``ready {kernels}`` or ``error``; ``build {init_inputs, weight_seed}`` →
``built``; ``call {nonce, inputs}`` → ``called {nonce, outputs, evidence}``; the timing
requests of `timing.TimingSession` and ``profile {calls}`` → ``profiled {kernels,
candidate_kernels}`` (the problem module is loaded only for these, to make fresh inputs);
``exit``. Errors: ``error {phase, kind, message}``.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
import threading
import time
from typing import Any

import torch

from tritongym.evaluator.common.channel import Channel
from tritongym.evaluator.worker import audit_policy, autotune, kernels
from tritongym.evaluator.worker import startup as common
from tritongym.evaluator.worker.hostread import HostReadTrace
from tritongym.evaluator.worker.launches import LaunchRecorder
from tritongym.evaluator.worker.launchlog import LaunchLog, distinct_storages, storage_bytes
from tritongym.evaluator.worker.optrace import (
    Attribution,
    DataFlow,
    OpTrace,
    allocator_poison,
    install_allocator_poison,
    storage_span,
)
from tritongym.evaluator.worker.profiling import profile_forward
from tritongym.evaluator.worker.timing import TimingSession, timing_inputs

# Captured before any candidate code runs (this module is imported first).
_active_count = threading.active_count
_torch_equal = torch.equal
_TORCH_DIR = os.path.realpath(os.path.dirname(torch.__file__)) + os.sep


def _mode_state() -> dict[str, Any]:
    """torch's private mode-stack switches, captured before the candidate import."""
    names = ("_len_torch_function_stack", "_pop_torch_function_stack", "_len_torch_dispatch_stack",
             "_pop_torch_dispatch_stack", "_is_torch_function_enabled")
    return {name: getattr(torch._C, name, None) for name in names}


def _clear_modes(state: dict[str, Any]) -> list[str]:
    """Pop every torch-function and dispatch mode still active; what was left is tampering.

    The worker's own code (encoding outputs, comparing inputs, the identity checks) must never
    run under a mode the candidate left behind (a red-team finding: a persistent
    `TorchFunctionMode` computed lazily while the harness encoded outputs).
    """
    left: list[str] = []
    for length, pop, what in (("_len_torch_function_stack", "_pop_torch_function_stack", "torch-function"),
                              ("_len_torch_dispatch_stack", "_pop_torch_dispatch_stack", "dispatch")):
        if state[length] is None or state[pop] is None:
            continue
        guard = 0
        while state[length]() > 0 and guard < 64:
            # The dispatch stack's pop takes the mode key (None: the user stack).
            mode = state[pop](None) if what == "dispatch" else state[pop]()
            del mode
            left.append(f"a {what} mode left active after the forward (the mode stack did not unwind)")
            guard += 1
    enabled = state["_is_torch_function_enabled"]
    if enabled is not None and not enabled():
        left.append("torch-function handling left switched off after the forward")
    return left


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
    import hmac
    import json
    import json.decoder
    import json.encoder
    import socket
    import struct

    import tritongym.evaluator.common.channel as channel_module
    import tritongym.evaluator.worker.hostread as hostread_module
    import tritongym.evaluator.worker.kernels as kernels_module
    import tritongym.evaluator.worker.launches as launches_module
    import tritongym.evaluator.worker.optrace as optrace_module
    import tritongym.evaluator.worker.timing as timing_module

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
    for module in (channel_module, launches_module, optrace_module, timing_module, common, kernels_module,
                   hostread_module, audit_policy):
        # Every global of the harness's modules, tables included: a candidate that imports the
        # package and rebinds `KERNEL_BUILTINS` or the FLOP table is named (the tables themselves
        # are immutable: frozensets and read-only mappings).
        for name, value in vars(module).items():
            if not name.startswith("__") and not isinstance(value, type(sys)):
                watched[f"{module.__name__}.{name}"] = value
    for module in (json, json.encoder, json.decoder, socket, struct, hmac):
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
                optrace_module.DataFlow, optrace_module.Attribution, hostread_module.HostReadTrace,
                kernels_module.BodyChecker, timing_module.RepTimer, timing_module.TimingSession):
        for name, value in vars(cls).items():
            if callable(value):
                watched[f"{cls.__module__}.{cls.__qualname__}.{name}"] = value
    import triton
    from triton.runtime import jit

    watched["triton.runtime.jit.JITFunction.run"] = _static_get(jit.JITFunction, "run")
    # Triton's decorators: the static gate leaves `triton.jit = ...` to this check (static.
    # WATCHED_AT_RUN_TIME), so a fallback that never runs is not tampering and a real rebinding is.
    for name in ("jit", "autotune", "heuristics"):
        watched[f"triton.{name}"] = getattr(triton, name)
    watched["triton.runtime.jit.jit"] = jit.jit
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
    if dotted.startswith(("tritongym.", "triton.runtime.", "json.")):
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


def _torch_own_wrapper(new: Any, original: Any, _getattr: Any = getattr, _realpath: Any = os.path.realpath,
                       _torch_dir: str = _TORCH_DIR) -> bool:
    """Whether `new` is torch's own wrapper around `original` (torch rebinding itself lazily).

    Importing `torch._dynamo` (which `@torch.compiler.disable` does) replaces
    `torch.manual_seed` with a wrapper defined in torch's own files. What decides is what the
    new object is: a function defined inside torch's package whose ``__wrapped__`` chain leads to
    the function that was there. Such a wrapper behaves as the original, whoever installed it.
    """
    code = _getattr(new, "__code__", None)
    if code is None or not _realpath(code.co_filename).startswith(_torch_dir):
        return False
    current, hops = new, 0
    while current is not None and hops < 8:
        current = _getattr(current, "__wrapped__", None)
        if current is original:
            return True
        hops += 1
    return False


def _tampered(watched: dict[str, Any], channel: Channel, _resolve: Any = _resolve, _vars: Any = vars,
              _sorted: Any = sorted, _set: Any = set, _own: Any = _torch_own_wrapper) -> list[str]:
    """Watched names whose current value is not the one captured, and extra channel attributes.

    A change that is torch's own wrapper of the captured function is accepted (and becomes the
    captured value); anything else is reported.
    """
    changed = []
    for name, original in list(watched.items()):
        now = _resolve(name)
        if now is original:
            continue
        if name.startswith("torch.") and _own(now, original):
            watched[name] = now
            continue
        changed.append(name)
    extra = _sorted(_set(_vars(channel)) - {"sock", "max_message_bytes", "_verify_key", "_received", "_signed_send"})
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
    return any(isinstance(error, CompilationError) for error in common.exception_chain(exc))


class CandidateWorker:
    def __init__(self, channel: Channel, source: str, device: torch.device, problem: str | None = None,
                 enforce_policy: bool = True, source_text: str | None = None) -> None:
        self.channel = channel
        self.source = os.path.realpath(source)
        self.problem = problem
        self.enforce_policy = enforce_policy
        self.timing: TimingSession | None = None
        self.device = device
        # The solution's text as verified against the parent's hash, before the import: kernel
        # bodies are checked against this, not against whatever the file holds later.
        self.source_text = source_text if source_text is not None else ""
        self.body_checker = kernels.BodyChecker(self.source_text, self.source)
        self.recorder = LaunchRecorder(self.source, self.body_checker)
        # What each forward did, for the clean room to do again (a proposal, checked there).
        self.launch_log = LaunchLog(self.source)
        self.recorder.log = self.launch_log
        self.state_tensors: list[torch.Tensor] = []
        self.attribution = Attribution(self.source)
        self.model_class: Any = None
        self.model: torch.nn.Module | None = None
        self.watched: dict[str, Any] = {}
        self.refused: list[str] = []
        self.kernels: list[str] = []
        self.threads_baseline = 0
        self.autotune: autotune.AutotuneControl | None = None
        # The functions the evidence depends on, captured before any candidate code runs: a
        # candidate that rebinds the module's names changes nothing here (this object is
        # reachable only through frames or gc, which the audit policy refuses).
        self._send = Channel.send
        self._same_bytes = _same_bytes
        self._tampered = _tampered
        self._active_count = threading.active_count
        self._plain_outputs = _plain_outputs
        self._modes = _mode_state()
        self._clear_modes = _clear_modes
        self._source_digest = hashlib.sha256(self.source_text.encode("utf-8")).hexdigest()

    # -- phases -------------------------------------------------------------------------
    def import_candidate(self) -> None:
        import triton

        self.recorder.install()
        # Autotuned kernels: every config is checked on the trials, no GPU needed to choose.
        self.autotune = autotune.install(interpret=self.device.type == "cpu")
        # Inductor-style code (KernelBook, KernelLLM) imports helpers torch >= 2.9 removed
        # (`triton_heuristics.grid`): provided on both tiers.
        from tritongym.evaluator.worker import inductor_compat

        inductor_compat.install()
        # Inductor's own allocators fill what they make during checked trials, as logged
        # `torch.empty` calls are (`optrace.poison_uninitialised`).
        install_allocator_poison()
        if self.device.type == "cpu":
            # The CPU tier runs honest Triton as a GPU would: float scalar arguments and
            # libdevice functions (interpreter_fixes).
            from tritongym.evaluator.worker import interpreter_fixes

            interpreter_fixes.install()
        self.watched = _watchlist()
        self.threads_baseline = self._active_count()
        self.refused = audit_policy.install(self.source, enforce=self.enforce_policy)
        module = common.load_module(self.source, "candidate")
        model_class = getattr(module, "ModelNew", None)
        if not isinstance(model_class, type):
            raise AttributeError("the solution does not define a class named ModelNew")
        self.model_class = model_class
        found = kernels.discover(module, self.source, extra=(model_class,))
        self.kernels = [info.name for info in found]
        findings = [f for info in found for f in self.body_checker.check(info.function)]
        self._send(self.channel, "ready", {
            "python": sys.version.split()[0], "torch": torch.__version__, "triton": triton.__version__,
            "interpret": os.environ.get("TRITON_INTERPRET") == "1", "kernels": self.kernels,
            "kernel_findings": list(dict.fromkeys(findings))[:20],
        })

    def build(self, init_inputs: Any, weight_seed: int) -> None:
        args, kwargs = common.split_init_inputs(init_inputs)
        common.seed_everything(weight_seed)
        model = self.model_class(*common.to_device(args, self.device), **common.to_device(kwargs, self.device))
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ModelNew(...) must build an nn.Module, got {type(model).__name__}")
        self.model = model.to(self.device)
        left = self._clear_modes(self._modes)
        # The model's state as built, before any input exists: the clean room starts every
        # replayed forward from these values.
        self.state_tensors = distinct_storages(model_state(self.model))
        self._send(self.channel, "built", {"parameters": sum(p.numel() for p in self.model.parameters()),
                                           "tampered": left,
                                           "state": [storage_bytes(t) for t in self.state_tensors]})

    def _source_changed(self) -> list[str]:
        """The solution file must still hold the text that was checked (the jail binds it read-only)."""
        try:
            with open(self.source, "rb") as handle:
                now = hashlib.sha256(handle.read()).hexdigest()
        except OSError:
            return ["the solution file became unreadable"]
        return [] if now == self._source_digest else ["the solution file was changed after it was checked"]

    def call(self, nonce: str, inputs: list[Any], trial: int = 0) -> None:
        model = self.model
        if self.autotune is not None:
            self.autotune.select(trial)
        device_inputs = common.to_device(inputs, self.device, copy=True)
        input_tensors = common.tensors_in(device_inputs)
        pristine = [torch.Tensor.clone(t) for t in input_tensors]
        protected = [storage_span(t) for t in input_tensors]
        state_tensors = [*model.parameters(), *model.buffers()]
        parameter_spans = [storage_span(t) for t in state_tensors]

        flow = DataFlow(inputs=input_tensors, protected=[*input_tensors, *state_tensors])
        trace = OpTrace(self.attribution, flow, log=self.launch_log, poison_fresh=True)
        host_reads = HostReadTrace(self.attribution, flow, trace)
        self.recorder.start(flow)
        self.launch_log.start(input_tensors, self.state_tensors)
        outputs = None
        try:
            with torch.no_grad(), allocator_poison(), host_reads, trace:
                outputs = model(*device_inputs)
            common.synchronize(self.device)
        finally:
            launches = self.recorder.stop()
            left_modes = self._clear_modes(self._modes)
            call_log = self.launch_log.finish(outputs)

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
                "from_kernel": empty or _overlaps(span, candidate_spans) or flow.is_kernel_written(tensor),
                "aliases": aliases,
            })
        mutated = [i for i, (now, before) in enumerate(zip(input_tensors, pristine, strict=True))
                   if not self._same_bytes(now, before)]
        evidence = {
            "launches": [
                {"kernel": launch.kernel, "candidate": launch.source_file == self.source, "grid": launch.grid,
                 "compiled": launch.compiled_name}
                for launch in launches
            ],
            "compute_ops": trace.compute_ops(),
            "compute_work": [trace.compute_elements, trace.compute_flops],
            "moved_elements": trace.moved_elements,
            "host_reads": [host_reads.elements + trace.device_to_host_elements, host_reads.examples
                           + ([f"{trace.device_to_host_elements} element(s) copied from the device to the host"]
                              if trace.device_to_host_elements else [])],
            "kernel_findings": list(self.recorder.findings)[:20],
            "autotune": self.autotune.report() if self.autotune is not None else [],
            "outputs": output_reports,
            "mutated_inputs": mutated,
            "threads_before": self.threads_baseline,
            "threads_after": self._active_count(),
            "foreign_thread_launches": self.recorder.foreign_thread_launches,
            "tampered": [*self._tampered(self.watched, self.channel), *left_modes, *host_reads.blinded,
                         *self._source_changed()],
            "refused": list(self.refused),
        }
        self._send(self.channel, "called", {"nonce": nonce, "outputs": self._plain_outputs(outputs),
                                            "evidence": evidence, "log": call_log.to_payload()})

    def observe(self) -> dict[str, Any]:
        """Thread count, tampering and refusals now (reported around every timed repetition)."""
        left = self._clear_modes(self._modes)
        return {"threads": self._active_count(), "tampered": [*self._tampered(self.watched, self.channel), *left],
                "refused": list(self.refused)}

    def profile(self, calls: int) -> None:
        """Kernel-level device times of a few forward calls, for the coverage of own kernels."""
        if self.problem is None or self.device.type != "cuda":
            raise ValueError("profiling needs a CUDA device and --problem")
        module = common.load_module(self.problem, "profile_problem")
        self.recorder.start()
        try:
            kernel_times = profile_forward(self.model,
                                           lambda: timing_inputs(module, secrets.randbits(63), self.device), calls)
        finally:
            launches = self.recorder.stop()
        own = [launch for launch in launches if launch.source_file == self.source]
        mine = sorted({launch.kernel for launch in own})
        counts: dict[str, int] = {}
        for launch in own:
            if launch.compiled_name:
                counts[launch.compiled_name] = counts.get(launch.compiled_name, 0) + 1
        observed = self.observe()
        self._send(self.channel, "profiled", {
            "kernels": [[k.name, k.device_us, k.count] for k in kernel_times],
            "candidate_kernels": mine,
            "candidate_compiled_kernels": sorted(counts),
            "candidate_launch_counts": counts,
            "tampered": observed["tampered"],
            "refused": observed["refused"],
        })

    # -- loop ---------------------------------------------------------------------------
    def fail(self, phase: str, exc: BaseException) -> None:
        kind = "compile_error" if phase in ("import", "build") or _is_compile_error(exc) else "runtime_error"
        if self.device.type == "cpu" and common.interpreter_limit(exc) is not None:
            kind = "unsupported"
        self._clear_modes(self._modes)
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
                    self.call(str(message.payload["nonce"]), list(message.payload["inputs"]),
                              int(message.payload.get("trial", 0)))
                elif message.kind == "time_start":
                    if self.autotune is not None:
                        self.autotune.release()  # timing uses the autotuner's own choice
                    if self.problem is None:
                        raise ValueError("timing needs --problem")
                    module = common.load_module(self.problem, "timing_problem")
                    self.timing = TimingSession(self.channel, self.model, module, self.device,
                                                output_transform=self._plain_outputs, observe=self.observe)
                    self.timing.handle(message.kind, message.payload)
                elif message.kind == "profile":
                    if self.autotune is not None:
                        self.autotune.release()
                    self.profile(int(message.payload["calls"]))
                elif self.timing is not None and self.timing.handle(message.kind, message.payload):
                    pass
                else:
                    raise ValueError(f"unknown request {message.kind!r}")
            except BaseException as exc:  # noqa: BLE001
                self.fail(phase, exc)


def model_state(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters, buffers and plain tensor attributes of every submodule, each storage once."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    for module in model.modules():
        values = [*module._parameters.values(), *module._buffers.values(),
                  *(v for v in vars(module).values() if isinstance(v, torch.Tensor))]
        for value in values:
            if isinstance(value, torch.Tensor) and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
    return found


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
    # The parent speaks first: the channel key and the hash of the solution it checked. Nothing
    # of the candidate has run yet.
    payload = common.accept_hello(channel, "candidate")
    device = torch.device(args.device)
    if device.type == "cuda":
        # CUDA is initialised and a tiny Triton kernel compiled and launched before any candidate
        # code runs: a broken driver or jail is the machine's fault (an EvaluatorError in the
        # parent), never the candidate's compile_error. Then the candidate's allocator is capped.
        from tritongym.evaluator.common.device import cap_candidate_memory, probe_device

        problem = probe_device(device)
        if problem is not None:
            channel.send("error", {"phase": "import", "kind": "device_error", "refused": [], "message": problem})
            os._exit(0)
        fraction = payload.get("memory_fraction", 0.5)
        cap_candidate_memory(device, float(fraction) if isinstance(fraction, (int, float)) else 0.5)
    with open(args.source, encoding="utf-8") as handle:
        source_text = handle.read()
    if hashlib.sha256(source_text.encode("utf-8")).hexdigest() != payload.get("source_sha256"):
        channel.send("error", {"phase": "import", "kind": "compile_error", "refused": [],
                               "message": "the solution file differs from the source that was checked"})
        os._exit(0)
    worker = CandidateWorker(channel, args.source, device, args.problem,
                             enforce_policy=not args.allow_forbidden, source_text=source_text)
    worker.serve()
    channel.close()
    # Leave without running interpreter shutdown hooks the candidate may have registered.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
