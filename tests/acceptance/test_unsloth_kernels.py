"""Public-code acceptance: unsloth's call-form kernels (``fn = triton.jit(fn, ...)``, then
``fn = triton.heuristics({...})(fn)``), which a decorator-reading gate could not even see.

The kernels are read from the installed ``unsloth`` package at test time (`unsloth_kernels.kernels`);
``.ci/run`` installs ``unsloth==2026.10.9 --no-deps``. Without it the module is skipped.
"""

from __future__ import annotations

import textwrap

import pytest

import tritongym
from tritongym import Problem, Status

from . import unsloth_kernels

pytestmark = pytest.mark.skipif(unsloth_kernels.installed_version() is None,
                                reason="unsloth is not installed (pip install --no-deps unsloth==2026.10.9)")

PROBLEM = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        """RMSNorm forward and its input gradient for an upstream gradient dy."""

        def __init__(self, hidden):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(hidden))

        def forward(self, x, dy):
            n = x.shape[-1]
            r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
            normed = x * r
            dyw = dy * self.weight
            dx = r / n * (n * dyw - normed * (dyw * normed).sum(-1, keepdim=True))
            return normed * self.weight, dx


    def get_inputs():
        return [torch.randn(6, 64), torch.randn(6, 64)]


    def get_init_inputs():
        return [64]
''')

MODEL_NEW = '''
class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))

    def forward(self, x, dy):
        x, dy = x.contiguous(), dy.contiguous()
        n_rows, n_cols = x.shape
        block = triton.next_power_of_2(n_cols)
        y = torch.empty_like(x)
        r = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        _rms_layernorm_forward[(n_rows,)](y, x, self.weight, r, y.stride(0), x.stride(0), self.weight.stride(0),
                                          r.stride(0), n_cols, 1e-6, LONG_INDEXING=False, BLOCK_SIZE=block)
        dx = torch.empty_like(x)
        _rms_layernorm_backward[(n_rows,)](dy, dx, x, self.weight, r, dx, n_rows, 1, dy.stride(0), dx.stride(0),
                                           x.stride(0), self.weight.stride(0), r.stride(0), n_cols, 1e-6,
                                           GEMMA=False, LONG_INDEXING=False, BLOCK_SIZE=block, TRAIN_W=False,
                                           FROM_Y=False)
        return y, dx
'''


def test_unsloth_call_form_rms_norm_kernels_are_ok():
    """unsloth.kernels.rms_layernorm: _rms_layernorm_forward (decorated), _rms_layernorm_backward
    (call-form jit with do_not_specialize, then call-form heuristics) and its @triton.jit row helper."""
    solution = unsloth_kernels.kernels("unsloth.kernels.rms_layernorm",
                                       ("_rms_layernorm_forward", "_rms_backward_row", "_rms_layernorm_backward"))
    result = tritongym.evaluate(Problem.from_source(PROBLEM, name="unsloth_rms_norm"), solution + MODEL_NEW,
                                device="cpu", num_trials=1, timeout=170)
    assert result.status == Status.OK, (result.status, result.error, result.violations)
    launched = {k.kernel for k in result.triton_launches if k.defined_in_candidate}
    assert launched == {"_rms_layernorm_forward", "_rms_layernorm_backward"}, launched
