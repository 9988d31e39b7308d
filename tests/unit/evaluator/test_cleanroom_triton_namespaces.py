"""Issue 44, family 3: Triton's own namespaces in the clean room's kernel rebuild (`cleanroom.kernels`).

What a kernel may reach through Triton is Triton's language package, submodules included
(``tl.extra.cuda.gdc_wait`` is ``triton.language.extra.cuda.gdc``'s), and Triton's own private
kernel helpers (``triton.language.standard._log2``, which ``tl.sort`` calls, a constexpr
function). Each relaxation beside the refusal it must keep: a private name that is host code or
Python's, a dunder, a private member of a value, a name planted in a Triton module by the
candidate's process (which does not exist in the clean room's Triton), and ``tl.str_to_ty``,
public but host code that hands a string to Python's ``eval``.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
import triton.language as tl

from tritongym.evaluator.cleanroom.kernels import (
    KernelBuilder,
    KernelRefused,
    allowed_module,
    check_kernel_body,
    refused_object,
    refused_private,
    value_attributes,
)

TL = {"tl": {"module": "triton.language"}, "standard": {"module": "triton.language.standard"}}


def _problems(body: str, bindings: dict | None = None) -> list[str]:
    function = ast.parse(textwrap.dedent(f"def kernel(x, n: tl.constexpr):\n    v = {body}\n")).body[0]
    return check_kernel_body(function, {**TL, **(bindings or {})}, value_attributes())


@pytest.mark.parametrize("body", [
    "tl.extra.cuda.gdc_wait()",  # a programmatic-dependent-launch wait (defined in extra.cuda.gdc)
    "tl.extra.cuda.gdc_launch_dependents()",
    "tl.standard._log2(n)",  # Triton's own constexpr helper, which tl.sort calls
    "standard._log2(n)",
    "tl.standard._bitonic_merge",  # a jitted helper of Triton's
    "tl.sort(x)",
])
def test_triton_s_own_kernel_code_passes_through_its_modules(body):
    assert _problems(body) == []


@pytest.mark.parametrize(("body", "why"), [
    # Private names that are not Triton's kernel helpers stay refused.
    ("tl.core._unwrap_if_constexpr(x)",
     "_unwrap_if_constexpr (private names are not Triton, except Triton's own kernel helpers)"),
    ("tl.core._tuple_create", "_tuple_create, which is triton._utils's, not Triton's"),
    ("tl.core.__dict__", "attribute __dict__ (private attributes are not Triton)"),
    ("x._flatten_ir", "attribute _flatten_ir (private attributes are not Triton)"),  # a value's private member
    # A chain through a module an allowed one imports still reaches Python, not Triton.
    ("tl.core.builtins.getattr(x, 'handle')", "getattr, which is builtins's, not Triton's"),
    # Public, but host code: parses a type string and evals part of it with Python's builtins.
    ("tl.str_to_ty('fp32', None)", "str_to_ty, which is host code of triton.language, not kernel code"),
])
def test_what_is_not_triton_kernel_code_stays_refused(body, why):
    assert any(problem.endswith(f"({why})") or problem.endswith(why) for problem in _problems(body)), (
        _problems(body))


def test_str_to_ty_really_evaluates_python():
    # Why it is refused although public and Triton's: a string reaching it runs as Python.
    seen = []
    import builtins

    builtins._tritongym_seen = seen
    try:
        tl.str_to_ty("tensordesc<fp32[16],_tritongym_seen.append(1) or 0>", None)
    except Exception:  # noqa: BLE001 - it fails after the eval ran; the eval is the point
        pass
    finally:
        del builtins._tritongym_seen
    assert seen == [1]


def test_modules_of_triton_s_language_package_are_kernel_modules():
    from triton.language.extra.cuda import gdc

    assert allowed_module("triton.language.extra.cuda.gdc") is gdc
    assert refused_object(gdc, "gdc") is None
    with pytest.raises(KernelRefused, match="cannot be imported here"):
        allowed_module("triton.language.no_such_module")
    for outside in ("triton.runtime.jit", "triton.languages", "triton.compiler"):
        with pytest.raises(KernelRefused, match="is not available to kernels"):
            allowed_module(outside)


def test_an_attr_binding_may_name_triton_s_private_kernel_helpers_only(tmp_path):
    from triton.language.extra.cuda import gdc_wait
    from triton.language.standard import _log2

    builder = KernelBuilder("", str(tmp_path))
    assert builder.resolve({"attr": ["triton.language.standard", "_log2"]}, {}) is _log2
    assert builder.resolve({"attr": ["triton.language.extra.cuda.gdc", "gdc_wait"]}, {}) is gdc_wait
    with pytest.raises(KernelRefused, match=r"core._unwrap_if_constexpr is not available to kernels"):
        builder.resolve({"attr": ["triton.language.core", "_unwrap_if_constexpr"]}, {})
    with pytest.raises(KernelRefused, match=r"^triton.language.str_to_ty is not available to kernels"):
        builder.resolve({"attr": ["triton.language", "str_to_ty"]}, {})
    # A helper the candidate's process planted in a Triton module under a private name: the log can
    # name it, but the clean room's Triton has no such attribute.
    with pytest.raises(KernelRefused, match=r"^triton.language.standard has no _leaky$"):
        builder.resolve({"attr": ["triton.language.standard", "_leaky"]}, {})


def test_a_private_python_function_claiming_a_triton_module_is_not_a_kernel_helper():
    def _log2(n):
        return n

    _log2.__module__ = "triton.language.standard"  # what a candidate could claim in its own process
    # It passes the owner test (the clean room never holds such an object: names resolve to real
    # Triton objects there), but it is no kernel code, so a private name never reaches it.
    assert refused_object(_log2, "_log2") is None
    assert refused_private(_log2, "_log2") == (
        "_log2 (private names are not Triton, except Triton's own kernel helpers)")
