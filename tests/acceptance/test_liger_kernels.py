"""Public-code acceptance: Liger-Kernel's Triton kernels, evaluated as written, must get ``ok``.

The first wave rejected most faithful copies of public kernels (decorator arguments read as
kernel code, helper methods, libdevice aliases, version helpers with ``importlib``/``operator``,
final ``sum`` glue). Each case below takes an op module from the installed ``liger-kernel``
package (source read at test time, see `liger.solution`), adds a thin ``ModelNew`` that calls the
op's own forward function, and evaluates it on the CPU (Triton's interpreter) against a small
reference ``Model`` written here. Every one is honest and must get ``ok`` with no violation. Each
case names the Liger function it runs and what it exercises.

The cases run through the test process's warm `LocalPool` (the path RL training uses), or in fresh
processes through `tritongym.evaluate` with ``TRITONGYM_ACCEPTANCE_LAUNCHER=spawn``; unsloth's kernel
(`test_unsloth_kernels.py`) keeps the fresh route for public code in every run.

Run with the package installed (``.ci/run`` installs ``liger-kernel==0.8.5 --no-deps``); without
it the module is skipped with the reason.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import pytest
from tests.session_pool import evaluate_in_session_pool

from tritongym import Problem, Status

from . import liger

pytestmark = pytest.mark.skipif(liger.installed_version() is None,
                                reason="liger-kernel is not installed (pip install --no-deps liger-kernel==0.8.5)")


@dataclass(frozen=True)
class Case:
    op: str  # liger_kernel/ops/<op>.py
    source: str  # the Liger function the ModelNew calls
    features: str  # what it exercises
    problem: str  # the reference Model, get_inputs, get_init_inputs
    model_new: str


def _p(text: str) -> str:
    return "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n" + textwrap.dedent(text)


WEIGHTED = '''
class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden))
'''

CASES = [
    Case("swiglu", "swiglu_forward", "@triton.jit helper (silu), device_context, ensure_contiguous, 1-D grid",
         _p('''
         class Model(nn.Module):
             def forward(self, a, b):
                 return F.silu(a) * b

         def get_inputs():
             return [torch.randn(8, 96), torch.randn(8, 96)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, a, b):
        return swiglu_forward(a.contiguous(), b.contiguous())[2]
'''),
    Case("geglu", "geglu_forward", "libdevice tanh bound by a version helper (compare_version, operator)",
         _p('''
         class Model(nn.Module):
             def forward(self, a, b):
                 return F.gelu(a, approximate="tanh") * b

         def get_inputs():
             return [torch.randn(8, 96), torch.randn(8, 96)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, a, b):
        return geglu_forward(a.contiguous(), b.contiguous())[2]
'''),
    Case("relu_squared", "relu_squared_forward", "keyword constexpr arguments, row-wise grid",
         _p('''
         class Model(nn.Module):
             def forward(self, x):
                 return F.relu(x) ** 2

         def get_inputs():
             return [torch.randn(6, 100)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, x):
        return relu_squared_forward(x.contiguous())
'''),
    Case("softmax", "_softmax_forward", "single-block and multi-block kernels chosen on the host",
         _p('''
         class Model(nn.Module):
             def forward(self, x):
                 return torch.softmax(x, dim=-1)

         def get_inputs():
             return [torch.randn(5, 200)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _softmax_forward(x)[0]
'''),
    Case("rms_norm", "rms_norm_forward", "casting modes from a dict of tl dtypes, a parameter, an RSTD side output",
         _p('''
         class Model(nn.Module):
             def __init__(self, hidden):
                 super().__init__()
                 self.weight = nn.Parameter(torch.randn(hidden))

             def forward(self, x):
                 rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
                 return x * rstd * self.weight

         def get_inputs():
             return [torch.randn(6, 64)]

         def get_init_inputs():
             return [64]
         '''),
         WEIGHTED + '''
    def forward(self, x):
        return rms_norm_forward(x.contiguous(), self.weight, 1e-6, 0.0, "llama", None)[0]
'''),
    Case("layer_norm", "layer_norm_forward", "libdevice rsqrt alias, mean/rstd side outputs, two parameters",
         _p('''
         class Model(nn.Module):
             def __init__(self, hidden):
                 super().__init__()
                 self.weight = nn.Parameter(torch.randn(hidden))
                 self.bias = nn.Parameter(torch.randn(hidden))

             def forward(self, x):
                 return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)

         def get_inputs():
             return [torch.randn(6, 64)]

         def get_init_inputs():
             return [64]
         '''),
         WEIGHTED + '''
        self.bias = nn.Parameter(torch.randn(hidden))

    def forward(self, x):
        return layer_norm_forward(x.contiguous(), self.weight, self.bias, 1e-5)[0]
'''),
    Case("cross_entropy", "cross_entropy_forward",
         "Liger's cross entropy: per-row losses written by the kernel, a final torch.sum glue, an "
         "integer target, n_non_ignore read on the host with .item()",
         _p('''
         class Model(nn.Module):
             def forward(self, logits, target):
                 return F.cross_entropy(logits, target)

         def get_inputs():
             return [torch.randn(8, 50), torch.randint(0, 50, (8,))]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, logits, target):
        return cross_entropy_forward(logits.contiguous(), target, None, -100, 0.0, 0.0, "mean", None, False)[0]
'''),
    Case("kl_div", "kldiv_forward_triton", "row-wise kernel, output_tensor.sum() / BT glue on the host side",
         _p('''
         class Model(nn.Module):
             def forward(self, log_p, q):
                 return F.kl_div(log_p, q, reduction="batchmean")

         def get_inputs():
             return [torch.log_softmax(torch.randn(6, 40), -1), torch.softmax(torch.randn(6, 40), -1)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, log_p, q):
        return kldiv_forward_triton(log_p.contiguous(), q.contiguous(), False, "batchmean", 1e-10)
'''),
    Case("group_norm", "group_norm_forward", "2-D grid over (batch, group), libdevice rsqrt, reshapes on the host",
         _p('''
         class Model(nn.Module):
             def __init__(self, channels, groups):
                 super().__init__()
                 self.groups = groups
                 self.weight = nn.Parameter(torch.randn(channels))
                 self.bias = nn.Parameter(torch.randn(channels))

             def forward(self, x):
                 return F.group_norm(x, self.groups, self.weight, self.bias, 1e-6)

         def get_inputs():
             return [torch.randn(2, 8, 16)]

         def get_init_inputs():
             return [8, 4]
         '''),
         '''
class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.channels, self.groups = channels, groups
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))

    def forward(self, x):
        return group_norm_forward(x.contiguous(), self.channels, self.groups, self.weight, self.bias, 1e-6)[0]
'''),
    Case("group_norm", "group_norm_forward + group_norm_backward",
         "a two-kernel forward (statistics, then gradients) whose second kernel accumulates the "
         "weight and bias gradients with tl.atomic_add across a 2-D grid",
         _p('''
         class Model(nn.Module):
             def __init__(self, channels, groups):
                 super().__init__()
                 self.groups = groups
                 self.weight = nn.Parameter(torch.randn(channels))
                 self.bias = nn.Parameter(torch.randn(channels))

             def forward(self, x, dy):
                 # Gradients of group_norm(x) w.r.t. its weight and bias for the upstream gradient dy.
                 b, c, s = x.shape
                 g = x.view(b, self.groups, -1)
                 x_hat = ((g - g.mean(-1, keepdim=True)) * torch.rsqrt(g.var(-1, unbiased=False, keepdim=True)
                                                                        + 1e-6)).view(b, c, s)
                 return (dy * x_hat).sum(dim=(0, 2)), dy.sum(dim=(0, 2))

         def get_inputs():
             return [torch.randn(2, 8, 16), torch.randn(2, 8, 16)]

         def get_init_inputs():
             return [8, 4]
         '''),
         '''
class ModelNew(nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.channels, self.groups = channels, groups
        self.weight = nn.Parameter(torch.randn(channels))
        self.bias = nn.Parameter(torch.randn(channels))

    def forward(self, x, dy):
        x = x.contiguous()
        _, x_view, mean, rstd, _ = group_norm_forward(x, self.channels, self.groups, self.weight, self.bias, 1e-6)
        _, dw, db = group_norm_backward(dy.contiguous(), x_view, self.weight, self.bias, mean, rstd,
                                        self.channels, self.groups)
        return dw, db
'''),
    Case("poly_norm", "poly_norm_forward", "three normalised powers in one kernel, scalar weight loads",
         _p('''
         class Model(nn.Module):
             def __init__(self):
                 super().__init__()
                 self.weight = nn.Parameter(torch.randn(3))
                 self.bias = nn.Parameter(torch.randn(1))

             def forward(self, x):
                 def norm(u):
                     return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6)
                 w = self.weight
                 return w[0] * norm(x ** 3) + w[1] * norm(x ** 2) + w[2] * norm(x) + self.bias

         def get_inputs():
             return [torch.randn(4, 64)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(3))
        self.bias = nn.Parameter(torch.randn(1))

    def forward(self, x):
        return poly_norm_forward(x.contiguous(), self.weight, self.bias, 1e-6)[0]
'''),
    Case("fused_add_rms_norm", "fused_add_rms_norm_forward", "two outputs (the norm and the residual sum)",
         _p('''
         class Model(nn.Module):
             def __init__(self, hidden):
                 super().__init__()
                 self.weight = nn.Parameter(torch.randn(hidden))

             def forward(self, x, residual):
                 s = x + residual
                 return s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight, s

         def get_inputs():
             return [torch.randn(6, 64), torch.randn(6, 64)]

         def get_init_inputs():
             return [64]
         '''),
         WEIGHTED + '''
    def forward(self, x, residual):
        y, s = fused_add_rms_norm_forward(x.contiguous(), residual.contiguous(), self.weight, 1e-6, 0.0,
                                          "llama")[:2]
        return y, s
'''),
    Case("rope", "rope_forward",
         "in-place rotation of q and k: on private copies here (the kernel writes into its q/k arguments)",
         _p('''
         def rotate_half(x):
             x1, x2 = x.chunk(2, dim=-1)
             return torch.cat((-x2, x1), dim=-1)

         class Model(nn.Module):
             def forward(self, q, k, cos, sin):
                 c, s = cos.unsqueeze(1), sin.unsqueeze(1)
                 return q * c + rotate_half(q) * s, k * c + rotate_half(k) * s

         def get_inputs():
             angles = torch.rand(2, 8, 8) * 6.28
             angles = torch.cat((angles, angles), dim=-1)
             return [torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.cos(angles), torch.sin(angles)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, q, k, cos, sin):
        q_out, k_out = q.clone(), k.clone()
        q_out, k_out = rope_forward(q_out, k_out, cos, sin)[:2]
        return q_out, k_out
'''),
    Case("tvd", "tv_distance_forward_triton", "loss and gradient buffers written by one kernel, .sum() glue",
         _p('''
         class Model(nn.Module):
             def forward(self, p, q):
                 return 0.5 * (p - q).abs().sum() / p.shape[0]

         def get_inputs():
             return [torch.softmax(torch.randn(6, 40), -1), torch.softmax(torch.randn(6, 40), -1)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, p, q):
        return tv_distance_forward_triton(p.contiguous(), q.contiguous(), None, "batchmean", -100, False)[0]
'''),
    Case("utils", "element_mul_kernel",
         "a kernel launched directly with a default constexpr, in place on a private copy",
         _p('''
         class Model(nn.Module):
             def forward(self, x, scale):
                 return x * scale

         def get_inputs():
             return [torch.randn(6, 70), torch.randn(1)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, x, scale):
        y = x.contiguous().clone()
        element_mul_kernel[(y.shape[0],)](y, y.stride(0), scale, y.shape[1], BLOCK_SIZE=32)
        return y
'''),
    Case("sparsemax", "_sparsemax_forward", "a sort-free sparsemax: loops and reductions in one kernel",
         _p('''
         class Model(nn.Module):
             def forward(self, x):
                 z, _ = torch.sort(x, dim=-1, descending=True)
                 k = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
                 cumsum = z.cumsum(-1)
                 support = (1 + k * z) > cumsum
                 k_z = support.sum(-1, keepdim=True)
                 tau = (cumsum.gather(-1, k_z - 1) - 1) / k_z.to(x.dtype)
                 return torch.clamp(x - tau, min=0)

         def get_inputs():
             return [torch.randn(4, 32)]

         def get_init_inputs():
             return []
         '''),
         '''
class ModelNew(nn.Module):
    def forward(self, x):
        return _sparsemax_forward(x, -1)[0]
'''),
    Case("dyt", "liger_dyt_fwd",
         "@triton.autotune over 18 configs with key=['N'] and a grid lambda of meta (on the CPU tier each "
         "trial runs one config in rotation)",
         _p('''
         class Model(nn.Module):
             def __init__(self, hidden):
                 super().__init__()
                 self.alpha = nn.Parameter(torch.randn(1))
                 self.gamma = nn.Parameter(torch.randn(hidden))
                 self.beta = nn.Parameter(torch.randn(hidden))

             def forward(self, x):
                 return self.gamma * torch.tanh(self.alpha * x) + self.beta

         def get_inputs():
             return [torch.randn(4, 64)]

         def get_init_inputs():
             return [64]
         '''),
         '''
class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.alpha = nn.Parameter(torch.randn(1))
        self.gamma = nn.Parameter(torch.randn(hidden))
        self.beta = nn.Parameter(torch.randn(hidden))

    def forward(self, x):
        return liger_dyt_fwd(x.contiguous(), self.alpha, self.gamma, self.beta)
'''),
]

@pytest.mark.parametrize("case", CASES, ids=[f"{case.op}-{case.source}" for case in CASES])
def test_liger_kernel_verdict(case: Case):
    problem = Problem.from_source(case.problem, name=f"liger_{case.op}")
    solution = liger.solution(case.op, case.model_new)
    result = evaluate_in_session_pool(problem, solution, launcher_variable="TRITONGYM_ACCEPTANCE_LAUNCHER",
                                      device="cpu", num_trials=1, timeout=170)
    detail = (case.op, case.source, result.status, result.error, [str(v.code) for v in result.violations])
    assert result.status == Status.OK, detail
    assert result.reward > 0 and result.violations == [], detail
    assert any(k.defined_in_candidate for k in result.triton_launches), detail
