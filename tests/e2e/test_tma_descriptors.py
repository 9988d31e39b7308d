"""End-to-end: host-side TMA descriptors (`triton.tools.tensor_descriptor.TensorDescriptor`).

Triton's current tutorials pass descriptors instead of pointers. Before this test existed an
honest descriptor kernel got `integrity_violation` on the CPU tier twice over: Triton's own
alignment check (`data_ptr()` in the descriptor's constructor) was counted as the candidate
reading the input on the host, and the launch log could not describe a descriptor, so the clean
room could not replay it. Now descriptors are logged by their fields and rebuilt in the clean
room, whose bounds check covers their base; the pair below keeps both directions honest.
"""

from __future__ import annotations

import pytest

from tritongym import Status

from .helpers import PROBLEMS, run_eval

pytest.importorskip("triton.tools.tensor_descriptor")

ALIGNED = PROBLEMS / "tiny_relu_aligned.py"


def test_an_honest_descriptor_kernel_is_ok():
    result = run_eval("relu_tma_descriptor", problem=ALIGNED)
    assert result.status == Status.OK, (result.status, result.error, result.violations)
    assert result.reward == 0.5 and all(t.passed for t in result.trials)


def test_a_descriptor_larger_than_its_tensor_is_an_out_of_bounds_load():
    result = run_eval("relu_tma_descriptor_oversized", problem=ALIGNED)
    assert result.status == Status.RUNTIME_ERROR, (result.status, result.error, result.violations)
    assert "kernel `relu_desc_kernel` loaded" in result.error and "of `x_desc.base`" in result.error
