"""Tests for tritongym.evaluator.worker.kernels: kernels found as objects, bodies and arguments checked.

Each case loads a small solution module from a real file (Triton reads kernel source through
`inspect`) in this process; nothing is launched, only the objects are inspected.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tritongym.evaluator.worker.kernels import BodyChecker, describe_foreign_argument, discover


def load(tmp_path: Path, body: str, name: str = "solution"):
    source = textwrap.dedent(body).lstrip("\n")
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"tg_test_{name}_{abs(hash(str(tmp_path)))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module, source, str(path)


HEADER = """
import math
import triton
import triton.language as tl
from triton.language.extra import libdevice
"""


def findings_for(tmp_path, body: str) -> list[str]:
    module, source, path = load(tmp_path, HEADER + textwrap.dedent(body))
    checker = BodyChecker(source, path)
    found = discover(module, path)
    return [f for info in found for f in checker.check(info.function)]


def test_kernels_are_found_however_they_are_made(tmp_path):
    module, _, path = load(tmp_path, HEADER + textwrap.dedent("""
        @triton.jit
        def decorated(x):
            pass

        def _body(x):
            pass

        call_form = triton.jit(_body)

        def get_configs():
            return [triton.Config({"B": 16}), triton.Config({"B": 32})]

        @triton.autotune(configs=get_configs(), key=["n"])
        @triton.jit
        def tuned(x, n, B: tl.constexpr):
            pass

        @triton.heuristics({"B": lambda args: 16})
        @triton.jit
        def heuristic(x, B: tl.constexpr):
            pass

        def _body2(x, B: tl.constexpr):
            pass

        heuristic_call = triton.heuristics({"B": lambda args: 8})(triton.jit(_body2))
        TABLE = {"relu": decorated}

        class ModelNew:
            kernel = staticmethod(decorated)
    """))
    names = sorted(info.name for info in discover(module, path))
    assert names == ["_body", "_body2", "decorated", "heuristic", "tuned"]


def test_kernels_from_other_files_are_not_the_candidates(tmp_path):
    other, _, _ = load(tmp_path, HEADER + "@triton.jit\ndef elsewhere(x):\n    pass\n", name="library")
    module, _, path = load(tmp_path, HEADER, name="solution2")
    module.elsewhere = other.elsewhere
    assert discover(module, path) == []


@pytest.mark.parametrize("body", [
    # aliases of Triton and libdevice functions resolve to what they are
    """
    rsqrt = tl.math.rsqrt
    triton_tanh = libdevice.tanh

    @triton.jit
    def kernel(x_ptr, B: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, B))
        tl.store(x_ptr + tl.arange(0, B), rsqrt(x) + triton_tanh(x))
    """,
    # a @triton.jit helper, and a method on a helper's result
    """
    @triton.jit
    def silu(x):
        return x * tl.sigmoid(x)

    @triton.jit
    def kernel(x_ptr, B: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, B))
        tl.store(x_ptr + tl.arange(0, B), silu(x).to(tl.float32))
    """,
    # constants, math, builtins Triton maps, min(...).to(...)
    """
    EPS = 1e-6
    NAMES = ("a", "b")

    @triton.jit
    def kernel(x_ptr, n, B: tl.constexpr):
        for i in range(0, 2):
            y = min(n, 4).to(tl.int64) + math.pi * EPS
        tl.static_assert(B > 0)
    """,
], ids=["aliases", "jit-helper-and-method", "constants-builtins"])
def test_honest_kernel_bodies_have_no_findings(tmp_path, body):
    assert findings_for(tmp_path, body) == []


@pytest.mark.parametrize(("body", "named"), [
    ("""
    def helper(v):
        return v

    @triton.jit
    def kernel(x_ptr):
        helper(tl.load(x_ptr))
    """, "helper"),
    ("""
    import numpy as np

    @triton.jit
    def kernel(x_ptr):
        np.exp(tl.load(x_ptr))
    """, "np.exp"),
    ("""
    import torch

    @triton.jit
    def kernel(x_ptr):
        torch.relu(x_ptr)
    """, "torch.relu"),
    ("""
    def combine(a, b):
        return a + b

    @triton.jit
    def kernel(x_ptr, B: tl.constexpr):
        tl.store(x_ptr, tl.reduce(tl.load(x_ptr + tl.arange(0, B)), 0, combine))
    """, "combine"),
    ("""
    def helper(v):
        return v

    @triton.jit
    def inner(x):
        return helper(x)

    @triton.jit
    def kernel(x_ptr):
        inner(tl.load(x_ptr))
    """, "helper"),
], ids=["python-helper", "numpy", "torch", "python-combine-fn", "through-a-jit-helper"])
def test_plain_python_in_a_kernel_body_is_a_finding(tmp_path, body, named):
    findings = findings_for(tmp_path, body)
    assert findings and any(f"refers to {named} " in f for f in findings), findings


def test_a_kernel_not_in_the_checked_source_is_a_finding(tmp_path):
    module, source, path = load(tmp_path, HEADER + "@triton.jit\ndef kernel(x):\n    pass\n")
    checker = BodyChecker(source.replace("def kernel", "def renamed"), path)
    (info,) = discover(module, path)
    assert "not in the solution's source" in checker.check(info.function)[0]


@pytest.mark.parametrize("value", [
    torch.zeros(2), 3, 2.5, True, None, "relu", torch.float32, (torch.zeros(1), 4), [1, 2],
], ids=["tensor", "int", "float", "bool", "none", "str", "dtype", "tuple", "list"])
def test_kernel_arguments_that_are_allowed(value):
    assert describe_foreign_argument(value) is None


def test_triton_values_are_allowed_arguments():
    import triton.language as tl

    assert describe_foreign_argument(tl.float16) is None
    assert describe_foreign_argument(tl.constexpr(4)) is None


@pytest.mark.parametrize("value", [lambda a, b: a + b, object(), (1, print), {"a": 1}],
                         ids=["lambda", "object", "tuple-with-callable", "dict"])
def test_python_objects_are_refused_as_kernel_arguments(value):
    assert describe_foreign_argument(value) is not None
