"""Prompt templates: files in package data (`tritongym/env/templates/`), overridable by path.

Templates are `string.Template` text (``$name`` placeholders), so the braces of code examples need
no escaping. A directory given as the override replaces the files it contains and keeps the
packaged ones for the rest; every template's SHA-256 is recorded in trajectory provenance.
"""

from __future__ import annotations

import hashlib
import os
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

#: Template files: system rules, the task, feedback after an evaluation, feedback after a void
#: turn, and the optional few-shot example appended to the task.
TEMPLATE_NAMES = ("system", "task", "feedback", "void", "few_shot")


@dataclass(frozen=True)
class PromptTemplates:
    """The five prompt templates as text, and where each came from."""

    system: str
    task: str
    feedback: str
    void: str
    few_shot: str
    origins: tuple[tuple[str, str], ...] = ()

    @classmethod
    def load(cls, directory: str | os.PathLike[str] | None = None) -> PromptTemplates:
        """The packaged templates, with any ``<name>.md`` found in `directory` taking precedence."""
        override = Path(directory) if directory is not None else None
        if override is not None and not override.is_dir():
            raise FileNotFoundError(f"prompt template folder not found: {override}")
        texts: dict[str, str] = {}
        origins = []
        packaged = resources.files("tritongym.env") / "templates"
        for name in TEMPLATE_NAMES:
            candidate = override / f"{name}.md" if override is not None else None
            if candidate is not None and candidate.is_file():
                texts[name] = candidate.read_text(encoding="utf-8")
                origins.append((name, str(candidate)))
            else:
                texts[name] = (packaged / f"{name}.md").read_text(encoding="utf-8")
                origins.append((name, "package"))
        return cls(**texts, origins=tuple(origins))

    def render(self, template: str, /, **values: object) -> str:
        """Fill `template`; a placeholder without a value is an error (a template typo)."""
        try:
            return string.Template(getattr(self, template)).substitute(**{k: str(v) for k, v in values.items()})
        except KeyError as exc:
            raise ValueError(f"prompt template {template!r} uses ${exc.args[0]}, which the environment does not "
                             f"provide") from None

    def hashes(self) -> dict[str, str]:
        """SHA-256 of each template's text, for provenance."""
        return {name: hashlib.sha256(getattr(self, name).encode("utf-8")).hexdigest() for name in TEMPLATE_NAMES}
