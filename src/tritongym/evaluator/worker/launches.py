"""Record the Triton kernels a forward launches, what each received, and what their bodies are.

Installed in the candidate worker *before* the candidate is imported. It wraps the leaf launch
methods at class level: `JITFunction.run` (compiled kernels on a GPU), `InterpretedFunction.run`
(``TRITON_INTERPRET=1``, where ``@triton.jit`` returns an `InterpretedFunction`) and
`CompiledKernel.__getitem__` (a kernel compiled ahead with ``warmup``/``compile`` and launched
directly). `Autotuner` and `Heuristics` end in these, so autotuned kernels are seen too.

Each launch records the kernel's name (and on a GPU the exact compiled name, for coverage), the
file that defines it, the grid, and the storages of its tensor arguments, looking inside tuples
and TMA `TensorDescriptor`s. The storages feed `optrace.DataFlow` (what the candidate's kernels
wrote, for output provenance). Before a candidate kernel runs, its body and its arguments are
checked (`kernels.BodyChecker`, `kernels.describe_foreign_argument`): plain Python inside a kernel
is a ``python_in_kernel`` finding.

The launch itself is *not* hidden from the op trace: launch-time Python (grid callables, pre-run
hooks, combine functions) is the candidate's, and `optrace.Attribution` tells it apart from the
interpreter's own work. Only this module's bookkeeping runs untraced.

Defends against: decoy kernels never launched (A3), kernels borrowed from other files (A5),
computing in PyTorch and returning a buffer no kernel wrote (A1, with `optrace`), Python run
inside interpreted kernels. Residual risk: the hook lives in the candidate's process (see
docs/integrity.md, "Evidence").
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from tritongym.evaluator.worker.kernels import BodyChecker, describe_foreign_argument, unwrap
from tritongym.evaluator.worker.launchlog import Unloggable, grid_dims, kernel_key
from tritongym.evaluator.worker.optrace import DataFlow, storage_span, untraced


@dataclass
class Launch:
    """One kernel launch: who, where from, with which grid and argument storages."""

    kernel: str
    source_file: str
    grid: str
    arg_spans: list[tuple[int, int]] = field(default_factory=list)
    compiled_name: str | None = None


def launch_tensors(values: Any, depth: int = 0) -> list[torch.Tensor]:
    """Every tensor a kernel receives: plain, in tuples/lists, as a descriptor's base, or wrapped."""
    found: list[torch.Tensor] = []
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (tuple, list)) and depth < 6:
        for value in values:
            found.extend(launch_tensors(value, depth + 1))
        return found
    base = getattr(values, "base", None)  # TensorDescriptor, TensorWrapper
    if isinstance(base, torch.Tensor) and type(values).__module__.startswith("triton"):
        return [base]
    return found


def launch_name(function: Any) -> str:
    """The log's key of a launched kernel (`launchlog.kernel_key`), for messages."""
    fn, _ = unwrap(function)
    return kernel_key(fn) if fn is not None else type(function).__name__


class LaunchRecorder:
    """Collects `Launch` records while `active`; install once with `install()`."""

    def __init__(self, candidate_file: str | None = None, body_checker: BodyChecker | None = None) -> None:
        self.active = False
        self.launches: list[Launch] = []
        self.installed: list[str] = []
        self.candidate_file = os.path.realpath(candidate_file) if candidate_file else None
        self.body_checker = body_checker
        self.flow: DataFlow | None = None
        #: The clean room's launch log (`launchlog.LaunchLog`), when the worker keeps one.
        self.log: Any = None
        #: python_in_kernel findings of the current call (body and argument checks).
        self.findings: list[str] = []
        self._rewritten: dict[int, Any] = {}
        #: Launches of candidate kernels from a thread other than the one running the forward.
        self.foreign_thread_launches = 0
        self._get_ident = threading.get_ident
        self._forward_thread = self._get_ident()

    def start(self, flow: DataFlow | None = None) -> None:
        self.launches = []
        self.findings = []
        self.foreign_thread_launches = 0
        self._forward_thread = self._get_ident()
        self.flow = flow
        self.active = True

    def stop(self) -> list[Launch]:
        self.active = False
        self.flow = None
        return self.launches

    def _source_of(self, function: Any) -> tuple[str, str, Any]:
        fn, _ = unwrap(function)
        code = getattr(fn, "__code__", None)
        source_file = os.path.realpath(code.co_filename) if code is not None else "<unknown>"
        name = getattr(fn, "__name__", None) or type(function).__name__
        return name, source_file, fn

    def _before(self, function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Check a candidate kernel's body and arguments before it runs."""
        name, source_file, fn = self._source_of(function)
        if self.candidate_file is None or source_file != self.candidate_file:
            return
        if self._get_ident() != self._forward_thread:
            self.foreign_thread_launches += 1
        if self.body_checker is not None:
            for finding in self.body_checker.check(fn):
                if finding not in self.findings:
                    self.findings.append(finding)
        for position, value in [*enumerate(args), *kwargs.items()]:
            problem = describe_foreign_argument(value)
            if problem is not None:
                finding = (f"kernel {name} received {problem} as argument {position}: kernels take tensors, "
                           "scalars, dtypes and constexprs; the CPU interpreter would run a Python object's "
                           "code as plain Python")
                if finding not in self.findings:
                    self.findings.append(finding)
        self._guard_rewrite_cache(function, fn, name)

    def _guard_rewrite_cache(self, function: Any, fn: Any, name: str) -> None:
        """The interpreter caches each kernel's rewritten Python in a class-level dict; a candidate
        that plants its own function there would run arbitrary Python as the "kernel"."""
        cache = getattr(type(function), "rewritten_fn", None)
        if not isinstance(cache, dict) or fn is None:
            return
        planted = cache.get(fn)
        if planted is not None and self._rewritten.get(id(fn)) is not planted:
            cache.pop(fn, None)
            self.findings.append(f"kernel {name}: the interpreter's cache of rewritten kernels was modified; "
                                 "the kernel is rebuilt from its source")

    def _note_rewrite(self, function: Any) -> None:
        """Remember the interpreter's own rewrite of a kernel (any launch, checked or not)."""
        cache = getattr(type(function), "rewritten_fn", None)
        fn = getattr(function, "fn", None)
        if isinstance(cache, dict) and fn is not None and fn in cache:
            self._rewritten[id(fn)] = cache[fn]

    def _after(self, function: Any, grid: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> None:
        name, source_file, fn = self._source_of(function)
        tensors = launch_tensors([*args, *kwargs.values()])
        if self.flow is not None and source_file == self.candidate_file:
            self.flow.after_launch(tensors)
        grid_text = repr(tuple(grid)) if isinstance(grid, (tuple, list)) else "<callable>"
        compiled = getattr(result, "name", None)
        self.launches.append(Launch(kernel=name, source_file=source_file, grid=grid_text[:200],
                                    arg_spans=[storage_span(t) for t in tensors],
                                    compiled_name=compiled if isinstance(compiled, str) else None))

    def _wrap(self, cls: type) -> None:
        original = cls.run
        recorder = self

        def run(self, *args, grid=None, warmup=False, **kwargs):  # noqa: ANN001 - Triton's signature
            log = recorder.log
            logging = log is not None and log.active and not warmup and log.depth == 0
            launch_grid = grid
            if recorder.active and not warmup:
                with untraced():
                    recorder._before(self, args, kwargs)
            if logging:
                with untraced():
                    pending = log.before_launch(self, args, kwargs)
                resolved: list[Any] = []
                if callable(grid):
                    # The candidate's grid callable runs once, where Triton calls it; the log keeps
                    # its sizes as ints, read there: the interpreter gives `meta`'s integers as
                    # its scalar tensors, which have `__index__` only while the launch runs
                    # (``triton.cdiv(meta["n"], meta["BLOCK"])``). Triton then gets those same
                    # ints, so the launch runs exactly the grid the log says (the clean room
                    # never runs the callable).
                    def launch_grid(meta, _grid=grid, _resolved=resolved, _name=self):  # noqa: ANN001, ANN202
                        value = _grid(meta)
                        try:
                            dims = grid_dims(value, launch_name(_name))
                        except Unloggable as exc:
                            _resolved.append(exc)
                            return value  # Triton judges it as it would have
                        _resolved.append(dims)
                        return tuple(dims)
                else:
                    resolved.append(grid)
                log.depth += 1
            try:
                result = original(self, *args, grid=launch_grid, warmup=warmup, **kwargs)
            finally:
                # The interpreter's own rewrite, even when the kernel then raised.
                recorder._note_rewrite(self)
                if logging:
                    log.depth -= 1
            if logging:
                with untraced():
                    log.after_launch(pending, resolved[0] if resolved else None)
            # Recorded only once the launch returned: a kernel that raises did no work.
            if recorder.active and not warmup:
                with untraced():
                    recorder._after(self, grid, args, kwargs, result)
            return result

        run.__wrapped__ = original  # type: ignore[attr-defined]
        cls.run = run
        self.installed.append(f"{cls.__module__}.{cls.__qualname__}.run")

    def _wrap_compiled(self, cls: type) -> None:
        """Kernels compiled ahead (``k.warmup(...)``) and launched as ``compiled[grid](*args)``."""
        original = cls.__getitem__
        recorder = self

        def getitem(self, grid):  # noqa: ANN001 - Triton's signature
            runner = original(self, grid)
            source = getattr(getattr(self, "src", None), "fn", None)

            def launch(*args, **kwargs):  # noqa: ANN002, ANN003
                if recorder.log is not None and recorder.log.active and recorder.log.depth == 0:
                    recorder.log.fail("a kernel compiled ahead and launched as compiled[grid](...) cannot be "
                                      "replayed from its source; launch it as kernel[grid](...)")
                if recorder.active and source is not None:
                    with untraced():
                        recorder._before(source, args, kwargs)
                result = runner(*args, **kwargs)
                if recorder.active:
                    with untraced():
                        recorder._after(source if source is not None else self, grid, args, kwargs, self)
                return result

            return launch

        getitem.__wrapped__ = original  # type: ignore[attr-defined]
        cls.__getitem__ = getitem
        self.installed.append(f"{cls.__module__}.{cls.__qualname__}.__getitem__")

    def install(self) -> None:
        """Wrap every leaf launch path this Triton version has."""
        from triton.runtime import jit

        self._wrap(jit.JITFunction)
        try:
            from triton.runtime.interpreter import InterpretedFunction
        except ImportError:  # pragma: no cover - every supported Triton has the interpreter
            InterpretedFunction = None
        if InterpretedFunction is not None:
            self._wrap(InterpretedFunction)
        try:
            from triton.compiler.compiler import CompiledKernel
        except ImportError:  # pragma: no cover
            return
        self._wrap_compiled(CompiledKernel)
