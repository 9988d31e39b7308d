"""`Problem`: one KernelBench-format task.

A problem is Python source defining `class Model(nn.Module)`, `get_inputs()` (the forward
arguments, usually random CPU tensors) and `get_init_inputs()` (the constructor arguments). The
candidate supplies `class ModelNew` with the same constructor signature. A `Problem` holds the
source as text and is never executed by the process that creates it: only the evaluator's
reference worker runs it.
"""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from dataclasses import dataclass, field

from tritongym import pyparse
from tritongym.errors import ProblemError

#: Names a KernelBench-format problem must define at module level.
REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
#: First line of a CPU-size variant (`tritongym.tasks.sizing`): its size travels with its source.
SIZE_MARKER = "# tritongym-size: cpu"


def normalized_source_hash(source: str) -> str:
    """SHA-256 of `source` with comments, blank lines and indentation-insensitive whitespace removed.

    Two files that differ only in comments or spacing hash the same (KernelBench's dataset
    hash has the same intent). Falls back to hashing the raw text when it does not tokenize.
    """
    try:
        tokens = []
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
                continue
            if tok.type in (tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
                tokens.append(tokenize.tok_name[tok.type])
                continue
            tokens.append(tok.string)
        text = "\x1f".join(tokens)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        text = source
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _module_level_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that run at module level, including inside ``if``/``try``/``with`` blocks."""
    statements: list[ast.stmt] = []
    for node in body:
        statements.append(node)
        if isinstance(node, (ast.If, ast.For, ast.While)):
            statements += _module_level_statements(node.body + node.orelse)
        elif isinstance(node, ast.With):
            statements += _module_level_statements(node.body)
        elif isinstance(node, ast.Try):
            blocks = node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
            statements += _module_level_statements(blocks)
    return statements


def defined_names(tree: ast.Module) -> set[str]:
    """Module-level names a module defines (classes, functions, simple assignments, imports)."""
    names: set[str] = set()
    for node in _module_level_statements(tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
    return names


@dataclass(frozen=True)
class Problem:
    """One KernelBench-format task.

    Attributes:
        source: the problem's Python source (`Model`, `get_inputs`, `get_init_inputs`).
        name: a short human name, e.g. ``19_ReLU``.
        problem_id: a stable identifier, e.g. ``kernelbench/level1/19`` or ``builtin/03_gelu``.
        level: KernelBench level (1, 2, 3) or None for problems outside KernelBench.
        origin: where it was loaded from (a path, or ``dataset:row``), for messages only.
        content_hash: `normalized_source_hash(source)`, computed on creation.
    """

    source: str
    name: str
    problem_id: str
    level: int | None = None
    origin: str | None = None
    content_hash: str = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ProblemError(f"problem {self.problem_id!r}: the source is empty")
        try:
            tree = pyparse.parse(self.source)
        except SyntaxError as exc:
            raise ProblemError(
                f"problem {self.problem_id!r} ({self.origin or 'inline'}): not valid Python: "
                f"{exc.msg} at line {exc.lineno}"
            ) from exc
        missing = [name for name in REQUIRED_NAMES if name not in defined_names(tree)]
        if missing:
            raise ProblemError(
                f"problem {self.problem_id!r} ({self.origin or 'inline'}) does not define "
                f"{', '.join(missing)}; a KernelBench-format problem defines `class Model`, "
                "`get_inputs()` and `get_init_inputs()` at module level"
            )
        object.__setattr__(self, "content_hash", normalized_source_hash(self.source))

    @property
    def size(self) -> str:
        """``cpu`` for a CPU-size variant (`tritongym.tasks.sizing`), else ``original``."""
        return "cpu" if self.source.startswith(SIZE_MARKER) else "original"

    @property
    def size_note(self) -> str | None:
        """What a CPU-size variant changed (``batch_size 4096->16, dim 393216->4096``), else None."""
        if not self.source.startswith(SIZE_MARKER):
            return None
        first = self.source.split("\n", 1)[0][len(SIZE_MARKER):].strip()
        return first[1:-1] if first.startswith("(") and first.endswith(")") else first

    @classmethod
    def from_source(cls, source: str, name: str = "problem", **kwargs: object) -> Problem:
        """Build a problem from source text; `problem_id` defaults to `name`."""
        problem_id = str(kwargs.pop("problem_id", name))
        return cls(source=source, name=name, problem_id=problem_id, **kwargs)  # type: ignore[arg-type]
