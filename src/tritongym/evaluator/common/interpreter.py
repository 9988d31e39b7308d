"""What the CPU interpreter lacks and what the interpreter fixes emulate, by name.

The candidate and clean-room workers install the fixes (`worker.interpreter_fixes`, whose
numpy tables must cover exactly these names: tests/unit/evaluator/test_interpreter_gaps.py);
the parent reads the names to believe a worker's "the interpreter cannot run this" only when the
candidate's own text uses such a construct (`interpreter_gaps`).
"""

from __future__ import annotations

#: Triton constructs the CPU interpreter cannot run (it raises "not supported in interpreter mode").
INTERPRETER_GAPS = frozenset({"inline_asm_elementwise", "extern_elementwise"})

#: libdevice functions of one argument the fixes emulate with numpy.
EMULATED_UNARY = frozenset({
    "tanh", "rsqrt", "sqrt", "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sin", "cos", "tan",
    "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "trunc", "rint",
    "round", "nearbyint", "fabs", "abs", "erf", "erfc", "fast_expf", "fast_logf", "fast_tanhf", "fast_sinf",
    "fast_cosf", "rcp", "exp10", "cbrt", "sigmoid",
})
#: libdevice functions of two arguments the fixes emulate with numpy.
EMULATED_BINARY = frozenset({
    "pow", "powf", "fmax", "fmin", "atan2", "fmod", "hypot", "copysign", "div_rn", "fdiv_rn", "remainder",
})


def block_pointers_removed() -> bool:
    """Whether the installed Triton has removed block pointers (3.9 keeps a stub that raises)."""
    from triton.language import core

    function = getattr(core, "make_block_ptr", None)
    return function is None or getattr(function, "_tritongym_removed", False) or \
        "removed" in (getattr(function, "__doc__", "") or "")


def removed_constructs() -> frozenset[str]:
    """The ``tl`` functions the installed Triton has removed (a kernel calling one is ``unsupported``)."""
    return frozenset({"make_block_ptr", "advance"}) if block_pointers_removed() else frozenset()
