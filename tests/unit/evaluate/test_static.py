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
