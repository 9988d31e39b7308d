"""``ast.parse`` behind one process-wide lock.

CPython before 3.11.8 / 3.12.1 keeps the AST converter's recursion counter in state shared by
threads (gh-106905): two threads parsing at once can fail with ``SystemError: AST constructor
recursion depth mismatch``. A pool's slot threads (static checks, the clean room's choices) and a
service's request threads all parse sources, so every parse in the parent goes through here.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` of `source`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename)
