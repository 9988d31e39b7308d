"""``from torch._inductor.runtime.triton_heuristics import grid`` on torch >= 2.9 (the candidate worker).

Kernels written the way Inductor wrote them up to torch 2.8 (every row of GPU MODE's KernelBook,
KernelLLM's outputs, tritonbench's Inductor-generated operators) launch with
``kernel[grid(xnumel)](..., XBLOCK=128)``, importing ``grid`` from Inductor's runtime. torch 2.9
moved grid computation into Inductor's launchers and removed the helper, so on a current torch
every such sample fails at its import line, although its kernels are honest Triton and ``grid`` is
three lines of arithmetic. A model trained on that data expects the code it learnt to run, so the
worker provides the helper when torch does not: this module adds ``grid`` to
``torch._inductor.runtime.triton_heuristics`` when that module is first imported and lacks it
(a meta-path finder wraps the module's loader; nothing is imported before the candidate asks, so
candidates that never touch Inductor pay nothing). Where torch still has ``grid``, torch's own is
used. Semantics, as documented for the torch <= 2.8 helper: ``grid(xnumel[, ynumel[, znumel]])``
returns a function of the launch's meta-parameters giving
``(cdiv(xnumel, XBLOCK), cdiv(ynumel, YBLOCK), cdiv(znumel, ZBLOCK))``, a missing block size
meaning one program per element, a missing dimension meaning 1, and a y dimension beyond CUDA's
65535-block limit folded into z.

The compatibility path is documented in docs/integrity.md ("False positives fixed in the third
wave"); the static gate allows exactly ``triton_heuristics.grid`` of that module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

MODULE = "torch._inductor.runtime.triton_heuristics"
#: CUDA's limit on the y (and z) grid dimension.
MAX_Y_GRID = 65535


def _blocks(numel: int | None, block: int | None) -> int:
    if numel is None:
        return 1
    if block is None:
        return int(numel)
    return -(-int(numel) // int(block))


def grid(*numels: int) -> Callable[[dict[str, Any]], tuple[int, int, int]]:
    """The launch grid for `numels` (x, then y, then z elements), given the launch's block sizes."""
    if not 1 <= len(numels) <= 3:
        raise TypeError(f"grid() takes 1 to 3 element counts, got {len(numels)}")
    xnumel, ynumel, znumel = (*numels, None, None)[:3]

    def grid_fn(meta: dict[str, Any]) -> tuple[int, int, int]:
        x = _blocks(xnumel, meta.get("XBLOCK", 1))
        y = _blocks(ynumel, meta.get("YBLOCK"))
        if znumel is None:
            # Fold a y grid beyond the hardware limit into z, as Inductor did.
            z = -(-y // MAX_Y_GRID)
            y = -(-y // z)
        else:
            z = _blocks(znumel, meta.get("ZBLOCK"))
        return (x, y, z)

    return grid_fn


def _add_grid(module: ModuleType) -> None:
    if not hasattr(module, "grid"):
        module.grid = grid


class _Loader(importlib.abc.Loader):
    """Delegates to the real loader, then adds `grid` to the freshly executed module."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        _add_grid(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself; for `MODULE` it wraps the spec the path finder returns."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Provide ``triton_heuristics.grid`` where torch lacks it (call before the candidate import)."""
    loaded = sys.modules.get(MODULE)
    if loaded is not None:
        _add_grid(loaded)
        return
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
