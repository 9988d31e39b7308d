"""Make Triton's CPU interpreter run honest code as a GPU would (the CPU tier only).

Three constructs of public kernel libraries fail under ``TRITON_INTERPRET=1`` although they
compile and run on a GPU (found by the public-code acceptance corpus, `tests/acceptance/`):

* **Float scalar arguments are plain Python floats in the kernel.** On a GPU a ``float``
  argument is specialised as an fp32 scalar, so ``eps.to(tl.float32)`` or
  ``gate_multiplier.to(tl.float32)`` is valid (Liger's RMSNorm, KL divergence, SwiGLU); the
  interpreter passes the Python float through and the method call raises. Here a float argument
  becomes an fp32 scalar tensor, as on the GPU.
* **libdevice functions are stubs.** ``triton.language.extra.libdevice.tanh`` (and ``rsqrt``,
  ``erf``, ...) are resolved by the GPU compiler to the backend's library; the interpreter calls
  the stub, which returns None. Here the common ones compute with numpy on the interpreter's
  arrays, elementwise, in the argument's dtype.
* **tl builtins bound to other names** (``rsqrt = tl.math.rsqrt``, ``maximum = tl.maximum`` at
  module level): the interpreter swaps ``tl``'s own attributes for its implementations during a
  launch, so an alias still holds the compiler's builtin, which refuses to run outside the
  compiler. Here such aliases in a kernel's namespace are swapped too, for the launch only.

Installed by the candidate worker before the candidate is imported, on the CPU tier only (a GPU
compiles kernels for real). What is still not emulated is listed in docs/integrity.md
("What the CPU interpreter cannot run").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: libdevice names emulated elementwise with numpy (one argument).
UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh, "rsqrt": lambda x: 1 / np.sqrt(x), "sqrt": np.sqrt, "exp": np.exp, "exp2": np.exp2,
    "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p, "expm1": np.expm1, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "floor": np.floor,
    "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "round": np.round, "nearbyint": np.rint,
    "fabs": np.abs, "abs": np.abs, "erf": None, "erfc": None, "fast_expf": np.exp, "fast_logf": np.log,
    "fast_tanhf": np.tanh, "fast_sinf": np.sin, "fast_cosf": np.cos, "rcp": lambda x: 1 / x, "exp10": lambda x: 10 ** x,
    "cbrt": np.cbrt, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}
#: libdevice names emulated elementwise with numpy (two arguments).
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "pow": np.power, "powf": np.power, "fmax": np.fmax, "fmin": np.fmin, "atan2": np.arctan2, "fmod": np.fmod,
    "hypot": np.hypot, "copysign": np.copysign, "div_rn": np.divide, "fdiv_rn": np.divide, "remainder": np.remainder,
}
LIBDEVICE_MODULES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice",
                     "triton.language.extra.hip.libdevice")


def _erf(values: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf, otypes=[values.dtype])(values)


def _erfc(values: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erfc, otypes=[values.dtype])(values)


def _elementwise(name: str, op: Callable[..., np.ndarray], arity: int) -> Callable[..., Any]:
    from triton import language as tl
    from triton.runtime.interpreter import TensorHandle

    def as_tensor(value: Any, like: Any) -> Any:
        if isinstance(value, tl.tensor):
            return value
        dtype = like.dtype if like is not None else tl.float32
        array = np.array([value], dtype=np.float64 if dtype == tl.float64 else np.float32)
        return tl.tensor(TensorHandle(array, dtype.scalar), dtype.scalar)

    def function(*args: Any, _semantic: Any = None, **kwargs: Any) -> Any:
        first = next((a for a in args if isinstance(a, tl.tensor)), None)
        tensors = [as_tensor(a, first) for a in args[:arity]]
        base = tensors[0]
        with np.errstate(all="ignore"):
            data = op(*[t.handle.data for t in tensors])
        data = np.asarray(data).astype(base.handle.data.dtype, copy=False)
        shapes = [t for t in tensors if t.type.is_block()]
        result_type = shapes[0].type if shapes else base.type
        if shapes and data.shape != tuple(shapes[0].shape):
            data = np.broadcast_to(data, tuple(shapes[0].shape)).copy()
        return tl.tensor(TensorHandle(data, base.handle.dtype.scalar), result_type)

    function.__name__ = function.__qualname__ = name
    function.__module__ = "triton.language.extra.libdevice"  # what it is: that library's function
    return function


def _float_arguments() -> None:
    """Float kernel arguments become fp32 scalar tensors, as the GPU specialises them."""
    from triton import language as tl
    from triton.runtime import interpreter

    original = interpreter._implicit_cvt
    if getattr(original, "_tritongym_float_scalars", False):
        return

    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return original(arg)

    implicit_cvt._tritongym_float_scalars = True  # type: ignore[attr-defined]
    interpreter._implicit_cvt = implicit_cvt


def _libdevice() -> None:
    import importlib

    table: dict[str, Callable[..., Any]] = {}
    for name, op in UNARY.items():
        op = op or {"erf": _erf, "erfc": _erfc}[name]
        table[name] = _elementwise(name, op, 1)
    for name, op in BINARY.items():
        table[name] = _elementwise(name, op, 2)
    for module_name in LIBDEVICE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, function in table.items():
            setattr(module, name, function)


class _Namespace:
    """A module namespace (dict) seen as an object, so the interpreter's patch scope can restore it."""

    def __init__(self, namespace: dict[str, Any]) -> None:
        object.__setattr__(self, "_namespace", namespace)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._namespace[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._namespace[name] = value

    def __delattr__(self, name: str) -> None:
        self._namespace.pop(name, None)


def _builtin_aliases() -> None:
    """During a launch, globals bound to ``tl`` builtins point at the interpreter's versions too."""
    from triton import language as tl
    from triton.runtime import interpreter

    original = interpreter._patch_lang
    if getattr(original, "_tritongym_aliases", False):
        return
    semantic = interpreter.interpreter_semantic

    def patch_lang(fn: Any) -> Any:
        scope = original(fn)
        namespace = fn.__globals__
        view = _Namespace(namespace)
        for name, value in list(namespace.items()):
            if callable(value) and tl.core.is_builtin(value):
                def call(*args: Any, _member: Any = value, **kwargs: Any) -> Any:
                    kwargs.pop("_semantic", None)
                    return _member(*args, **kwargs, _semantic=semantic)

                scope.set_attr(view, name, call)
        return scope

    patch_lang._tritongym_aliases = True  # type: ignore[attr-defined]
    interpreter._patch_lang = patch_lang


def install() -> None:
    """Apply the fixes (call once, before the candidate is imported, with TRITON_INTERPRET=1)."""
    _float_arguments()
    _libdevice()
    _builtin_aliases()
