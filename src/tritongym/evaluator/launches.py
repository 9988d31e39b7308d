"""Record the Triton kernels a forward launches, and the storages each launch received.

Installed in the candidate worker *before* the candidate is imported. It wraps the leaf launch
methods at class level: `JITFunction.run` (compiled kernels on a GPU) and
`InterpretedFunction.run` (``TRITON_INTERPRET=1``, where ``@triton.jit`` returns an
`InterpretedFunction`, a `KernelInterface` that the `JITFunction` patch alone would miss).
`Autotuner` and `Heuristics` end in these, so autotuned kernels are seen too. Each launch
records the kernel's name, the file that defines it (``fn.__code__.co_filename``), the grid, and
the storage spans of its tensor arguments, which is what output provenance checks against.

Defends against: decoy kernels never launched (A3), kernels borrowed from other files (A5),
computing in PyTorch and returning a buffer no kernel wrote (A1, with `optrace`).
Residual risk: the hook lives in the candidate's process; a candidate that reaches it can undo
it. The static gate bans the introspection vocabulary needed for that, and the sandbox
(docs/integrity.md) limits what else it can reach.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch

from tritongym.evaluator.optrace import storage_span, untraced


@dataclass
class Launch:
    """One kernel launch: who, where from, with which grid and argument storages."""

    kernel: str
    source_file: str
    grid: str
    arg_spans: list[tuple[int, int]] = field(default_factory=list)


class LaunchRecorder:
    """Collects `Launch` records while `active`; install once with `install()`."""

    def __init__(self) -> None:
        self.active = False
        self.launches: list[Launch] = []
        self.installed: list[str] = []

    def start(self) -> None:
        self.launches = []
        self.active = True

    def stop(self) -> list[Launch]:
        self.active = False
        return self.launches

    def _record(self, function: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        fn = getattr(function, "fn", None)
        code = getattr(fn, "__code__", None)
        source_file = os.path.realpath(code.co_filename) if code is not None else "<unknown>"
        name = getattr(fn, "__name__", None) or type(function).__name__
        spans = [
            storage_span(value)
            for value in (*args, *kwargs.values())
            if isinstance(value, torch.Tensor)
        ]
        grid_text = repr(tuple(grid)) if isinstance(grid, (tuple, list)) else "<callable>"
        self.launches.append(Launch(kernel=name, source_file=source_file, grid=grid_text, arg_spans=spans))

    def _wrap(self, cls: type) -> None:
        original = cls.run
        recorder = self

        def run(self, *args, grid=None, warmup=False, **kwargs):  # noqa: ANN001 - Triton's signature
            # The interpreter runs ATen ops of its own; they are not the candidate's compute.
            with untraced():
                result = original(self, *args, grid=grid, warmup=warmup, **kwargs)
            # Recorded only once the launch returned: a kernel that raises did no work.
            if recorder.active and not warmup:
                recorder._record(self, grid, args, kwargs)
            return result

        run.__wrapped__ = original  # type: ignore[attr-defined]
        cls.run = run
        self.installed.append(f"{cls.__module__}.{cls.__qualname__}.run")

    def install(self) -> None:
        """Wrap every leaf launch path this Triton version has."""
        from triton.runtime import jit

        self._wrap(jit.JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every supported Triton has the interpreter
            return
        self._wrap(InterpretedFunction)
