"""Device names as users and requests write them: ``auto``, ``cpu``, ``cuda`` and ``cuda:N``.

Standard library only: the CLI checks ``--device`` before it knows whether torch is needed at all
(``eval --server`` evaluates elsewhere and never imports it). `device` re-exports `parse_device`.
"""

from __future__ import annotations

import re

from tritongym.errors import OptionsError

_CUDA_INDEX = re.compile(r"cuda:(\d{1,3})")


def parse_device(text: str) -> tuple[str, int | None]:
    """``auto``/``cpu``/``cuda``/``cuda:N`` → ``(kind, index)``; index None means the current one.

    Raises OptionsError for anything else (``gpu``, ``cuda:-1``, ``cuda:x``).
    """
    if not isinstance(text, str):
        raise OptionsError(f"device must be a string, got {type(text).__name__}")
    if text in ("auto", "cpu", "cuda"):
        return text, None
    match = _CUDA_INDEX.fullmatch(text)
    if match is None:
        raise OptionsError(f"device must be auto, cpu, cuda or cuda:N (N a device index), got {text!r}")
    return "cuda", int(match.group(1))
