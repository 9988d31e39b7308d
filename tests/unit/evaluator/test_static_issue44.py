"""The static gate on Inductor's and dynamo's helpers and on ``triton.jit = ...`` (issue 44, families 4, 5).

Pairs: what honest generated code and import guards write is not forbidden; what the old rule
stopped for a reason (the compiler, an autotuner that compiles and launches by itself, a real
module's attributes) still is, or is left to the run time's identity checks, which
`tests/acceptance/test_honest_refusals_44.py` shows naming a real rebinding of ``triton.jit``.
"""

from __future__ import annotations

import pytest

from tritongym.evaluator.static import WATCHED_AT_RUN_TIME, inspect_source

MODEL_NEW = "\nclass ModelNew:\n    pass\n"

HONEST = {
    "triton_heuristics-namespace": "from torch._inductor.runtime import triton_heuristics\nimport triton\n"
                                   "g = triton_heuristics.grid(1024)\n",
    "triton_heuristics-dotted": "import torch._inductor.runtime.triton_heuristics\nimport torch\nimport triton\n"
                                "g = torch._inductor.runtime.triton_heuristics.grid(16, 16)\n",
    "triton_heuristics-alias": "import torch._inductor.runtime.triton_heuristics as th\nimport triton\n"
                               "g = th.grid(8)\n",
    "rand_strided": "from torch._dynamo.testing import rand_strided\nimport torch\nimport triton\n"
                    "x = rand_strided((4, 4), (4, 1), device='cpu', dtype=torch.float32)\n",
    "rand_strided-dotted": "import torch._dynamo.testing\nimport torch\nimport triton\n"
                           "x = torch._dynamo.testing.rand_strided((4, 4), (4, 1))\n",
    "guards-aliases": "import torch\nimport triton\nassert_size_stride = torch._C._dynamo.guards.assert_size_stride\n"
                      "empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu\n",
    "magicmock-guard": "try:\n    import triton\n    import triton.language as tl\nexcept ImportError:\n"
                       "    from unittest.mock import MagicMock\n    triton = MagicMock()\n"
                       "    triton.jit = lambda fn: fn\n"
                       "    setattr(triton, 'autotune', lambda *a, **k: (lambda f: f))\n",
    "stand-in-class": "import triton\nif not hasattr(triton, 'jit'):\n    class triton:\n        pass\n"
                      "    triton.jit = staticmethod(lambda fn: fn)\n",
    # dead code on the real module: the run time compares triton.jit's identity after every forward
    "dead-branch-on-the-module": "import os\nimport triton\nif os.environ.get('NO_TRITON_PLEASE'):\n"
                                 "    triton.jit = lambda fn: fn\n",
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_honest_generated_code_and_import_guards_are_not_forbidden(name):
    report = inspect_source(HONEST[name] + MODEL_NEW)
    assert report.forbidden == (), report.forbidden


STILL_FORBIDDEN = {
    # Inductor's autotuners compile and launch kernels themselves; the compiler stays refused
    "autotuner-through-the-namespace": ("from torch._inductor.runtime import triton_heuristics\nimport triton\n"
                                        "p = triton_heuristics.pointwise\n", "torch._inductor"),
    "namespace-handed-out": ("from torch._inductor.runtime import triton_heuristics as th\nimport triton\n"
                             "h = th\n", "other than through its allowed helpers (grid)"),
    "namespace-getattr": ("from torch._inductor.runtime import triton_heuristics\nimport triton\n"
                          "h = getattr(triton_heuristics, 'CachingAutotuner')\n", "allowed helpers"),
    "dotted-namespace-bare": ("import torch._inductor.runtime.triton_heuristics\nimport torch\nimport triton\n"
                              "h = torch._inductor.runtime.triton_heuristics\n", "torch._inductor"),
    "dynamo-optimizer": ("import torch._dynamo.testing as t\nimport triton\nc = t.CompileCounter()\n",
                         "torch._dynamo"),
    "dynamo-import-beside-rand_strided": ("from torch._dynamo.testing import rand_strided, optimize_assert\n"
                                          "import triton\n", "optimize_assert"),
    "dynamo-itself": ("import torch\nimport triton\nf = torch._dynamo.optimize('inductor')\n", "torch._dynamo"),
    "torch-compile": ("import torch\nimport triton\nf = torch.compile(print)\n", "torch.compile"),
    "compile_fx": ("from torch._inductor.compile_fx import compile_fx\nimport triton\n", "torch._inductor"),
    # a module's other attributes stay static findings, stand-in or not only where no binding exists
    "module-attribute": ("import triton\ntriton.cdiv = lambda a, b: 1\n", "monkeypatching"),
    "torch-allclose": ("import torch\nimport triton\ntorch.allclose = lambda *a, **k: True\n", "monkeypatching"),
    "alias-is-not-a-stand-in": ("import torch\nimport triton\ntorch = torch\ntorch.allclose = lambda *a: True\n",
                                "monkeypatching"),
}


@pytest.mark.parametrize("name", sorted(STILL_FORBIDDEN))
def test_the_compiler_and_real_monkeypatching_stay_forbidden(name):
    source, named = STILL_FORBIDDEN[name]
    report = inspect_source(source + MODEL_NEW)
    assert any(named in item for item in report.forbidden), report.forbidden


def test_only_triton_decorators_are_left_to_the_run_time():
    assert frozenset({"triton.jit", "triton.autotune", "triton.heuristics"}) == WATCHED_AT_RUN_TIME


def test_the_run_time_watches_every_attribute_the_gate_leaves_to_it():
    """The identity checks must capture what the gate no longer refuses (in a fresh worker-like import)."""
    import subprocess
    import sys

    script = ("from tritongym.evaluator.worker.candidate import _watchlist\n"
              "from tritongym.evaluator.static import WATCHED_AT_RUN_TIME\n"
              "w = _watchlist()\nmissing = sorted(n for n in WATCHED_AT_RUN_TIME if n not in w)\n"
              "import triton\nassert w['triton.jit'] is triton.jit\nprint(missing)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
