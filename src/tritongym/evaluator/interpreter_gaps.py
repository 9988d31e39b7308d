"""Which constructs of a candidate's own text the CPU interpreter cannot run (decided in the parent).

A worker that reports "the interpreter cannot run this kernel" (status ``unsupported``) is
believed only when the hashed source itself calls such a construct; otherwise the claim is an
exception text the candidate could have written (docs/integrity.md, "The clean room").
"""

from __future__ import annotations

import ast

from tritongym import pyparse
from tritongym.evaluator.common.interpreter import (
    EMULATED_BINARY,
    EMULATED_UNARY,
    INTERPRETER_GAPS,
    removed_constructs,
)


def interpreter_gaps(source: str) -> list[str]:
    """Calls in the source to constructs the CPU interpreter lacks: inline assembly, extern
    library calls, and libdevice functions the CPU tier does not emulate.

    A candidate's claim that the interpreter could not run its kernel is believed only when its
    own text uses one of these; otherwise the claim is an exception text the candidate wrote.
    """
    gaps = INTERPRETER_GAPS | removed_constructs()

    try:
        tree = pyparse.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            owner = node.func.value
            owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in gaps:
                found.append(name)
            elif "libdevice" in owner_name and name not in EMULATED_UNARY and name not in EMULATED_BINARY:
                found.append(f"libdevice.{name}")
    return found
