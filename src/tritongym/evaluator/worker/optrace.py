"""Trace the ATen operators a forward runs, and tell compute from bookkeeping.

Both workers use it: the reference worker to learn which compute ops the task needs, the
candidate worker to record which ones the candidate's own Python ran. A `TorchDispatchMode` sees
every dispatched op, including Tensor methods, operators such as ``@`` and ``+`` and calls
through ``torch.ops.aten``, which static checks cannot.

**Attribution, not suspension.** Tracing stays on during kernel launches: grid callables, pre-run
hooks, constexpr objects and combine functions are candidate Python that runs *inside* a launch.
Each op is attributed to the innermost Python frame that decides who asked for it (`Attribution`):
the solution file (counted), or Triton's runtime and language machinery (the interpreter's own
copies: not counted). Frames of torch, the standard library and other libraries are looked
through, so a library called by the candidate does the candidate's work.

**Data flow.** `DataFlow` follows storages through every traced op and launch: which storages
hold data derived from the inputs, and which were written by the candidate's kernels (or computed
by glue from such storage: a final ``loss.sum()`` over per-row losses a kernel wrote is the
kernel's output). Output provenance and the host-read budget (`hostread`) use it.

Defends against: PyTorch fallback (A1 in docs/integrity.md), try/except fallbacks (A2), torch work
hidden in launch-time Python (grid callables, hooks).
Residual risk: work done outside ATen (numpy on host data) is invisible here: `hostread` bounds how
much input-derived data may reach the host at all.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

#: Ops whose result holds whatever the allocator hands back (`torch.empty` and kin).
UNINITIALISED_OPS = frozenset(
    "aten::" + name
    for name in ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted")
)

#: Ops that allocate, fill, copy, reshape or inspect: never "compute" (names without overload).
NON_COMPUTE_OPS = UNINITIALISED_OPS | frozenset(
    "aten::" + name
    for name in (
        # fills of fresh buffers
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
        "new_full", "fill", "fill_", "zero", "zero_", "scalar_tensor", "resize_", "resize_as_",
        # factories that fill with random values or index patterns
        "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "normal",
        "normal_", "uniform", "uniform_", "bernoulli", "bernoulli_", "arange", "linspace", "logspace", "eye",
        # plain copies and device/dtype moves of whole tensors
        "copy", "copy_", "clone", "contiguous", "_to_copy", "to", "detach", "detach_", "lift_fresh",
        "lift_fresh_copy", "alias", "set_", "_copy_from", "_copy_from_and_resize",
        # metadata queries
        "size", "stride", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "numel",
        "dim", "is_contiguous", "is_same_size", "_local_scalar_dense", "item", "equal",
        "is_nonzero", "record_stream",
    )
)

#: Ops whose output holds no values of their arguments (allocations "like" an input, fills,
#: random and index factories): their results are not input-derived data.
_FRESH_OPS = UNINITIALISED_OPS | frozenset(
    "aten::" + name
    for name in (
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill",
        "fill_", "zero", "zero_", "scalar_tensor", "rand", "randn", "randint", "rand_like", "randn_like",
        "randint_like", "randperm", "normal", "normal_", "uniform", "uniform_", "bernoulli", "bernoulli_",
        "arange", "linspace", "logspace", "eye", "size", "stride", "sym_size", "sym_stride", "sym_numel",
        "numel", "dim", "is_contiguous", "is_same_size",
    )
)

#: The byte every fresh, uninitialised allocation is filled with while outputs are checked: all
#: bits set is NaN in every float format (float8 to float64) and -1 in every signed integer. Bool
#: storage takes 1 (True): other bytes are not valid bools.
POISON_BYTE = 0xFF


def poison_uninitialised(out: Any) -> None:
    """Fill the storage of a fresh `torch.empty`-family result with `POISON_BYTE`.

    Why: an element no kernel writes would otherwise hold allocator leftovers, different between
    runs and processes (zeros from fresh pages when idle, old data under load). Filled, it reads
    NaN (or -1) in the candidate's checked trials and in the clean room's replays alike, so the
    verdict and the feedback depend only on the code and the inputs, and an output that passes only
    through leftovers (a freed tensor's values handed back by the allocator) fails in the clean room.
    Run untraced by the caller; the timed and profiled replays do not fill (time spent there counts).
    """
    if isinstance(out, (list, tuple)):
        for item in out:
            poison_uninitialised(item)
        return
    # Every byte of a fresh allocation is one the allocator added: the fill from byte 0 on.
    poison_growth(out, 0)


#: Ops that grow their first argument's storage in place, leaving the added bytes uninitialised
#: (``torch.empty(0).resize_(n)``): the added bytes are filled like a fresh allocation.
GROWING_OPS = frozenset({"aten::resize_", "aten::resize_as_"})


def storage_nbytes(tensor: Any) -> int | None:
    """The bytes of a tensor's storage (None: not a tensor, or no single storage: sparse layouts,
    storage-less subclasses, which the clean room refuses)."""
    if not isinstance(tensor, torch.Tensor):
        return None
    try:
        return torch.Tensor.untyped_storage(tensor).nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def poison_growth(tensor: Any, before: int | None) -> None:
    """Fill the bytes a `GROWING_OPS` op added to `tensor`'s storage (those past `before`) with
    `POISON_BYTE`, as `poison_uninitialised` fills a fresh allocation, and for the same reason.
    The bytes that were there keep their values. Run untraced by the caller."""
    after = storage_nbytes(tensor)
    if before is None or after is None or after <= before:
        return
    storage = torch.Tensor.untyped_storage(tensor)
    added = torch.tensor((), dtype=torch.uint8, device=storage.device).set_(storage, before, (after - before,), (1,))
    added.fill_(1 if tensor.dtype == torch.bool else POISON_BYTE)


#: Inductor's allocators (`torch._C._dynamo.guards`): generated code binds them as
#: ``empty_strided_cpu``/``empty_strided_cuda``; they make tensors below the dispatcher, so no
#: dispatch mode sees them and the launch log ships their bytes as external content.
INDUCTOR_ALLOCATORS = ("_empty_strided_cpu", "_empty_strided_cpu_pinned", "_empty_strided_cuda",
                       "_empty_strided_xpu", "_empty_strided_mtia")

#: Whether `install_allocator_poison`'s wrappers fill what they make (on during checked trials).
_ALLOCATOR_POISON = [False]


def install_allocator_poison(guards: Any = None) -> None:
    """Wrap Inductor's allocators so that, while `allocator_poison()` is active, their results are
    filled as `poison_uninitialised` fills a logged ``torch.empty``: the bytes the launch log ships
    for such a buffer are then the same in every trial and run, not allocator leftovers (call
    before the candidate's import, which binds them). `guards`: the module holding them
    (``torch._C._dynamo.guards`` unless given)."""
    if guards is None:
        # (looked up defensively: a torch without the module has no such allocators to wrap)
        guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    for name in INDUCTOR_ALLOCATORS:
        allocate = getattr(guards, name, None)
        if allocate is None or hasattr(allocate, "_tritongym_poisons"):
            continue

        def poisoning(*args: Any, _allocate: Any = allocate) -> Any:  # (they take no keywords)
            out = _allocate(*args)
            if _ALLOCATOR_POISON[0]:
                with _disable_current_modes(), torch._C.DisableTorchFunction():
                    poison_uninitialised(out)
            return out

        poisoning._tritongym_poisons = True  # type: ignore[attr-defined]
        poisoning.__name__ = poisoning.__qualname__ = name
        setattr(guards, name, poisoning)


@contextmanager
def allocator_poison() -> Iterator[None]:
    """Inductor's allocators fill their results while active (`install_allocator_poison`)."""
    _ALLOCATOR_POISON[0] = True
    try:
        yield
    finally:
        _ALLOCATOR_POISON[0] = False


def op_name(func: Any) -> str:
    """``namespace::name`` of an ATen overload, without the overload (``aten::add``)."""
    packet = getattr(func, "overloadpacket", None)
    namespace = getattr(func, "namespace", "aten")
    name = getattr(packet, "__name__", None) or str(func)
    return f"{namespace}::{name}"


def is_compute(func: Any, _non_compute: frozenset = NON_COMPUTE_OPS) -> bool:
    """Whether an ATen overload does arithmetic (not a view, allocation, copy or query)."""
    if getattr(func, "is_view", False):
        return False
    name = op_name(func)
    if name in _non_compute:
        return False
    return not name.startswith("prim::")


def _flop_registry() -> dict[Any, Any]:
    try:
        from torch.utils.flop_counter import flop_registry
    except ImportError:  # pragma: no cover - older torch
        return {}
    return dict(flop_registry)


#: FLOP formulas of matmul, convolution and attention ops, from torch's own flop counter (a
#: read-only copy taken at import: emptying torch's registry later changes nothing here).
_FLOPS = MappingProxyType(_flop_registry())

#: Namespaces of torch's own operators; any other namespace is a custom op (`torch.library`).
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d"})

#: Namespaces of annotation ops. ``torch.profiler.record_function`` opens and closes a profiler
#: range with ``profiler::_record_function_enter_new`` and ``_record_function_exit``: they touch no
#: tensor, so the clean room has nothing to replay, and the handle they pass (a ScriptObject)
#: cannot travel to it. Run and counted, never logged (honest instrumented code was refused as
#: unreplayable: found on an H200). Annotation spans are not kernel time (`coverage`).
ANNOTATION_NAMESPACES = frozenset({"profiler"})

#: Ops that move a whole tensor between devices (a device-to-host copy exposes its values).
_TRANSFER_OPS = frozenset({"aten::_to_copy", "aten::copy_", "aten::to", "aten::_copy_from", "aten::copy"})


def _package_dir(name: str) -> str | None:
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return os.path.realpath(os.path.dirname(path)) + os.sep if path else None


class Attribution:
    """Who asked for an op: the candidate, or Triton's runtime machinery acting for a launch.

    Walks from the innermost Python frame outwards. The solution file decides "candidate";
    Triton's runtime and language packages decide "triton" (the interpreter copying arguments,
    the launcher reading pointers); the harness's evidence code that runs while the trace is on
    (the launch hook, the kernel checks) decides "harness"; every other frame (torch, the
    standard library, numpy, other libraries, the host-read trace's handler: it sits between the
    candidate and every torch call it makes) is looked through. A walk that finds none is "other".

    This module's own frames are looked through too, however many there are: its code issues
    no traced op (the dispatch handler runs with the mode suspended), so they decide nothing.
    Counting a fixed number of them instead would misread any wrapper a tool puts around the
    handler (a mutation tester's trampolines) as a caller, and a frame merely named like this
    file cannot hide the candidate behind it.
    """

    #: The harness's evidence modules that run while the trace is on (their own bookkeeping
    #: inside a traced call is not work).
    HARNESS_MODULES = ("launches.py", "kernels.py")

    def __init__(self, candidate_file: str) -> None:
        self.candidate = os.path.realpath(candidate_file)
        here = os.path.realpath(os.path.dirname(__file__)) + os.sep
        self.harness = frozenset(here + name for name in self.HARNESS_MODULES)
        triton_dir = _package_dir("triton") or "/nonexistent-triton/"
        self.machinery = tuple(triton_dir + sub + os.sep for sub in ("runtime", "language", "backends", "compiler"))
        # The host TMA descriptor checks its base's alignment with ``data_ptr()`` and keeps only
        # the tensor: an address read for Triton, never handed to the candidate.
        self.machinery += tuple(triton_dir + name for name in ("__init__.py",
                                                               os.path.join("tools", "tensor_descriptor.py")))
        self._getframe = sys._getframe
        self._realpath = os.path.realpath
        self._cache: dict[str, str] = {}

    def who(self) -> str:
        """Who asked for the op being traced now, walking out from the caller of `who`."""
        frame = self._getframe(1)
        cache = self._cache
        while frame is not None:
            name = frame.f_code.co_filename
            verdict = cache.get(name)
            if verdict is None:
                real = self._realpath(name) if not name.startswith("<") else name
                if real == self.candidate:
                    verdict = "candidate"
                elif real in self.harness:
                    verdict = "harness"
                elif real.startswith(self.machinery):
                    verdict = "triton"
                else:
                    verdict = "through"
                cache[name] = verdict
            if verdict != "through":
                return verdict
            frame = frame.f_back
        return "other"


def _tensors(value: Any, out: list, depth: int = 0) -> list:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)) and depth < 4:
        for item in value:
            _tensors(item, out, depth + 1)
    elif isinstance(value, dict) and depth < 4:
        for item in value.values():
            _tensors(item, out, depth + 1)
    return out


def storage_key(tensor: torch.Tensor) -> int:
    """The start address of a tensor's storage (identifies the storage while it is alive)."""
    return torch.Tensor.untyped_storage(tensor).data_ptr()


class DataFlow:
    """Which storages hold input-derived data, and which the candidate's kernels wrote.

    `protected` are the storages of inputs, parameters and buffers: a kernel that receives them
    only reads them (writes into inputs are `input_mutation`), so they never count as written.
    """

    def __init__(self, inputs: list[torch.Tensor], protected: list[torch.Tensor]) -> None:
        self.input_derived: set[int] = {storage_key(t) for t in inputs}
        self.protected: set[int] = {storage_key(t) for t in protected}
        self.kernel_written: set[int] = set()

    def after_op(self, args: Any, kwargs: Any, out: Any, name: str = "") -> None:
        if name in _FRESH_OPS:
            return
        sources = {storage_key(t) for t in _tensors(args, _tensors(kwargs, []))}
        if not sources:
            return
        produced = {storage_key(t) for t in _tensors(out, [])}
        if sources & self.input_derived:
            self.input_derived |= produced
        if sources & self.kernel_written:
            self.kernel_written |= produced - self.protected

    def after_launch(self, arguments: list[torch.Tensor]) -> None:
        keys = {storage_key(t) for t in arguments}
        writable = keys - self.protected
        self.kernel_written |= writable
        if keys & self.input_derived:
            self.input_derived |= writable

    def is_input_derived(self, tensor: torch.Tensor) -> bool:
        return storage_key(tensor) in self.input_derived

    def is_kernel_written(self, tensor: torch.Tensor) -> bool:
        return storage_key(tensor) in self.kernel_written


def _input_elements(args: Any, kwargs: Any) -> int:
    """Elements an op reads: the numel of every tensor argument (scalars count nothing)."""
    return sum(t.numel() for t in _tensors(args, _tensors(kwargs, [])))


def custom_op_function(func: Any) -> Any:
    """The Python function behind a `torch.library.custom_op` / `triton_op` overload, or None."""
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:  # pragma: no cover - torch without torch.library.custom_op
        return None
    schema = getattr(func, "_schema", None)
    name = getattr(schema, "name", None)
    opdef = OPDEFS.get(name) if isinstance(name, str) else None
    return getattr(opdef, "_init_fn", None)


#: Plain copies that can change a tensor's layout or dtype on the way (`op_moves`).
_COPY_OPS = frozenset(
    "aten::" + name
    for name in ("copy", "copy_", "clone", "contiguous", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
                 "lift_fresh_copy")
)


def op_moves(func: Any, args: Any, kwargs: Any, out: Any, _copies: frozenset = _COPY_OPS) -> tuple[int, int]:
    """``(elements written in a new layout, elements written in a new dtype)`` by a plain copy.

    Copies are not compute (`is_compute`): ``x.contiguous()`` or ``x.float()`` before a kernel is
    glue in honest code. But when the reference itself only moves data (a transpose made
    contiguous, a cast), such a copy *is* the problem's work, and `oprules.heavy_share` compares
    these elements with the reference's, kind by kind (a transpose's upcast glue is not a
    transpose). A same-layout, same-dtype copy (``clone`` of a contiguous tensor) moves nothing in
    this sense: it is a memcpy, not the transform.
    """
    if op_name(func) not in _copies:
        return (0, 0)
    tensors = _tensors(kwargs, _tensors(args, []))
    outputs = _tensors(out, [])
    if not outputs or not tensors:
        return (0, 0)
    # copy_(self, src) writes into its first argument from its second; the others copy their
    # first (``_copy_from(self, dst)`` too: it writes self into dst).
    source = tensors[1] if op_name(func) == "aten::copy_" and len(tensors) > 1 else tensors[0]
    target = outputs[0]
    layout = source.shape != target.shape or source.stride() != target.stride()
    return (target.numel() if layout else 0, target.numel() if source.dtype != target.dtype else 0)


def op_work(func: Any, args: Any, kwargs: Any, out: Any, _flops: Any = _FLOPS) -> tuple[int, int] | None:
    """``(elements read, FLOPs)`` of a compute op, None for bookkeeping (views, copies, fills).

    The one measure of PyTorch work: the candidate worker's trace and the clean room's replay
    both use it, so the parent compares like with like.
    """
    if not is_compute(func):
        return None
    flops = 0
    formula = _flops.get(getattr(func, "overloadpacket", None))
    if formula is not None:
        try:
            flops = int(formula(*args, **kwargs, out_val=out))
        except Exception:  # noqa: BLE001 - a formula that does not fit counts nothing
            flops = 0
    return _input_elements(args, kwargs), flops


class OpTrace(TorchDispatchMode):
    """Counts every dispatched op while active; `compute_ops()` lists the arithmetic ones.

    It also measures how much work those compute ops did: `compute_elements`, the elements
    they read (their tensor arguments; a reduction over per-row partial results reads little, an
    elementwise op over the input reads all of it), and `compute_flops`, the FLOPs of
    matmul/convolution/attention ops by torch's flop counter formulas. The parent compares both with the reference's.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch otherwise wraps __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports torch._dynamo: about 2 s in every worker. Nothing traced here is compiled.
        return False

    def __init__(self, attribution: Attribution | None = None, flow: DataFlow | None = None,
                 log: Any = None, poison_fresh: bool = False) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.compute: dict[str, None] = {}
        self.compute_elements = 0
        self.compute_flops = 0
        #: Elements plain copies wrote in a new layout, and in a new dtype (`op_moves`).
        self.moved_elements = [0, 0]
        #: Every op dispatched while active, whoever asked (the host-read trace's cross-check).
        self.seen = 0
        #: Elements of input-derived tensors the candidate copied from a GPU to the host.
        self.device_to_host_elements = 0
        self.attribution = attribution
        self.flow = flow
        self._flops = _FLOPS
        #: The clean room's launch log (`launchlog.LaunchLog`), fed every op outside a launch.
        self.log: Any = log
        #: Fill the results of logged `UNINITIALISED_OPS` as the clean room's replay does
        #: (`poison_uninitialised`): the candidate's checked trials, never the reference.
        self.poison_fresh = poison_fresh

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        name = op_name(func)
        self.seen += 1
        namespace = getattr(func, "namespace", "aten")
        if namespace in ANNOTATION_NAMESPACES:
            return func(*args, **kwargs)
        if namespace not in BUILTIN_NAMESPACES:
            implementation = custom_op_function(func)
            if implementation is not None:
                # A custom op (`torch.library.custom_op`, `triton_op`): what runs inside it is
                # what counts (its ATen ops and Triton launches), so its Python implementation
                # runs with this trace on again, and the op itself is neither logged nor counted.
                with self:
                    return implementation(*args, **kwargs)
        event = self.log.before_op(func, args, kwargs) if self.log is not None else None
        grows = self.poison_fresh and event is not None and name in GROWING_OPS and bool(args)
        before = storage_nbytes(args[0]) if grows else None
        out = func(*args, **kwargs)
        if event is not None:
            self.log.after_op(event, out)
            if self.poison_fresh and name in UNINITIALISED_OPS:
                with _disable_current_modes(), torch._C.DisableTorchFunction():
                    poison_uninitialised(out)
            if grows:
                with _disable_current_modes(), torch._C.DisableTorchFunction():
                    poison_growth(args[0], before)
        if self.flow is not None:
            self.flow.after_op(args, kwargs, out, name)
        if self.attribution is not None and self.attribution.who() != "candidate":
            return out
        self.counts[name] += 1
        if name in _TRANSFER_OPS and self.flow is not None:
            self._note_transfer(args, out)
        work = op_work(func, args, kwargs, out)
        if work is not None:
            self.compute.setdefault(name, None)
            self.compute_elements += work[0]
            self.compute_flops += work[1]
        else:
            layout, dtype = op_moves(func, args, kwargs, out)
            self.moved_elements[0] += layout
            self.moved_elements[1] += dtype
        return out

    def _note_transfer(self, args: Any, out: Any) -> None:
        """A device-to-host copy of input-derived data exposes it to host code (GPU tier)."""
        sources = [t for t in _tensors(args, []) if t.device.type != "cpu" and self.flow.is_input_derived(t)]
        targets = [t for t in _tensors(out, []) if t.device.type == "cpu"]
        if sources and targets:
            self.device_to_host_elements += sum(t.numel() for t in targets)

    def compute_ops(self) -> list[str]:
        """Compute ops in order of first use, each once (``aten::addmm``, ...)."""
        return list(self.compute)


@contextmanager
def untraced() -> Iterator[None]:
    """Suspend every active dispatch mode (used around Triton launches and harness work)."""
    with _disable_current_modes():
        yield


def storage_span(tensor: torch.Tensor) -> tuple[int, int]:
    """``(start, end)`` byte addresses of a tensor's whole storage (class-level calls only)."""
    storage = torch.Tensor.untyped_storage(tensor)
    start = storage.data_ptr()
    return start, start + storage.nbytes()
