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
