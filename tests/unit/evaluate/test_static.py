"""Tests for tritongym.evaluator.static: the AST pre-checks run before any process starts."""

from __future__ import annotations

import textwrap

import pytest

from tritongym.evaluator.static import StaticReport, inspect_source


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


MODEL_NEW = "\nclass ModelNew:\n    pass\n"


def test_honest_solution_file_is_clean(fixtures_dir):
    report = inspect_source((fixtures_dir / "candidates" / "relu_honest.py").read_text())
    assert report == StaticReport(
        syntax_error=None, defines_model_new=True, triton_kernels=("relu_kernel",), findings=()
    )


def test_syntax_error_reports_message_and_line():
    report = inspect_source(
        src("""
        import triton

        class ModelNew:
            def forward(self, x)
                return x
    """)
    )
    assert report.syntax_error == "SyntaxError: expected ':' (line 4)"
    assert not report.defines_model_new and report.triton_kernels == ()


def test_indentation_error_is_a_syntax_error():
    report = inspect_source("class ModelNew:\npass\n")
    assert report.syntax_error is not None and report.syntax_error.startswith("SyntaxError: ")
    assert "(line 2)" in report.syntax_error


@pytest.mark.parametrize(
    ("source", "defined"),
    [
        ("class ModelNew:\n    pass\n", True),
        ("class ModelNew(torch.nn.Module):\n    pass\n", True),
        ("ModelNew = Something\n", True),
        ("from elsewhere import ModelNew\n", True),
        ("class Model:\n    pass\n", False),
        ("class ModelNewer:\n    pass\n", False),
        ("def make():\n    class ModelNew:\n        pass\n", False),
        ("modelnew = 1\n", False),
    ],
    ids=["class", "subclass", "assignment", "import", "only-model", "longer-name", "nested", "lowercase"],
)
def test_model_new_must_be_defined_at_module_level(source, defined):
    assert inspect_source(source).defines_model_new is defined


@pytest.mark.parametrize(
    "source",
    [
        "import triton\n@triton.jit\ndef kernel(x):\n    pass\n",
        "import triton\n@triton.jit(debug=True)\ndef kernel(x):\n    pass\n",
        "import triton\n@triton.jit()\ndef kernel(x):\n    pass\n",
        "from triton import jit\n@jit\ndef kernel(x):\n    pass\n",
        "import triton.language as tl\n@tl.jit\ndef kernel(x):\n    pass\n",
        "import triton\n@triton.autotune(configs=[], key=['n'])\n@triton.jit\ndef kernel(x):\n    pass\n",
        "import triton\n@triton.heuristics({'B': lambda a: 4})\n@triton.jit\ndef kernel(x):\n    pass\n",
        "import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit(do_not_specialize=[0])\n"
        "def kernel(x):\n    pass\n",
    ],
    ids=[
        "triton.jit",
        "triton.jit(...)",
        "triton.jit()",
        "from-import-jit",
        "tl.jit",
        "autotune+jit",
        "heuristics+jit",
        "autotune+jit(...)",
    ],
)
def test_triton_jit_spellings_are_recognised(source):
    report = inspect_source(source + MODEL_NEW)
    assert report.triton_kernels == ("kernel",)
    assert report.syntax_error is None and report.defines_model_new


@pytest.mark.parametrize(
    "source",
    [
        "import triton\ndef kernel(x):\n    pass\n",
        "import triton\n@triton.autotune(configs=[], key=[])\ndef kernel(x):\n    pass\n",
        "import torch\n@torch.jit.script\ndef kernel(x):\n    return x\n",
        "import functools\n@functools.lru_cache\ndef kernel(x):\n    pass\n",
        "import triton\nkernel_source = '@triton.jit'\n",
    ],
    ids=["undecorated", "autotune-only", "torch.jit.script", "other-decorator", "in-a-string"],
)
def test_functions_without_triton_jit_are_not_kernels(source):
    assert inspect_source(source + MODEL_NEW).triton_kernels == ()


def test_every_kernel_is_listed_including_nested_ones():
    report = inspect_source(
        src("""
        import triton

        @triton.jit
        def first(x):
            pass

        class ModelNew:
            @staticmethod
            @triton.jit
            def inner(x):
                pass

        @triton.jit
        def last(x):
            pass
    """)
    )
    assert sorted(report.triton_kernels) == ["first", "inner", "last"]


def test_try_except_is_reported_as_a_finding_not_a_failure():
    report = inspect_source(
        src("""
        import triton

        @triton.jit
        def kernel(x):
            pass

        class ModelNew:
            def forward(self, x):
                try:
                    return kernel(x)
                except Exception:
                    return x
    """)
    )
    assert report.syntax_error is None and report.defines_model_new and report.triton_kernels == ("kernel",)
    assert len(report.findings) == 1
    assert "try/except" in report.findings[0]
    assert "caught at run time" in report.findings[0]


def test_no_try_no_findings():
    assert inspect_source("import triton\n" + MODEL_NEW).findings == ()


def test_inspect_source_never_executes_the_code():
    source = "import os\nos._exit(3)\nraise SystemExit(1)\nclass ModelNew:\n    pass\n"
    assert inspect_source(source).defines_model_new  # we are still here


# -- what the gate no longer judges by spelling (issue: honest public kernels) -------------------


@pytest.mark.parametrize("source", [
    # FlagGems/Liger version and device helpers
    "import importlib\nimport operator\nimport functools\nimport types\n"
    "v = importlib.import_module('triton').__version__\nop = operator.ge\n",
    "import triton\nname = 'cdiv'\nfn = getattr(triton, name)\nok = hasattr(triton, 'language')\n",
    # decorator arguments are host code
    "import triton\ndef get_autotune_config():\n    return []\n"
    "@triton.autotune(configs=get_autotune_config(), key=['n'])\n@triton.jit\ndef k(x, n):\n    pass\n",
    # calls and methods inside kernel bodies are judged at run time
    "import triton\nimport triton.language as tl\nrsqrt = tl.math.rsqrt\n"
    "@triton.jit\ndef k(x):\n    y = min(x, 4).to(tl.int64)\n    return rsqrt(y)\n",
    # call-form kernels
    "import triton\ndef body(x):\n    pass\nkernel = triton.jit(body)\nk2 = triton.heuristics({'B': 1})(kernel)\n",
    # reading the environment (Liger/FlagGems read TRITON_* settings), dunder names honest code uses
    "import os\nimport triton\nINTERPRET = os.environ.get('TRITON_INTERPRET') == '1'\nos.environ['X'] = '1'\n"
    "class A:\n    def __repr__(self):\n        return type(self).__name__ + str(self.__dict__)\n",
    "import torch\nimport triton\n@torch.compiler.disable\ndef wrapper(x):\n    return x\n",
    # issue 21: inspect.signature as a version check (frame walks are refused at run time)
    "import inspect\nimport triton\nimport triton.language as tl\n"
    "IEEE = 'input_precision' in inspect.signature(tl.dot).parameters\n",
    # issue 21: Inductor-style and KernelBook-style imports of Inductor's runtime helpers
    "from torch._inductor.runtime import triton_helpers\n"
    "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\n"
    "from torch._inductor.runtime.triton_heuristics import grid\n"
    "from torch._inductor.runtime.hints import ReductionHint\n"
    "from torch._inductor.select_algorithm import extern_kernels\n"
    "import triton\nm = triton_helpers.max2\nw = triton_helpers.welford_reduce\ng = grid(16)\n",
    "import torch._inductor.runtime.triton_helpers\nimport torch\nimport triton\n"
    "m = torch._inductor.runtime.triton_helpers.maximum\n",
], ids=["version-helpers", "computed-getattr", "autotune-config-call", "kernel-calls", "call-form-jit",
        "environment-and-dunders", "compiler-disable", "inspect-signature", "inductor-runtime-helpers",
        "inductor-helpers-dotted"])
def test_honest_idioms_are_not_forbidden(source):
    report = inspect_source(source + MODEL_NEW)
    assert report.forbidden == (), report.forbidden


@pytest.mark.parametrize(("source", "named"), [
    ("import gc\n", "imports gc"),
    ("import ctypes\n", "imports ctypes"),
    ("import inspect\nf = inspect.currentframe().f_back\n", "accesses .f_back"),
    # Inductor's compiler and code generator (not its runtime helpers) borrow torch's kernels
    ("from torch._inductor import compile_fx\n", "imports torch._inductor"),
    ("from torch._inductor.runtime import triton_helpers, compile_tasks\n", "compile_tasks"),
    ("from torch._inductor.runtime.triton_heuristics import grid, CachingAutotuner\n", "CachingAutotuner"),
    ("from torch._inductor.select_algorithm import autotune_select_algorithm\n", "select_algorithm"),
    ("import torch\nc = torch._inductor.compile_fx.compile_fx\n", "uses torch._inductor"),
    ("import torch._inductor\n", "imports torch._inductor"),
    ("import subprocess\n", "imports subprocess"),
    ("import threading\n", "imports threading"),
    ("import sys\nf = sys._getframe(1)\n", "accesses ._getframe"),
    ("def f():\n    pass\ng = f.__globals__\n", "accesses .__globals__"),
    ("def f():\n    pass\nc = f.__closure__\n", "accesses .__closure__"),
    ("x = getattr(len, '__closure__')\n", "names the attribute __closure__"),
    ("t = '{0.__globals__}'.format(print)\n", "format string"),
    ("exec('1')\n", "calls exec()"),
    ("import torch\ntorch.allclose = lambda *a, **k: True\n", "monkeypatching"),
    ("import time\nsetattr(time, 'perf_counter', lambda: 0)\n", "monkeypatching"),
    ("import os\nos.write(3, b'x')\n", "os.write"),
    ("import os\nos.read(3, 10)\n", "os.read"),
    ("import sys\nsys.modules['torch'] = None\n", "sys.modules"),
    ("import torch\nf = torch.compile(print)\n", "torch.compile"),
    ("import torch\ns = torch.cuda.Stream()\n", "side streams"),
    ("from torch.utils._python_dispatch import _disable_current_modes\n", "_python_dispatch"),
    ("import torch\nd = torch._C.DisableTorchFunction\n", "DisableTorchFunction"),
    ("import numpy\nclass A:\n    __array_interface__ = {}\n", "__array_interface__"),
], ids=lambda v: v if len(v) < 30 else None)
def test_constructs_with_no_honest_use_are_still_forbidden(source, named):
    report = inspect_source("import triton\n" + source + MODEL_NEW)
    assert any(named in item for item in report.forbidden), report.forbidden


def test_a_solution_that_never_imports_triton_defines_no_kernel():
    assert not inspect_source("import torch\n" + MODEL_NEW).uses_triton
    assert inspect_source("from triton import language as tl\n" + MODEL_NEW).uses_triton
