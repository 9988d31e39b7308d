"""Fast static pre-checks of a candidate's source, run before any process starts.

They read the source as an AST and never execute it. They decide only what is certain from the
text: whether it parses, whether `ModelNew` is defined, whether any ``@triton.jit`` kernel exists.
Everything else they notice is reported as a finding; the run-time checks make the decisions
(static checks are evaded by aliasing, ``getattr`` and ``exec``; reward-hacking.md §3.10).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tritongym.tasks.problem import defined_names


@dataclass(frozen=True)
class StaticReport:
    """What the source shows without running it."""

    syntax_error: str | None = None
    defines_model_new: bool = False
    triton_kernels: tuple[str, ...] = ()
    findings: tuple[str, ...] = field(default_factory=tuple)


def _decorator_name(node: ast.expr) -> str:
    """Dotted name of a decorator, with any call stripped: ``@triton.jit(...)`` → ``triton.jit``."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_triton_jit(name: str) -> bool:
    return name in ("jit", "triton.jit", "tl.jit") or name.endswith("triton.jit")


def inspect_source(source: str) -> StaticReport:
    """Parse `source` and report what it defines."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return StaticReport(syntax_error=f"SyntaxError: {exc.msg}{where}")
    kernels = tuple(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(_is_triton_jit(_decorator_name(d)) for d in node.decorator_list)
    )
    findings = []
    if any(isinstance(node, ast.Try) for node in ast.walk(tree)):
        findings.append("the source uses try/except; a fallback path that skips the Triton kernels "
                        "is caught at run time (every forward must launch a candidate kernel)")
    return StaticReport(
        defines_model_new="ModelNew" in defined_names(tree),
        triton_kernels=kernels,
        findings=tuple(findings),
    )
