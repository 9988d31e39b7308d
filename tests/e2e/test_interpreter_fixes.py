"""End-to-end: the CPU tier runs GPU idioms the bare Triton interpreter cannot (interpreter_fixes):
float scalar arguments cast with .to(), libdevice functions, aliases of tl builtins."""

from __future__ import annotations

import pytest

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


def test_a_scalar_tensor_made_of_a_one_element_array_converts_to_an_index(monkeypatch):
    # Triton 3.6's interpreter spells `__index__` as int(handle.data); its scalars hold one-element
    # 1-D arrays, which NumPy >= 2.4 refuses to convert, so every `range(0, K, BLOCK)` over a kernel
    # argument raised TypeError (an H100 machine's Triton 3.6). Rebuilt here on any Triton.
    import operator
    from types import SimpleNamespace

    import numpy as np
    from triton.runtime import interpreter

    from tritongym.evaluator.worker import interpreter_fixes

    def triton_36_patch(tensor, scope):
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", triton_36_patch)
    interpreter_fixes._scalar_index()
    interpreter_fixes._scalar_index()  # idempotent: wraps once

    class Scope:
        def set_attr(self, obj, name, value):
            setattr(obj, name, value)

    class Scalar:
        pass

    interpreter._patch_lang_tensor(Scalar, Scope())
    scalar = Scalar()
    scalar.handle = SimpleNamespace(data=np.array([7], dtype=np.int32))
    assert operator.index(scalar) == 7 and list(range(0, scalar, 3)) == [0, 3, 6]
    block = Scalar()
    block.handle = SimpleNamespace(data=np.array([1, 2], dtype=np.int32))
    with pytest.raises(TypeError):
        operator.index(block)  # a block is not an index, as on the GPU
