"""End-to-end: the CPU tier runs GPU idioms the bare Triton interpreter cannot (interpreter_fixes):
float scalar arguments cast with .to(), libdevice functions, aliases of tl builtins."""

from __future__ import annotations

import tritongym
from tritongym import Status

from .helpers import TINY_RELU, candidate


def test_gpu_idioms_run_on_the_cpu_tier_and_are_correct():
    result = tritongym.evaluate(TINY_RELU, candidate("interp_gpu_idioms"), device="cpu", num_trials=2, timeout=120)
    assert result.status == Status.OK, (result.status, result.error)
    assert result.violations == []


def test_what_the_interpreter_cannot_run_is_unsupported_not_the_kernels_fault():
    result = tritongym.evaluate(TINY_RELU, candidate("interp_inline_asm"), device="cpu", num_trials=1, timeout=120)
    assert result.status == Status.UNSUPPORTED, (result.status, result.error)
    assert result.reward == 0 and not result.correct
    assert [n.code for n in result.notices if n.code == "interpreter_limit"] == ["interpreter_limit"]
    assert "inline_asm not supported in interpreter mode" in (result.error or "")
