"""The task audit's findings, as shipped with tritongym (``tasks/audit_flags.json``).

`tritongym audit` writes the file; the evaluator reads it to give flagged (degenerate) tasks a
stricter tolerance automatically. Entries are keyed by `Problem.content_hash`, so a renamed copy
of a flagged problem is still recognised and an edited one is not.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources

from tritongym.errors import ProblemError


@dataclass(frozen=True)
class TaskFlags:
    """What the audit found about one problem, and the tolerance it recommends (None: no override)."""

    problem_id: str
    flags: tuple[str, ...]
    atol: float | None
    rtol: float | None


@functools.lru_cache(maxsize=1)
def audit_flags() -> dict[str, TaskFlags]:
    """Flagged problems by content hash (empty when no audit file is shipped)."""
    entry = resources.files("tritongym.tasks") / "audit_flags.json"
    if not entry.is_file():
        return {}
    try:
        data = json.loads(entry.read_text(encoding="utf-8"))
        return {
            content_hash: TaskFlags(
                problem_id=str(item.get("problem_id", "")),
                flags=tuple(str(f) for f in item.get("flags", [])),
                atol=None if item.get("atol") is None else float(item["atol"]),
                rtol=None if item.get("rtol") is None else float(item["rtol"]),
            )
            for content_hash, item in data.get("problems", {}).items()
        }
    except (ValueError, TypeError, AttributeError) as exc:
        raise ProblemError(f"tritongym's audit_flags.json is malformed: {exc}") from exc
