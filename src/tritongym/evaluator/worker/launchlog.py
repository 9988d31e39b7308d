"""The launch log: what a forward did, written down so that a clean room can do it again.

Runs in the candidate worker, beside candidate code, so everything here is a **proposal**: the
clean room (`evaluator/cleanroom/worker.py`) re-executes the log on the parent's own copy of the inputs, in a
process that never imported the candidate, and the verdict is decided on *its* outputs. A log
that lies about what the forward did either does not reproduce the outputs (an integrity
finding) or describes a computation that really computes them with the solution's own Triton
kernels and a bounded amount of PyTorch glue and host data, which is what the reward pays for.

A log is, per forward call, a list of events in the order they ran:

* ``{"op": "aten::add.Tensor", "args": [...], "kwargs": {...}, "out": [...]}`` for every ATen op
  dispatched outside a Triton launch (the dispatch mode of `optrace.OpTrace` calls `on_op`);
  ops dispatched *inside* a launch (grid callables, the interpreter's own copies) are not logged:
  whatever work they do is not replayed, so it cannot reach the clean room's outputs.
* ``{"launch": key, "grid": [x, y, z], "args": [...], "kwargs": {...}}`` for every leaf Triton
  launch (`launches.LaunchRecorder` calls `on_launch`): the kernel is named by its function's
  name and first line in the hashed source, with every argument as the leaf received it
  (autotune configs and heuristics already applied) plus the default of every parameter it did
  not receive (the value Python binds, so the clean room never evaluates a default itself), and
  the grid as Triton resolved it: ints, read where Triton reads them (`grid_dims`).

Each kernel of the log has an entry (`LaunchLog._note_kernel`): the bindings of the globals its
body names, and its *header*: the values its annotations and defaults evaluated to in the
candidate's module (``scale: tl.float32``, ``FP8_MAX: tl.constexpr = float8_info.max``). The
clean room puts these values in place of the header's text instead of evaluating it.

Tensors are references to **buffers** (storages) with their view (offset, shape, stride, dtype).
A buffer is a problem input (``input i``), model state present after ``__init__`` (``state i``,
shipped once, before the first forward), the output of an earlier event (``new``), or of unknown
origin (``external``: its bytes are shipped with the log when first used; that is data the host
made, and the parent charges it to the host-data budget when it depends on the trial).
Scalars are JSON values; dtypes, devices and layouts are tagged; a host-side TMA descriptor
(``TensorDescriptor.from_tensor``) is its fields, its base a tensor reference. Anything else (a
Python object as an argument) cannot be logged and the call's log says why.
"""

from __future__ import annotations

import builtins
import dataclasses
import operator
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from tritongym.evaluator.common.channel import MAX_EXTERNAL_BYTES

#: Most events one forward may log (a real forward launches tens to hundreds).
MAX_EVENTS = 20_000
#: Longest string argument (``rounding_mode="floor"``, a constexpr activation name).
MAX_STRING = 200

#: Modules whose objects a kernel may use (the clean room builds kernels from these only).
KERNEL_MODULES = frozenset({
    "triton", "triton.language", "triton.language.core", "triton.language.math", "triton.language.standard",
    "triton.language.extra", "triton.language.extra.libdevice", "triton.language.extra.cuda",
    "triton.language.extra.cuda.libdevice", "triton.language.extra.hip", "triton.language.extra.hip.libdevice",
    "torch._inductor.runtime.triton_helpers", "torch._inductor.runtime.triton_compat",
})


def in_triton_language(module: Any) -> bool:
    """Whether `module` (a module name) is Triton's language package or one of its submodules
    (``triton.language.extra.cuda.gdc``): what these define is Triton's own kernel code."""
    return isinstance(module, str) and (module == "triton.language" or module.startswith("triton.language."))


class Unloggable(Exception):
    """The forward did something the log cannot describe (the reason is the message)."""


@dataclass
class Buffer:
    kind: str  # input | state | new | external
    index: int = -1
    nbytes: int = 0
    device: str = "cpu"
    blob: int = -1

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "index": self.index, "nbytes": self.nbytes, "blob": self.blob}


@dataclass
class CallLog:
    """One forward's log, ready for the channel (`to_payload`)."""

    buffers: list[Buffer] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)
    blobs: list[torch.Tensor] = field(default_factory=list)
    outputs: Any = None
    error: str | None = None

    def to_payload(self) -> dict[str, Any]:
        return {"buffers": [b.describe() for b in self.buffers], "events": self.events, "kernels": self.kernels,
                "blobs": self.blobs, "outputs": self.outputs, "error": self.error}


def storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy of the whole storage under `tensor`, as bytes (views are rebuilt on it)."""
    storage = torch.Tensor.untyped_storage(tensor)
    size = storage.nbytes()
    content = torch.empty(size, dtype=torch.uint8)
    if size:
        whole = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage, 0, (size,), (1,))
        content.copy_(whole)
    return content


def distinct_storages(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """One tensor per storage, in first-seen order (tied weights and views share one)."""
    seen: set[int] = set()
    kept = []
    for tensor in tensors:
        key = LaunchLog._storage_id(tensor)
        if key not in seen:
            seen.add(key)
            kept.append(tensor)
    return kept


def kernel_key(fn: Any) -> str:
    """``name:first line`` of a kernel's Python function (decorator lines included, as CPython counts)."""
    return f"{fn.__name__}:{fn.__code__.co_firstlineno}"


def _jit_source(value: Any) -> Any:
    """The Python function behind a `JITFunction`/`InterpretedFunction` (through autotune/heuristics)."""
    seen = 0
    while seen < 6 and not isinstance(value, types.FunctionType):
        inner = getattr(value, "fn", None)
        if inner is None:
            return None
        value, seen = inner, seen + 1
    return value if isinstance(value, types.FunctionType) else None


def _is_jit(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("triton.runtime") and _jit_source(value) is not None


def descriptor_fields(value: Any) -> dict[str, Any] | None:
    """The fields of a host-side TMA descriptor (`triton.tools.tensor_descriptor.TensorDescriptor`,
    exactly that class), or None for anything else: a base tensor, its shape, strides and block
    shape, padding and flags. The clean room rebuilds the same descriptor from them."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # a Triton without host descriptors
        return None
    if type(value) is not TensorDescriptor:
        return None
    return {field.name: getattr(value, field.name) for field in dataclasses.fields(TensorDescriptor)}


def _unbound_defaults(fn: Any, positional: int, kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
    """The parameters of `fn` a launch with `positional` arguments and `kwargs` leaves to their
    defaults, with those defaults (positional-only ones excepted: they cannot be passed by name)."""
    code = fn.__code__
    names = code.co_varnames[:code.co_argcount]
    values = fn.__defaults__ or ()
    first = len(names) - len(values)
    unbound = [(name, values[index - first]) for index, name in enumerate(names)
               if index >= max(positional, first, code.co_posonlyargcount) and name not in kwargs]
    unbound += [(name, value) for name, value in (fn.__kwdefaults__ or {}).items() if name not in kwargs]
    return unbound


def grid_dims(grid: Any, kernel: str) -> list[int]:
    """A launch grid as Triton uses it: 1 to 3 sizes, each the integer Triton's launcher reads.

    Triton takes each size through ``__index__`` (the CPU interpreter's ``range(size)``, the GPU
    launcher's integer parsing), so that is what is read here: ints and numpy integers, and, while
    a launch runs, the interpreter's scalar tensors (a size computed from the launch's own
    arguments, ``triton.cdiv(meta["n"], meta["BLOCK"])``). Floats and other values Triton refuses
    are refused (`Unloggable`). The clean room replays the ints; whatever a size was computed from
    is host data to it like every other logged number.
    """
    if type(grid) is int:
        grid = (grid,)
    if type(grid) not in (tuple, list) or not 1 <= len(grid) <= 3:
        raise Unloggable(f"kernel {kernel} was launched with a grid that is not 1 to 3 integers")
    dims = []
    for size in grid:
        try:
            dims.append(int(operator.index(size)))
        except (TypeError, ValueError, OverflowError):
            raise Unloggable(f"kernel {kernel}: a grid size of type {type(size).__name__}") from None
    return dims


class LaunchLog:
    """Records one forward's events while `active`; one instance per worker."""

    def __init__(self, candidate_file: str) -> None:
        import os

        self.candidate_file = os.path.realpath(candidate_file)
        self._realpath = os.path.realpath
        self.active = False
        self.depth = 0
        self.log = CallLog()
        self._ids: dict[int, int] = {}
        self._keep: list[torch.Tensor] = []
        self._external_bytes = 0
        self._bindings: dict[str, dict[str, Any]] = {}

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, inputs: list[torch.Tensor], state: list[torch.Tensor]) -> None:
        self.log = CallLog()
        self._ids = {}
        self._keep = []
        self._external_bytes = 0
        self.depth = 0
        for index, tensor in enumerate(inputs):
            self._register(tensor, Buffer("input", index))
        for index, tensor in enumerate(state):
            if self._storage_id(tensor) not in self._ids:
                self._register(tensor, Buffer("state", index))
        self.active = True

    def finish(self, outputs: Any) -> CallLog:
        self.active = False
        if self.log.error is None:
            try:
                self.log.outputs = self.encode(outputs)
            except Unloggable as exc:
                self.log.error = str(exc)
        log, self.log, self._keep = self.log, CallLog(), []
        return log

    def fail(self, reason: str) -> None:
        if self.log.error is None:
            self.log.error = reason[:500]
        self.log.events = []

    # -- buffers --------------------------------------------------------------------------
    @staticmethod
    def _storage_id(tensor: torch.Tensor) -> int:
        storage = torch.Tensor.untyped_storage(tensor)
        return storage.data_ptr() if storage.nbytes() else -id(storage)

    def _register(self, tensor: torch.Tensor, buffer: Buffer) -> int:
        storage = torch.Tensor.untyped_storage(tensor)
        buffer.nbytes = storage.nbytes()
        buffer.device = tensor.device.type
        self.log.buffers.append(buffer)
        number = len(self.log.buffers) - 1
        self._ids[self._storage_id(tensor)] = number
        self._keep.append(tensor)  # the storage stays alive: its address names it for the whole call
        return number

    def _buffer_of(self, tensor: torch.Tensor) -> int:
        number = self._ids.get(self._storage_id(tensor))
        if number is not None:
            return number
        # Unknown origin: the host made it (numpy, a Python list, a cache from an earlier call).
        storage = torch.Tensor.untyped_storage(tensor)
        size = storage.nbytes()
        self._external_bytes += size
        if self._external_bytes > MAX_EXTERNAL_BYTES:
            raise Unloggable(f"more than {MAX_EXTERNAL_BYTES >> 20} MiB of tensors of unknown origin")
        self.log.blobs.append(storage_bytes(tensor))
        return self._register(tensor, Buffer("external", blob=len(self.log.blobs) - 1))

    def _tensor_ref(self, tensor: torch.Tensor) -> dict[str, Any]:
        if type(tensor) is not torch.Tensor and not isinstance(tensor, torch.nn.Parameter):
            raise Unloggable(f"a tensor subclass ({type(tensor).__name__}) reached an op or a kernel")
        return {"T": self._buffer_of(tensor), "o": int(tensor.storage_offset()), "s": list(tensor.shape),
                "st": list(tensor.stride()), "d": str(tensor.dtype).removeprefix("torch.")}

    # -- values ---------------------------------------------------------------------------
    def encode(self, value: Any, depth: int = 0) -> Any:
        if depth > 8:
            raise Unloggable("an argument nested more than 8 levels")
        if value is None or type(value) is bool:
            return value
        if type(value) is int:
            # Triton passes -2**63 .. 2**63 - 1 as i64 and 2**63 .. 2**64 - 1 as u64 (a 64-bit hash constant).
            if not -(1 << 63) <= value < 1 << 64:
                raise Unloggable("an integer argument beyond 64 bits")
            return value
        if type(value) is float:
            return value
        if isinstance(value, torch.Tensor):
            return self._tensor_ref(value)
        if type(value) is str:
            if len(value) > MAX_STRING:
                raise Unloggable("a string argument longer than 200 characters")
            return {"str": value}
        if type(value) in (list, tuple) or isinstance(value, torch.Size):
            return {"L": [self.encode(v, depth + 1) for v in value], "tuple": type(value) is not list}
        if isinstance(value, torch.dtype):
            return {"dtype": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"device": value.type}
        if isinstance(value, torch.layout):
            return {"layout": str(value).removeprefix("torch.")}
        if isinstance(value, torch.memory_format):
            return {"memory_format": str(value).removeprefix("torch.")}
        module = type(value).__module__ or ""
        if module.startswith("triton.language"):
            from triton import language as tl

            if isinstance(value, tl.dtype):
                return {"tl_dtype": str(value)}
            if isinstance(value, tl.constexpr):
                return {"constexpr": self.encode(value.value, depth + 1)}
        if _is_jit(value):
            fn = _jit_source(value)
            return {"kernel": self._note_kernel(fn)}
        fields = descriptor_fields(value)
        if fields is not None:
            return {"descriptor": {name: self.encode(field, depth + 1) for name, field in fields.items()}}
        raise Unloggable(f"an argument of type {type(value).__name__} (only tensors, numbers, strings, dtypes, "
                         "tensor descriptors and kernels can be replayed)")

    # -- kernels --------------------------------------------------------------------------
    def _binding(self, value: Any) -> dict[str, Any]:
        """How a global a kernel names is rebuilt in the clean room (numbers, allowed modules, kernels)."""
        if isinstance(value, types.ModuleType):
            return {"module": value.__name__}
        if value is None or type(value) in (bool, int, float, str):
            return {"const": value}
        module = type(value).__module__ or ""
        if module.startswith("triton.language"):
            from triton import language as tl

            if isinstance(value, tl.dtype):
                return {"tl_dtype": str(value)}
            if isinstance(value, tl.constexpr) and (value.value is None or type(value.value) in (bool, int, float,
                                                                                                  str)):
                return {"constexpr": value.value}
        if _is_jit(value):
            fn = _jit_source(value)
            if self._realpath(fn.__code__.co_filename) == self.candidate_file:
                return {"kernel": self._note_kernel(fn)}
            owner = getattr(fn, "__module__", None)
            return {"attr": [owner, fn.__name__]}
        owner = getattr(value, "__module__", None)
        name = getattr(value, "__name__", None)
        if isinstance(owner, str) and isinstance(name, str):
            if owner == "builtins" and getattr(builtins, name, None) is value:
                return {"builtin": name}
            holder = sys.modules.get(owner)
            if holder is not None and getattr(holder, name, None) is value:
                return {"attr": [owner, name]}
        return {"unknown": type(value).__name__}

    def _header(self, fn: Any) -> dict[str, dict[str, Any]]:
        """What the kernel's annotations and defaults evaluated to when its ``def`` ran here.

        The clean room puts these values where the header's text is, so it never evaluates a
        header (``FP8_MAX: tl.constexpr = float8_info.max`` names a module object it does not
        have): a default is a binding like a global's (a number, a Triton object, a kernel of
        the file); an annotation is Triton's own object where it is one (``tl.constexpr``,
        ``tl.float32``, a string), and otherwise the string Triton reads it as (`_annotation`).
        """
        try:
            return self._read_header(fn)
        except (TypeError, ValueError, AttributeError) as exc:  # __defaults__ and the like rebound by hand
            raise Unloggable(f"kernel {fn.__name__}: its annotations and defaults cannot be read ({exc})") from None

    def _read_header(self, fn: Any) -> dict[str, dict[str, Any]]:
        annotations: dict[str, dict[str, Any]] = {}
        declared = getattr(fn, "__annotations__", None)
        if isinstance(declared, dict):
            for name, value in declared.items():
                annotations[str(name)] = self._annotation(value)
        defaults: dict[str, dict[str, Any]] = {}
        code = fn.__code__
        positional = code.co_varnames[:code.co_argcount]
        values = fn.__defaults__ or ()
        for name, value in zip(positional[len(positional) - len(values):], values, strict=True):
            defaults[name] = self._binding(value)
        for name, value in (fn.__kwdefaults__ or {}).items():
            defaults[str(name)] = self._binding(value)
        return {"annotations": annotations, "defaults": defaults}

    def _annotation(self, value: Any) -> dict[str, Any]:
        """An annotation's binding: Triton reads annotations only as the string `_normalize_ty`
        makes of them, except ``tl.constexpr`` (compared by identity), so anything that is not a
        Triton object (``torch.Tensor``, ``int``, a pointer type) is logged as that string."""
        binding = self._binding(value)
        if "const" in binding or ("attr" in binding and in_triton_language(binding["attr"][0])):
            return binding
        if "tl_dtype" in binding and not getattr(value, "is_ptr", lambda: False)():
            return binding
        try:
            from triton.runtime.jit import _normalize_ty
        except ImportError:  # a Triton without it reads a class by its name
            return {"const": value.__name__ if isinstance(value, type) else str(value)}
        return {"const": _normalize_ty(value)}

    def _note_kernel(self, fn: Any) -> str:
        key = kernel_key(fn)
        if key in self.log.kernels:
            return key
        if self._realpath(fn.__code__.co_filename) != self.candidate_file:
            raise Unloggable(f"kernel {fn.__name__} is not defined in the solution file")
        cached = self._bindings.get(key)
        if cached is not None:
            # Known from an earlier call: this call's table needs it and every kernel it names.
            pending = [key]
            while pending:
                current = pending.pop()
                if current in self.log.kernels or current not in self._bindings:
                    continue
                entry = self.log.kernels[current] = self._bindings[current]
                pending.extend(b["kernel"] for b in entry["globals"].values() if "kernel" in b)
            return key
        if cached is None:
            cached = {"name": fn.__name__, "line": fn.__code__.co_firstlineno, "globals": {}}
            self._bindings[key] = cached
            self.log.kernels[key] = cached
            names: set[str] = set()
            stack = [fn.__code__]
            while stack:
                code = stack.pop()
                names.update(code.co_names)
                stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
            namespace = fn.__globals__
            for name in sorted(names):
                if name in namespace:
                    cached["globals"][name] = self._binding(namespace[name])
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False):
                try:
                    cached["globals"][name] = self._binding(cell.cell_contents)
                except ValueError:
                    cached["globals"][name] = {"unknown": "empty cell"}
            cached["header"] = self._header(fn)
        self.log.kernels[key] = cached
        return key

    # -- events ---------------------------------------------------------------------------
    def _append(self, event: dict[str, Any]) -> None:
        if len(self.log.events) >= MAX_EVENTS:
            raise Unloggable(f"more than {MAX_EVENTS} kernel launches and PyTorch ops in one forward")
        self.log.events.append(event)

    def before_op(self, func: Any, args: Any, kwargs: Any) -> dict[str, Any] | None:
        """Encode an op's arguments before it runs (an external buffer's bytes as they were)."""
        if not self.active or self.depth or self.log.error is not None:
            return None
        try:
            namespace = getattr(func, "namespace", "aten")
            packet = getattr(func, "overloadpacket", None)
            name = getattr(packet, "__name__", None) or str(func)
            overload = getattr(func, "_overloadname", "default") or "default"
            return {"op": f"{namespace}::{name}.{overload}", "args": self.encode(list(args)),
                    "kwargs": {k: self.encode(v) for k, v in kwargs.items()}}
        except Unloggable as exc:
            self.fail(str(exc))
            return None

    def after_op(self, event: dict[str, Any] | None, out: Any) -> None:
        if event is None or not self.active or self.log.error is not None:
            return
        try:
            event["out"] = self._outputs(out)
            self._append(event)
        except Unloggable as exc:
            self.fail(str(exc))

    def _outputs(self, out: Any) -> Any:
        """Op results: new storages become ``new`` buffers (the clean room's op makes its own)."""
        if isinstance(out, torch.Tensor):
            if self._storage_id(out) not in self._ids:
                self._register(out, Buffer("new"))
            return self._tensor_ref(out)
        if isinstance(out, (list, tuple)):
            return {"L": [self._outputs(v) for v in out], "tuple": isinstance(out, tuple)}
        return self.encode(out)

    def before_launch(self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """Encode a leaf launch's arguments before the kernel runs (it may write external buffers)."""
        if not self.active or self.log.error is not None:
            return None
        try:
            fn = _jit_source(function)
            if fn is None:
                raise Unloggable(f"a launch of {type(function).__name__}, not a Triton JIT function")
            logged = {k: self.encode(v) for k, v in kwargs.items()}
            try:
                unbound = _unbound_defaults(fn, len(args), kwargs)
            except (TypeError, ValueError, AttributeError, IndexError) as exc:
                raise Unloggable(f"kernel {fn.__name__}: its defaults cannot be read ({exc})") from None
            for name, value in unbound:
                # A default is bound by Python when the launch runs: logged here, it is one more
                # number of the launch (host data like the others) and the clean room passes it.
                # A default that is no number (a Triton function) stays in the kernel's header.
                try:
                    logged[name] = self.encode(value)
                except Unloggable:
                    continue
            return {"launch": self._note_kernel(fn), "grid": None, "args": self.encode(list(args)),
                    "kwargs": logged}
        except Unloggable as exc:
            self.fail(str(exc))
            return None

    def after_launch(self, event: dict[str, Any] | None, grid: Any) -> None:
        """The launch returned: its grid as Triton resolved it (`grid_dims`, or the `Unloggable`
        the launch hook met reading it), then the event joins the log."""
        if event is None or not self.active or self.log.error is not None:
            return
        try:
            if isinstance(grid, Unloggable):
                raise grid
            event["grid"] = grid_dims(grid, event["launch"])
            self._append(event)
        except Unloggable as exc:
            self.fail(str(exc))
