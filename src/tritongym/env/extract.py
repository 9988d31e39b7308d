"""Code extraction: which part of the model's reply is the candidate solution.

The default takes the last fenced Python block (```python ... ```, also ```py and ```python3),
which is what a model that drafts and then corrects itself ends with. A reply without one is a
*void turn*: nothing is evaluated, the reward is 0 and the feedback says what was expected.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: A fenced block: an opening fence of three or more backticks with a language tag, the body, and a
#: closing fence of the same length at the start of a line. Non-greedy, so blocks do not merge.
_FENCE = re.compile(r"^(?P<fence>`{3,})[ \t]*(?P<lang>[A-Za-z0-9_+.-]*)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                    re.MULTILINE | re.DOTALL)
_THINK = re.compile(r"<think>.*?(</think>|\Z)", re.DOTALL)

PYTHON_TAGS = frozenset({"python", "py", "python3"})

#: Extracts the candidate source from a reply, or returns None for a void turn.
CodeExtractor = Callable[[str], "str | None"]


def strip_reasoning(text: str) -> str:
    """The reply without its ``<think>…</think>`` blocks (an unclosed one runs to the end)."""
    return _THINK.sub("", text)


def fenced_blocks(text: str, languages: frozenset[str] | None = PYTHON_TAGS) -> list[str]:
    """Bodies of the fenced code blocks of `text` in order; `languages` None accepts any tag."""
    blocks = []
    for match in _FENCE.finditer(text):
        lang = match.group("lang").lower()
        if languages is None or lang in languages:
            blocks.append(match.group("body"))
    return blocks


def extract_last_python_block(reply: str) -> str | None:
    """The last ```python block outside reasoning, or None when there is none (or it is blank)."""
    blocks = fenced_blocks(strip_reasoning(reply))
    if not blocks or not blocks[-1].strip():
        return None
    return blocks[-1]


def extract_first_python_block(reply: str) -> str | None:
    """The first ```python block outside reasoning, or None."""
    blocks = fenced_blocks(strip_reasoning(reply))
    if not blocks or not blocks[0].strip():
        return None
    return blocks[0]


def extract_whole_reply(reply: str) -> str | None:
    """The reply itself (reasoning removed) for models told to answer with bare code; None if blank."""
    text = strip_reasoning(reply).strip()
    return text + "\n" if text else None


EXTRACTORS: dict[str, CodeExtractor] = {
    "last": extract_last_python_block,
    "first": extract_first_python_block,
    "whole": extract_whole_reply,
}


def resolve_extractor(spec: str | CodeExtractor) -> CodeExtractor:
    """A named extractor (``last``, ``first``, ``whole``) or any callable ``reply -> code | None``."""
    if callable(spec):
        return spec
    try:
        return EXTRACTORS[spec]
    except KeyError:
        raise ValueError(f"code extractor must be one of {', '.join(EXTRACTORS)} or a callable, got {spec!r}") from None
