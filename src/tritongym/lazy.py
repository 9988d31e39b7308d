"""Package facades that load their public names on first use (PEP 562).

`tritongym`, `tritongym.evaluator`, `tritongym.execution` and `tritongym.service` re-export names
from their modules without importing them: ``tritongym --help`` does not pay for torch, and a
jailed worker that imports ``tritongym.evaluator.worker.candidate`` does not load the verdict
logic with its package (tests/unit/test_layout.py).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict[str, Any],
                 on_import_error: Callable[[str, ImportError], Exception] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for `package`: each name in `exports` is read from its module on
    first access and cached in the package's `namespace`. `on_import_error` turns a missing
    optional dependency into the package's own error (the service extra)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(module), name)
        except ImportError as exc:
            if on_import_error is None:
                raise
            raise on_import_error(name, exc) from exc
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
