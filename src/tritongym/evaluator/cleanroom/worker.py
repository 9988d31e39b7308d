"""The clean-room worker: re-executes a forward's launch log; never imports candidate code.

Jailed like a candidate worker (its inputs come from a log a compromised process wrote), it
holds the solution's *text* (verified against the parent's hash) and nothing of the candidate's
module. Per replayed trial it receives the parent's own copy of the inputs and the log, rebuilds
the buffers (inputs, the state shipped once after ``__init__``, external bytes), runs each event
in order (ATen ops through ``torch.ops.aten``, kernels built by `cleanroom.kernels.KernelBuilder`
from the hashed source) and sends back *its* outputs and the PyTorch work it executed
(`optrace.op_work`, the measure the candidate's trace uses). The parent decides on these.

Protocol (parent → clean room): ``hello {key, source_sha256}`` → ``ready``;
``state {tensors}`` → ``state_set``; ``replay {inputs, log}`` → ``replayed {outputs, compute_ops,
work, moved, launches, raw_compute}``; ``time {inputs, log, reps, warmup_ms}`` → ``timed {ms, method}`` (`time_replay`);
``profile {inputs, log, calls}`` → ``profiled {kernels, candidate_compiled_kernels, ...}`` (GPU,
`profile_replay`); each may answer ``error {kind, message}`` with kind ``refused`` (a kernel is not
Triton or names what the clean room does not provide), ``diverged`` (the log cannot be executed
as written, or raises), ``unsupported`` (the CPU interpreter itself cannot run a construct),
``out_of_bounds`` (a kernel loaded or stored outside the buffers its launch was given: see
`cleanroom.bounds`, CPU tier); ``exit``. In every ``replay``, the results of ``torch.empty``-family
ops are filled with all-ones bytes (`optrace.poison_uninitialised`), as in the candidate's checked
trials. The parent sends a trial's log with that trial's inputs, and with fresh inputs the
candidate never saw (its counterfactual test); the room cannot tell which, and need not.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys
import time
from typing import Any

import torch

from tritongym.evaluator.cleanroom import bounds
from tritongym.evaluator.cleanroom.kernels import KernelBuilder, KernelRefused, tl_dtype
from tritongym.evaluator.common.channel import WIRE_DTYPES
from tritongym.evaluator.worker import startup as common
from tritongym.evaluator.worker.optrace import (
    GROWING_OPS,
    UNINITIALISED_OPS,
    op_moves,
    op_work,
    poison_growth,
    poison_uninitialised,
    storage_nbytes,
)

#: Compute ops that only move or select values (no arithmetic on them): glue on the inputs, like
#: views and copies, not PyTorch work on their values (`Replay.raw_compute`).
MOVEMENT_OPS = frozenset("aten::" + name for name in (
    "cat", "stack", "hstack", "vstack", "constant_pad_nd", "flip", "roll", "repeat", "index_select", "gather",
    "narrow_copy", "slice_copy", "select_copy", "permute_copy", "transpose_copy", "t_copy", "expand_copy",
    "view_copy", "unsqueeze_copy", "squeeze_copy", "_unsafe_view", "as_strided_copy", "split_with_sizes_copy",
    "split_copy", "unbind_copy", "diagonal_copy", "unfold_copy", "index", "take", "_reshape_copy", "reshape",
    "flatten", "unflatten", "movedim", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
    # selections and value-ordered permutations: each result is one of the inputs' elements (or its
    # position), never a value computed from several; a problem whose answer *is* such a selection
    # runs the reference's own op, which `oprules.covers_reference` refuses (Liger's sparsemax sorts
    # its rows in torch and computes everything else in its kernel)
    "sort", "argsort", "msort", "topk", "kthvalue", "max", "min", "amax", "amin", "aminmax", "argmax", "argmin",
    "median", "nanmedian", "mode", "cummax", "cummin",
))
#: Ops that are "random" by name but read their tensor arguments' values (``normal(mean, 0.0)``
#: returns ``mean`` bit for bit): judged by their arguments, as compute (`Replay.raw_compute`).
VALUE_READING_RANDOM_OPS = frozenset("aten::" + name for name in (
    "normal", "bernoulli", "poisson", "binomial", "multinomial", "_standard_gamma", "_sample_dirichlet",
    "rrelu_with_noise", "native_dropout", "dropout", "feature_dropout", "alpha_dropout",
))
#: Ops whose results hold none of their arguments' values (allocations "like" a tensor, fills).
FRESH_RESULT_OPS = frozenset("aten::" + name for name in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted", "zeros", "zeros_like",
    "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill", "fill_", "zero", "zero_",
    "scalar_tensor", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "arange",
    "linspace", "logspace", "eye", "normal_", "uniform_", "bernoulli_", "random_", "exponential_", "geometric_",
    "cauchy_", "log_normal_",
))

#: ATen ops a log may not name although they are in the ``aten`` namespace (host side effects).
DENIED_OPS = frozenset({"from_file", "_print", "save", "load", "_debug_has_internal_overlap", "_assert_async",
                        "record_stream", "_set_storage"})


class Diverged(Exception):
    """The log cannot be executed as written (the candidate's forward did something else)."""


def _op(name: Any) -> Any:
    """``aten::add.Tensor`` → the overload, from torch's own op registry (aten namespace only)."""
    if not isinstance(name, str) or not name.startswith("aten::"):
        raise Diverged(f"op {str(name)[:80]!r} is not an ATen op")
    base, _, overload = name[len("aten::"):].partition(".")
    if (not base.isidentifier() or (overload and not overload.isidentifier()) or base.startswith("__")
            or base in DENIED_OPS):
        raise Diverged(f"op {name[:80]!r} cannot be replayed")
    packet = getattr(torch.ops.aten, base, None)
    overload_fn = getattr(packet, overload or "default", None) if packet is not None else None
    if overload_fn is None:
        raise Diverged(f"op {name[:80]!r} does not exist in this torch")
    return overload_fn


class Replay:
    """One replayed forward: buffers by log number, events in order."""

    def __init__(self, device: torch.device, builder: KernelBuilder, state: list[torch.Tensor],
                 kernels: dict[str, Any], poison_fresh: bool = False) -> None:
        self.device = device
        #: Fill `torch.empty`-family results (`optrace.poison_uninitialised`), as the candidate's
        #: checked trials do: the outputs are then a function of the log, the inputs and the state
        #: alone, never of this process's allocator history. Checked replays only: timed and
        #: profiled ones leave the fills out of the measured span.
        self.poison_fresh = poison_fresh
        self.builder = builder
        self.state = state
        self.kernels = kernels
        self.storages: list[Any] = []
        self.compute_ops: dict[str, None] = {}
        self.elements = 0
        self.flops = 0
        #: elements copied into a new layout, and into a new dtype (`optrace.op_moves`)
        self.moved = [0, 0]
        self.launches = 0
        #: buffers holding the inputs' or the model state's values that no kernel has written since
        #: (copies and views of them included): PyTorch arithmetic on their floating-point values is
        #: the problem's work done in PyTorch, whatever it costs (`raw_compute`)
        self.raw: set[int] = set()
        #: ``[op, elements read]`` of each such op, in order
        self.raw_compute: list[list[Any]] = []
        #: compiled kernel name -> launches (GPU: `CompiledKernel.name`), for the coverage profile
        self.compiled: dict[str, int] = {}

    # -- buffers ----------------------------------------------------------------------------
    def _bytes_storage(self, content: torch.Tensor) -> Any:
        if not isinstance(content, torch.Tensor) or content.dtype != torch.uint8 or content.dim() != 1:
            raise Diverged("a shipped buffer is not a byte string")
        return content.to(self.device, copy=True).untyped_storage()

    def load_buffers(self, log: dict[str, Any], inputs: list[torch.Tensor]) -> None:
        buffers = log.get("buffers")
        blobs = log.get("blobs") or []
        if not isinstance(buffers, list) or not isinstance(blobs, list):
            raise Diverged("malformed log")
        for entry in buffers:
            if not isinstance(entry, dict):
                raise Diverged("malformed buffer entry")
            kind, index, nbytes = entry.get("kind"), entry.get("index"), entry.get("nbytes")
            if kind == "input":
                if not isinstance(index, int) or not 0 <= index < len(inputs):
                    raise Diverged("a buffer names an input that does not exist")
                storage = inputs[index].to(self.device, copy=True).contiguous().untyped_storage()
            elif kind == "state":
                if not isinstance(index, int) or not 0 <= index < len(self.state):
                    raise Diverged("a buffer names model state that was not shipped")
                storage = self._bytes_storage(self.state[index])
            elif kind == "external":
                blob = entry.get("blob")
                if not isinstance(blob, int) or not 0 <= blob < len(blobs):
                    raise Diverged("an external buffer has no bytes")
                storage = self._bytes_storage(blobs[blob])
            elif kind == "new":
                storage = None
            else:
                raise Diverged(f"unknown buffer kind {str(kind)[:40]!r}")
            if kind in ("input", "state"):
                self.raw.add(len(self.storages))
            if storage is not None and storage.nbytes() != nbytes:
                raise Diverged(f"buffer of {nbytes} bytes arrived with {storage.nbytes()}")
            self.storages.append(storage)

    def view(self, ref: dict[str, Any]) -> torch.Tensor:
        number = ref.get("T")
        if not isinstance(number, int) or not 0 <= number < len(self.storages):
            raise Diverged("a tensor refers to a buffer that does not exist")
        storage = self.storages[number]
        if storage is None:
            raise Diverged("a tensor is used before the event that makes it")
        dtype = WIRE_DTYPES.get(ref.get("d"))
        shape, stride, offset = ref.get("s"), ref.get("st"), ref.get("o")
        if dtype is None or not _ints(shape) or not _ints(stride) or not isinstance(offset, int) or len(shape) != len(
                stride):
            raise Diverged("malformed tensor reference")
        # `set_` grows a resizable storage instead of refusing a view past its end: the view would
        # then read bytes no log shipped (this process's allocator leftovers, never poisoned).
        if all(size > 0 for size in shape):
            low = offset + sum((size - 1) * step for size, step in zip(shape, stride, strict=True) if step < 0)
            high = offset + sum((size - 1) * step for size, step in zip(shape, stride, strict=True) if step > 0)
            itemsize = torch.empty(0, dtype=dtype).element_size()
            if low < 0 or (high + 1) * itemsize > storage.nbytes():
                raise Diverged(f"a tensor view does not fit its buffer: elements {low}..{high} of "
                               f"{storage.nbytes() // itemsize}")
        try:
            return torch.empty(0, dtype=dtype, device=self.device).set_(storage, offset, shape, stride)
        except RuntimeError as exc:
            raise Diverged(f"a tensor view does not fit its buffer: {exc}") from exc

    # -- values -----------------------------------------------------------------------------
    def decode(self, value: Any, depth: int = 0) -> Any:
        if depth > 10:
            raise Diverged("a value nested too deep")
        if value is None or type(value) in (bool, int, float):
            return value
        if isinstance(value, dict):
            if "T" in value:
                return self.view(value)
            if "L" in value and isinstance(value["L"], list):
                items = [self.decode(v, depth + 1) for v in value["L"]]
                return tuple(items) if value.get("tuple") else items
            if "str" in value and isinstance(value["str"], str):
                return value["str"]
            if "dtype" in value:
                dtype = WIRE_DTYPES.get(value["dtype"])
                if dtype is None:
                    raise Diverged(f"unknown dtype {str(value['dtype'])[:40]!r}")
                return dtype
            if "device" in value:
                return self.device
            if "layout" in value:
                if value["layout"] != "strided":
                    raise Diverged("only strided tensors can be replayed")
                return torch.strided
            if "memory_format" in value:
                fmt = getattr(torch, str(value["memory_format"]), None)
                if not isinstance(fmt, torch.memory_format):
                    raise Diverged("unknown memory format")
                return fmt
            if "tl_dtype" in value:
                return tl_dtype(value["tl_dtype"])
            if "constexpr" in value:
                from triton import language as tl

                inner = self.decode(value["constexpr"], depth + 1)
                if isinstance(inner, torch.Tensor):
                    raise Diverged("a tensor constexpr")
                return tl.constexpr(inner)
            if "kernel" in value:
                return self.builder.build(value["kernel"], self.kernels).jit
            if "descriptor" in value and isinstance(value["descriptor"], dict):
                return self._descriptor(value["descriptor"], depth)
        raise Diverged(f"a value that cannot be replayed ({type(value).__name__})")

    def _descriptor(self, fields: dict[str, Any], depth: int) -> Any:
        """A host-side TMA descriptor rebuilt from its logged fields (its base a tensor here)."""
        import dataclasses

        from triton.tools.tensor_descriptor import TensorDescriptor

        names = {field.name for field in dataclasses.fields(TensorDescriptor)}
        if not set(fields) <= names or "base" not in fields:
            raise Diverged("a tensor descriptor with fields this Triton does not have")
        decoded = {name: self.decode(field, depth + 1) for name, field in fields.items()}
        if not isinstance(decoded["base"], torch.Tensor):
            raise Diverged("a tensor descriptor without a base tensor")
        try:
            return TensorDescriptor(**decoded)
        except (AssertionError, TypeError, ValueError) as exc:
            raise Diverged(f"a tensor descriptor that cannot be rebuilt: {exc}") from exc

    def bind_outputs(self, logged: Any, actual: Any) -> None:
        """Results of an op take the log's buffer numbers; the layout must be what was logged."""
        if isinstance(logged, dict) and "T" in logged:
            if not isinstance(actual, torch.Tensor):
                raise Diverged("an op returned no tensor where the log has one")
            number = logged["T"]
            if not isinstance(number, int) or not 0 <= number < len(self.storages):
                raise Diverged("an op result refers to a buffer that does not exist")
            storage = actual.untyped_storage()
            if self.storages[number] is None:
                self.storages[number] = storage
            elif self.storages[number].data_ptr() != storage.data_ptr():
                raise Diverged("an op result landed in another buffer than the log says")
            if (list(actual.shape) != logged.get("s") or list(actual.stride()) != logged.get("st")
                    or str(actual.dtype).removeprefix("torch.") != logged.get("d")
                    or actual.storage_offset() != logged.get("o")):
                raise Diverged("an op result has another shape, stride or dtype than the log says")
        elif isinstance(logged, dict) and "L" in logged:
            if not isinstance(actual, (list, tuple)) or len(actual) != len(logged["L"]):
                raise Diverged("an op returned another number of results than the log says")
            for item, value in zip(logged["L"], actual, strict=True):
                self.bind_outputs(item, value)

    # -- events -----------------------------------------------------------------------------
    def run(self, log: dict[str, Any], inputs: list[torch.Tensor]) -> Any:
        self.load_buffers(log, inputs)
        return self.execute(log)

    def execute(self, log: dict[str, Any]) -> Any:
        """The events in order, on buffers `load_buffers` made (the part a timed replay times)."""
        events = log.get("events")
        if not isinstance(events, list):
            raise Diverged("malformed log")
        for event in events:
            if not isinstance(event, dict):
                raise Diverged("malformed event")
            if "op" in event:
                self._run_op(event)
            elif "launch" in event:
                self._run_launch(event)
            else:
                raise Diverged("an event that is neither an op nor a launch")
        return self.decode(log.get("outputs"))

    def _run_op(self, event: dict[str, Any]) -> None:
        func = _op(event["op"])
        args = self.decode(event.get("args"))
        kwargs = event.get("kwargs") or {}
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise Diverged("malformed op arguments")
        kwargs = {str(k): self.decode(v) for k, v in kwargs.items()}
        base = event["op"].partition(".")[0]
        before = storage_nbytes(args[0]) if self.poison_fresh and base in GROWING_OPS and args else None
        try:
            out = func(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the logged op does not run as logged
            raise Diverged(f"{event['op']} raised when replayed: {type(exc).__name__}: {str(exc)[:300]}") from exc
        self.bind_outputs(event.get("out"), out)
        if self.poison_fresh and base in UNINITIALISED_OPS:
            poison_uninitialised(out)
        if before is not None:
            poison_growth(args[0], before)
        work = op_work(func, args, kwargs, out)
        self._follow_raw(event, base, work)
        if work is not None:
            name = event["op"].rpartition(".")[0] if "." in event["op"] else event["op"]
            self.compute_ops.setdefault(name, None)
            self.elements += work[0]
            self.flops += work[1]
        else:
            layout, dtype = op_moves(func, args, kwargs, out)
            self.moved[0] += layout
            self.moved[1] += dtype

    def _follow_raw(self, event: dict[str, Any], base: str, work: tuple[int, int] | None) -> None:
        """Which buffers still hold the inputs' values after this op, and whether it computed on them."""
        read = _references(event.get("args")) + _references(event.get("kwargs"))
        raw_floats = [ref for ref in read if ref.get("T") in self.raw and _floating(ref.get("d"))]
        if raw_floats and base not in MOVEMENT_OPS and (work is not None or base in VALUE_READING_RANDOM_OPS):
            elements = work[0] if work is not None else sum(math.prod(r.get("s") or []) for r in raw_floats)
            self.raw_compute.append([base, int(elements)])
        carries = base not in FRESH_RESULT_OPS and any(ref.get("T") in self.raw for ref in read)
        for ref in _references(event.get("out")):
            if carries:
                self.raw.add(ref.get("T"))
            else:
                self.raw.discard(ref.get("T"))

    def _written_by_launch(self, event: dict[str, Any], written: set[int]) -> set[int]:
        """Buffer numbers a launch wrote: measured by the bounds check on the CPU tier; on a GPU
        (compiled kernels, nothing measured) every tensor argument that is not an input or state."""
        numbers = {ref.get("T") for ref in _references(event.get("args")) + _references(event.get("kwargs"))}
        if self.device.type == "cpu":
            return {n for n in numbers if type(n) is int and 0 <= n < len(self.storages)
                    and self.storages[n] is not None and self.storages[n].data_ptr() in written}
        return {n for n in numbers if n not in self.raw}

    def _run_launch(self, event: dict[str, Any]) -> None:
        kernel = self.builder.build(event["launch"], self.kernels).jit
        grid = event.get("grid")
        if not _ints(grid) or not 1 <= len(grid) <= 3 or any(g < 0 for g in grid):
            raise Diverged("a launch without a valid grid")
        args = self.decode(event.get("args"))
        kwargs = event.get("kwargs") or {}
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise Diverged("malformed launch arguments")
        kwargs = {str(k): self.decode(v) for k, v in kwargs.items()}
        buffers = bounds.tensor_buffers(list(getattr(kernel, "arg_names", None) or []), args, kwargs)
        try:
            with bounds.launch(str(event["launch"]).partition(":")[0], buffers) as checked:
                compiled = kernel.run(*args, grid=tuple(grid), warmup=False, **kwargs)
            self.raw -= self._written_by_launch(event, checked.written)
        except KernelRefused:
            raise
        except Exception as exc:  # noqa: BLE001
            beyond = _cause(exc, bounds.OutOfBounds)
            if beyond is not None:
                raise beyond from None
            text = common.interpreter_limit(exc)
            if text is not None:
                raise Unsupported(text) from exc
            raise Diverged(f"kernel {event['launch']} raised when replayed: {type(exc).__name__}: "
                           f"{str(exc)[:300]}") from exc
        self.launches += 1
        name = getattr(compiled, "name", None)  # the interpreter returns no compiled kernel
        if isinstance(name, str):
            self.compiled[name] = self.compiled.get(name, 0) + 1


class Unsupported(Exception):
    """The CPU interpreter itself cannot run a construct (measured here, not claimed)."""


def _cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """`exc` or the first exception of type `kind` it was raised from (the interpreter wraps)."""
    return next((error for error in common.exception_chain(exc) if isinstance(error, kind)), None)


def _references(value: Any) -> list[dict[str, Any]]:
    """The tensor references (``{"T": n, ...}``) in a logged value, in order."""
    found: list[dict[str, Any]] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "T" in item:
                found.append(item)
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def _floating(dtype: Any) -> bool:
    return isinstance(dtype, str) and dtype.startswith(("float", "bfloat", "complex"))


def _ints(value: Any) -> bool:
    return isinstance(value, list) and all(type(v) is int for v in value)


def plain(outputs: Any) -> Any:
    if isinstance(outputs, torch.Tensor):
        return outputs.detach().cpu().clone()
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(plain(v) for v in outputs)
    return outputs




def _fresh_replay(device: torch.device, builder: KernelBuilder, state: list[torch.Tensor], log: dict[str, Any],
                  tensors: list[torch.Tensor]) -> Replay:
    """A replay whose buffers are made (copied from the parent's inputs and the state) and ready:
    what a measured replay does before its timed or profiled region begins."""
    replay = Replay(device, builder, state, log.get("kernels") or {})
    replay.load_buffers(log, tensors)
    common.synchronize(device)
    return replay


def _dispatch_ms(replay: Replay, log: dict[str, Any]) -> float:
    """Host time to queue one replay's events (no synchronize inside), then wait for them."""
    started = time.perf_counter()
    replay.execute(log)
    dispatched = (time.perf_counter() - started) * 1e3
    common.synchronize(replay.device)
    return dispatched


def time_replay(device: torch.device, builder: KernelBuilder, state: list[torch.Tensor],
                payload: dict[str, Any]) -> dict[str, Any]:
    """Time the replay of one trial's log, as the candidate worker times a forward (`RepTimer`).

    Per repetition the buffers are made afresh *outside* the timed span (inputs, model state and
    external bytes copied from the parent's copy, so no repetition sees another's allocations),
    then only the events run inside it: on a GPU behind an L2 flush and a hold longer than the
    replay's own Python dispatch, between CUDA events (the logged work's device time); on a CPU
    with the host clock. No candidate Python runs here, so the figure is the logged work's own
    cost, which no report of the candidate worker can lower.
    """
    from tritongym.evaluator.worker.timing import RepTimer

    log, inputs = payload.get("log"), payload.get("inputs")
    reps, warmup_ms = payload.get("reps"), payload.get("warmup_ms")
    if not isinstance(log, dict) or not isinstance(inputs, list):
        raise Diverged("malformed time request")
    # The parent sends its own options here (`EvalOptions.timing_reps`, `warmup_ms`), never a log's.
    if type(reps) is not int or reps < 1 or type(warmup_ms) not in (int, float) or not 0 <= warmup_ms < math.inf:
        raise Diverged("a time request needs a positive number of repetitions and a finite warm-up")
    tensors = common.tensors_in(inputs)
    timer = RepTimer(device)
    with torch.no_grad():
        timer.warm_up(lambda: _fresh_replay(device, builder, state, log, tensors).execute(log), list,
                      float(warmup_ms))
        timer.calibrate()
        if device.type == "cuda":
            # The replay decodes its log in Python between launches, host work the candidate's own
            # forward does not have: the stream is held until the replay is dispatched, so the span
            # is the logged work's device time (`RepTimer.hide_dispatch`).
            timer.hide_dispatch(max(_dispatch_ms(_fresh_replay(device, builder, state, log, tensors), log)
                                    for _ in range(3)))
        times = []
        for _ in range(reps):
            replay = _fresh_replay(device, builder, state, log, tensors)
            times.append(timer.time_call(replay.execute, [log]).ms)
    return {"ms": times, "method": f"clean-room replay of the logged launches and ops; {timer.method}"}


def profile_replay(device: torch.device, builder: KernelBuilder, state: list[torch.Tensor],
                   payload: dict[str, Any]) -> dict[str, Any]:
    """Device time per kernel over `calls` replays of one trial's log (GPU only), for coverage.

    The candidate's kernels are the ones the replays launched, by exact compiled name, with their
    launch counts (`coverage.is_candidate_kernel`); everything else on the device timeline came
    from the logged ATen ops. Buffers are made before the profiled region, so copies of the
    inputs and state are not in the denominator. The reply has the candidate worker's
    ``profiled`` shape, so the parent parses both alike (`measurement.parse_profile_reply`).
    """
    from tritongym.evaluator.worker.profiling import profile_forward

    log, inputs, calls = payload.get("log"), payload.get("inputs"), payload.get("calls")
    if not isinstance(log, dict) or not isinstance(inputs, list) or type(calls) is not int or calls < 1:
        raise Diverged("malformed profile request")
    if device.type != "cuda":
        raise Diverged("profiling needs a CUDA device")
    tensors = common.tensors_in(inputs)
    made: list[Replay] = []

    def prepared() -> list[Any]:
        made.append(_fresh_replay(device, builder, state, log, tensors))
        return [made[-1]]

    with torch.no_grad():
        prepared()[0].execute(log)  # compiled before the profile
        made.clear()
        times = profile_forward(lambda replay: replay.execute(log), prepared, calls)
    counts: dict[str, int] = {}
    for replay in made:
        for name, launched in replay.compiled.items():
            counts[name] = counts.get(name, 0) + launched
    return {"kernels": [[k.name, k.device_us, k.count] for k in times], "candidate_kernels": sorted(counts),
            "candidate_compiled_kernels": sorted(counts), "candidate_launch_counts": counts}


def serve(channel: Any, source: str, device: torch.device) -> None:
    builder = KernelBuilder(source)
    state: list[torch.Tensor] = []
    channel.send("ready", {"torch": torch.__version__})
    while True:
        message = channel.recv()
        payload = message.payload if isinstance(message.payload, dict) else {}
        if message.kind == "exit":
            return
        if message.kind == "state":
            tensors = payload.get("tensors")
            state = list(tensors) if isinstance(tensors, list) else []
            channel.send("state_set", {"count": len(state)})
            continue
        if message.kind not in ("replay", "time", "profile"):
            channel.send("error", {"kind": "diverged", "message": f"unknown request {message.kind!r}"})
            continue
        try:
            if message.kind == "time":
                channel.send("timed", time_replay(device, builder, state, payload))
                continue
            if message.kind == "profile":
                channel.send("profiled", profile_replay(device, builder, state, payload))
                continue
            log = payload.get("log")
            replay = Replay(device, builder, state, (log.get("kernels") if isinstance(log, dict) else None) or {},
                            poison_fresh=True)
            inputs = payload.get("inputs")
            if not isinstance(inputs, list):
                raise Diverged("no inputs")
            with torch.no_grad():
                outputs = replay.run(log or {}, common.tensors_in(inputs))
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            channel.send("replayed", {"outputs": plain(outputs), "compute_ops": list(replay.compute_ops),
                                      "work": [replay.elements, replay.flops], "moved": replay.moved,
                                      "launches": replay.launches, "raw_compute": replay.raw_compute[:8]})
        except KernelRefused as exc:
            channel.send("error", {"kind": "refused", "message": str(exc)[:2000]})
        except Unsupported as exc:
            channel.send("error", {"kind": "unsupported", "message": str(exc)[:2000]})
        except bounds.OutOfBounds as exc:
            channel.send("error", {"kind": "out_of_bounds", "message": str(exc)[:2000]})
        except Diverged as exc:
            channel.send("error", {"kind": "diverged", "message": str(exc)[:2000]})
        except Exception as exc:  # noqa: BLE001 - whatever a log makes happen is a verdict on the log
            channel.send("error", {"kind": "diverged",
                                   "message": f"{type(exc).__name__}: {str(exc)[:1000]}"})


def main() -> None:
    args = common.parse_worker_args("tritongym clean-room worker (internal)")
    channel = common.open_channel(args.fd)
    payload = common.accept_hello(channel, "clean-room")
    with open(args.source, encoding="utf-8") as handle:
        source = handle.read()
    if hashlib.sha256(source.encode("utf-8")).hexdigest() != payload.get("source_sha256"):
        channel.send("error", {"kind": "diverged", "message": "the solution text differs from the checked one"})
        os._exit(0)
    device = torch.device(args.device)
    import triton  # noqa: F401 - compiled kernels need it; imported before any request

    if device.type == "cpu":
        from tritongym.evaluator.worker import interpreter_fixes

        interpreter_fixes.install()
        bounds.install()
    serve(channel, source, device)
    channel.close()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
