"""Select kernels from unsloth's installed source, read at test time (no import of the package).

unsloth (https://github.com/unslothai/unsloth, Apache-2.0) is installed from the package index with
``--no-deps``; its kernels modules import GPU-only helpers from their package, so instead of
inlining those, this takes from a kernels module only the top-level statements that define the
named kernels (their ``def``, and the call-form ``name = triton.jit(name, ...)`` /
``name = triton.heuristics({...})(name)`` lines, unsloth's style) and the module's imports of
triton, torch and math. No line is edited.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

VERSION = "2026.10.9"


def installed_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("unsloth")
    except Exception:  # noqa: BLE001 - not installed
        return None


def _kernel_import(node: ast.Import | ast.ImportFrom) -> bool:
    """Imports of triton, torch and math only (the module's model patches import transformers)."""
    if isinstance(node, ast.ImportFrom):
        return not node.level and (node.module or "").split(".")[0] in ("triton", "torch", "math")
    return all(alias.name.split(".")[0] in ("triton", "torch", "math") for alias in node.names)


def kernels(module: str, names: tuple[str, ...]) -> str:
    """The source of `names` (definitions and call-form rebindings, in file order) from `module`."""
    root = importlib.util.find_spec("unsloth")
    if root is None or root.origin is None:
        raise FileNotFoundError("unsloth is not installed")
    path = Path(root.origin).parent.joinpath(*module.split(".")[1:]).with_suffix(".py")
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    kept: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and _kernel_import(node):
            kept.append(ast.get_source_segment(source, node))
        elif isinstance(node, ast.FunctionDef) and node.name in names:
            start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            kept.append("\n".join(source.splitlines()[start - 1:node.end_lineno]))
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in node.targets):
            kept.append(ast.get_source_segment(source, node))
    header = f'"""unsloth {VERSION}: {", ".join(names)} from {module}, and a thin ModelNew."""\n'
    return header + "\n\n\n".join(kept) + "\n\n\nimport torch.nn as nn\n"
