"""Code extraction: the last fenced Python block outside reasoning; no block is a void turn."""

from __future__ import annotations

import pytest

from tritongym.env import extract_first_python_block, extract_last_python_block, resolve_extractor, strip_reasoning


def test_last_python_block_wins_over_earlier_drafts():
    reply = "Draft:\n```python\nx = 1\n```\nFixed:\n```py\nx = 2\n```\nDone."
    assert extract_last_python_block(reply) == "x = 2\n"
    assert extract_first_python_block(reply) == "x = 1\n"


def test_blocks_in_other_languages_and_inside_reasoning_are_ignored():
    reply = "<think>\n```python\nsecret = 1\n```\n</think>\n```bash\npip install x\n```\n```python\nok = 1\n```"
    assert extract_last_python_block(reply) == "ok = 1\n"
    assert extract_last_python_block("<think>```python\nx = 1\n```</think> no code here") is None


def test_no_block_or_a_blank_block_is_void():
    assert extract_last_python_block("I would write a kernel that ...") is None
    assert extract_last_python_block("```python\n   \n```") is None


def test_longer_fences_hold_backticks_inside():
    reply = "````python\ns = '```'\n````"
    assert extract_last_python_block(reply) == "s = '```'\n"


def test_unclosed_reasoning_hides_the_rest():
    assert strip_reasoning("a<think>b") == "a"


def test_resolve_extractor_names_and_callables():
    assert resolve_extractor("whole")("<think>x</think>\nimport torch") == "import torch\n"
    custom = resolve_extractor(lambda reply: reply.upper())
    assert custom("a") == "A"
    with pytest.raises(ValueError, match="last, first, whole"):
        resolve_extractor("middle")
