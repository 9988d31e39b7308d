"""Memory bounds of the clean room's kernel launches (CPU tier).

Every element a replayed kernel loads, stores or updates atomically must lie inside a buffer the
launch was given: the storage of one of its tensor arguments (the whole storage, not only the
view, so a kernel may write a padded workspace it was handed). Anything else is reported as
`OutOfBounds` and the parent turns it into a ``runtime_error``.

Why: Triton's interpreter dereferences raw addresses. A kernel whose mask lets one lane past the
end of its output (``offs <= n`` for ``offs < n``) writes into whatever lies after the buffer,
and its in-bounds values are right, so no comparison of outputs can notice it. On a GPU the same
kernel is an illegal memory access, or silently corrupts a neighbouring tensor. An unmasked load
past the end is the same defect on the read side (undefined behaviour, garbage or a fault). The
check runs in the clean room, where no candidate code has run, on the launches the verdict comes
from; masked-off lanes are never checked, as they are never dereferenced.

Not covered: the GPU tier (compiled kernels are not interpreted; compute-sanitizer would be the
tool there), and accesses inside the bounds of another argument (a kernel that reads its second
input through its first pointer gets the clean room's layout, which is not the candidate's, and
fails on its outputs instead).
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


class OutOfBounds(Exception):
    """A replayed kernel touched memory outside every buffer its launch was given."""


@dataclass(frozen=True)
class Buffer:
    """One argument's storage: ``[start, end)`` in bytes, and the argument's name."""

    start: int
    end: int
    name: str


class LaunchBounds:
    """The buffers of one launch, and the check of an access against them."""

    def __init__(self, kernel: str, buffers: list[Buffer]) -> None:
        self.kernel = kernel
        # Two arguments may share a storage; distinct storages never overlap.
        unique = {(b.start, b.end): b for b in buffers if b.end > b.start}
        self.buffers = sorted(unique.values(), key=lambda b: b.start)
        self.starts = np.array([b.start for b in self.buffers], dtype=np.int64)
        self.ends = np.array([b.end for b in self.buffers], dtype=np.int64)
        self.start_list = [b.start for b in self.buffers]
        #: start addresses of the buffers an active lane stored to or updated (what the launch wrote)
        self.written: set[int] = set()

    def check(self, access: str, addresses: np.ndarray, mask: np.ndarray | None, itemsize: int) -> None:
        """Raise `OutOfBounds` when an active lane's element is not wholly inside one buffer."""
        # uint64 addresses as int64: a pointer moved below zero wraps to a huge unsigned value and
        # reads as negative here, outside every buffer.
        lanes = np.asarray(addresses).astype(np.uint64).view(np.int64)
        if mask is not None:
            mask = np.asarray(mask, dtype=bool)
            if mask.shape != lanes.shape:
                mask = np.broadcast_to(mask, lanes.shape)
            lanes = lanes[mask]
        lanes = lanes.ravel()
        if lanes.size == 0:
            return
        if self._inside_one_buffer(lanes, itemsize):
            if access != "loaded":
                self.written.add(self.start_list[bisect.bisect_right(self.start_list, int(lanes.min())) - 1])
            return
        slot = np.searchsorted(self.starts, lanes, side="right") - 1
        inside = slot >= 0
        if self.buffers:
            owner = np.maximum(slot, 0)
            ends = self.ends[owner]
            # `lanes < ends` first: `lanes + itemsize` cannot wrap for an address below a real end.
            inside &= (lanes < ends) & (lanes + itemsize <= ends)
        if bool(inside.all()):
            if access != "loaded":
                self.written.update(int(self.starts[i]) for i in np.unique(slot))
            return
        bad = int(np.flatnonzero(~inside)[0])
        raise OutOfBounds(self.describe(access, int(lanes[bad]), itemsize, int((~inside).sum())))

    def _inside_one_buffer(self, lanes: np.ndarray, itemsize: int) -> bool:
        """The common case in two reductions: every lane lies between the lowest and the highest,
        so when those two fit in one buffer every lane does (buffers never overlap). False decides
        nothing: the lane-by-lane search in `check` does."""
        low, high = int(lanes.min()), int(lanes.max())
        slot = bisect.bisect_right(self.start_list, low) - 1
        return slot >= 0 and high + itemsize <= self.buffers[slot].end

    def describe(self, access: str, address: int, itemsize: int, count: int) -> str:
        lanes = f"{count} element{'s' if count != 1 else ''}"
        slot = bisect.bisect_right([b.start for b in self.buffers], address) - 1
        options: list[tuple[int, str]] = []
        if slot >= 0:
            below = self.buffers[slot]
            options.append((address + itemsize - below.end, f"at byte {address - below.start} of `{below.name}`, "
                            f"a {below.end - below.start}-byte buffer"))
        if slot + 1 < len(self.buffers):
            above = self.buffers[slot + 1]
            options.append((above.start - address, f"{above.start - address} bytes before the start of "
                            f"`{above.name}`"))
        where = min(options)[1] if options else "in no buffer (the launch was given none)"
        harm = ("reads memory the kernel was not given: an illegal memory access, or garbage" if access == "loaded"
                else "is an illegal memory access, or silently corrupts a neighbouring tensor")
        return (f"kernel `{self.kernel}` {access} {lanes} out of bounds, the first {where}. On a GPU this {harm}; "
                "mask every load and store with the buffer's size (e.g. `mask=offs < n_elements`)")


def tensor_buffers(names: list[str], args: list[Any], kwargs: dict[str, Any]) -> list[Buffer]:
    """The storages of a launch's tensor arguments, by parameter name.

    The tensors an argument holds are found as the launch hook finds them
    (`launches.launch_tensors`: plain, in tuples and lists, a TMA descriptor's base); an argument
    holding several is named ``name[i]``, a descriptor's base ``name.base``.
    """
    from tritongym.evaluator.worker.launches import launch_tensors

    named = [(names[i] if i < len(names) else f"argument {i}", value) for i, value in enumerate(args)]
    found: list[Buffer] = []
    for name, value in [*named, *kwargs.items()]:
        tensors = launch_tensors(value)
        for position, tensor in enumerate(tensors):
            label = (name if isinstance(value, torch.Tensor) else f"{name}[{position}]"
                     if isinstance(value, (list, tuple)) else f"{name}.base")
            storage = tensor.untyped_storage()
            found.append(Buffer(storage.data_ptr(), storage.data_ptr() + storage.nbytes(), label))
    return found


_active: LaunchBounds | None = None


@contextlib.contextmanager
def launch(kernel: str, buffers: list[Buffer]) -> Iterator[LaunchBounds]:
    """Check every access of the interpreted launch inside this block against `buffers`; the
    yielded `LaunchBounds` says afterwards which buffers the launch wrote (`written`)."""
    global _active
    previous, _active = _active, LaunchBounds(kernel, buffers)
    try:
        yield _active
    finally:
        _active = previous


def _itemsize(pointers: Any) -> int:
    element = pointers.get_element_ty()
    return max(1, int(getattr(element, "primitive_bitwidth", 8)) // 8)


def install(builder: type | None = None) -> None:
    """Wrap the interpreter builder's memory operations with the check (idempotent).

    Loads and stores of every kind (plain, masked, block pointers, tensor descriptors, atomic
    load/store) reach ``create_masked_load``/``create_masked_store``; atomic read-modify-write and
    compare-and-swap have their own entry points. `builder`: the class to wrap, Triton's
    ``InterpreterBuilder`` unless given (tests wrap a subclass, leaving Triton's own untouched).
    """
    if builder is None:
        from triton.runtime import interpreter

        builder = interpreter.InterpreterBuilder
    if getattr(builder, "_tritongym_bounds", False):
        return

    def checked(name: str, access: str, pointer: tuple[int, str], mask: tuple[int, str] | None) -> None:
        original = getattr(builder, name, None)
        if original is None:  # another Triton: that entry point does not exist
            return

        def argument(args: tuple[Any, ...], kwargs: dict[str, Any], where: tuple[int, str]) -> Any:
            return args[where[0]] if len(args) > where[0] else kwargs.get(where[1])

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _active is not None:
                pointers = argument(args, kwargs, pointer)
                lanes = argument(args, kwargs, mask) if mask is not None else None
                _active.check(access, pointers.data, None if lanes is None else lanes.data, _itemsize(pointers))
            return original(self, *args, **kwargs)

        method.__name__ = name
        setattr(builder, name, method)

    checked("create_masked_load", "loaded", (0, "ptrs"), (1, "mask"))
    checked("create_masked_store", "stored", (0, "ptrs"), (2, "mask"))
    checked("create_atomic_rmw", "updated", (1, "ptr"), (3, "mask"))
    checked("create_atomic_cas", "updated", (0, "ptr"), None)
    builder._tritongym_bounds = True
