"""The candidate's Triton kernels, found at run time, and what their bodies may refer to.

A kernel is recognised by what it *is* after the candidate module has been imported, not by how
its definition is spelled: ``@triton.jit``, ``fn = triton.jit(fn)``, ``triton.heuristics(...)(fn)``,
``@triton.autotune(configs=get_configs())`` and aliases all end in a Triton `KernelInterface`
whose innermost ``fn`` is a Python function defined in the solution file. Decorator arguments are
host code and are never part of a kernel body.

A kernel body may refer only to Triton: ``tl.*``/``triton.*`` functions and values (aliases
included: ``rsqrt = tl.math.rsqrt``, ``tanh = libdevice.tanh`` resolve to what they are), other
``@triton.jit`` functions, constants, ``math`` and a few builtins. Methods called on values
(``x.to(...)``, ``silu(a).cast(...)``) are Triton's. Anything else (a plain Python function, a
class, numpy, torch) is a ``python_in_kernel`` finding: a GPU would refuse to compile it, and the
CPU interpreter would run it as plain Python (reward-hacking A1, the "helper inside an
interpreted kernel" residual of the first wave). The same holds for a kernel's *arguments*: a
Python callable or object passed to a kernel (a ``tl.reduce`` combine function, an object whose
method the body calls) is refused at launch.

Runs in the candidate worker (harness code): everything here reads objects, never calls them.
"""

from __future__ import annotations

import ast
import builtins
import numbers
import os
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

#: Built-in functions a Triton kernel body may use (Triton's frontend maps them).
KERNEL_BUILTINS = frozenset({
    "range", "min", "max", "len", "int", "float", "bool", "abs", "print", "isinstance", "enumerate", "zip",
    "tuple", "list", "getattr", "hasattr", "static_print", "static_assert", "round", "divmod", "pow", "all", "any",
    "ValueError", "AssertionError", "RuntimeError", "NotImplementedError", "TypeError", "slice", "type", "str",
})
#: Module prefixes whose functions and values are Triton's (or plain maths).
TRITON_MODULES = ("triton", "math")
_MISSING = object()


@dataclass(frozen=True)
class KernelInfo:
    """One kernel the candidate defines: its name, the Python function, the wrapper chain."""

    name: str
    function: FunctionType
    wrappers: tuple[str, ...]


def _kernel_types() -> tuple[type, ...]:
    from triton.runtime.jit import KernelInterface

    types: list[type] = [KernelInterface]
    try:
        from triton.runtime.jit import JITCallable

        types.append(JITCallable)
    except ImportError:  # pragma: no cover - Triton < 3.4
        pass
    return tuple(types)


def unwrap(obj: Any) -> tuple[FunctionType | None, tuple[str, ...]]:
    """The Python function inside a Triton kernel object, and the wrapper types around it."""
    kinds = _kernel_types()
    chain: list[str] = []
    seen = 0
    while isinstance(obj, kinds) and seen < 16:
        chain.append(type(obj).__name__)
        obj = getattr(obj, "fn", None)
        seen += 1
    return (obj if isinstance(obj, FunctionType) else None), tuple(chain)


def is_kernel(obj: Any) -> bool:
    return isinstance(obj, _kernel_types())


def _is_triton_builtin(obj: Any) -> bool:
    """A Triton builtin made with Triton's own decorators, wherever it is defined (FlagGems' and
    others' language extensions are built this way)."""
    try:
        from triton.language import core

        return bool(core.is_builtin(obj))
    except Exception:  # noqa: BLE001 - an object whose attributes raise is not a builtin
        return False


def discover(module: ModuleType, candidate_file: str, extra: tuple[Any, ...] = ()) -> list[KernelInfo]:
    """Kernels defined in `candidate_file` reachable from the module's globals (and `extra` objects).

    Looks at module globals, the attributes of classes defined in the module (kernels kept as
    class attributes), and one level into module-level tuples, lists and dicts (kernel tables).
    Kernels made later, inside ``forward``, are seen by the launch hook instead.
    """
    real = os.path.realpath(candidate_file)
    values: list[Any] = list(vars(module).values()) + list(extra)
    for value in list(values):
        if isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
            values.extend(vars(value).values())
        elif isinstance(value, (tuple, list)):
            values.extend(value[:256])
        elif isinstance(value, dict):
            values.extend(list(value.values())[:256])
    found: dict[int, KernelInfo] = {}
    for value in values:
        if not is_kernel(value):
            continue
        function, chain = unwrap(value)
        if function is None or os.path.realpath(function.__code__.co_filename) != real:
            continue
        found.setdefault(id(function), KernelInfo(name=function.__name__, function=function, wrappers=chain))
    return list(found.values())


class BodyChecker:
    """Checks kernel bodies against the solution's source as it was verified before the import."""

    def __init__(self, source: str, candidate_file: str) -> None:
        self.file = os.path.realpath(candidate_file)
        try:
            tree = ast.parse(source)
        except SyntaxError:  # pragma: no cover - the static gate rejected it already
            tree = ast.Module(body=[], type_ignores=[])
        self.functions: dict[tuple[str, int], ast.FunctionDef] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                for line in [node.lineno, *(d.lineno for d in node.decorator_list)]:
                    self.functions[(node.name, line)] = node
        self.checked: dict[int, list[str]] = {}

    def check(self, kernel: Any) -> list[str]:
        """Findings for a kernel object (a `KernelInterface` or its Python function); cached."""
        function = kernel if isinstance(kernel, FunctionType) else unwrap(kernel)[0]
        if function is None:
            return []
        key = id(function)
        if key in self.checked:
            return self.checked[key]
        self.checked[key] = []  # recursion guard for helpers that call each other
        self.checked[key] = self._check_function(function)
        return self.checked[key]

    def _check_function(self, function: FunctionType) -> list[str]:
        code = function.__code__
        if os.path.realpath(code.co_filename) != self.file:
            return []  # a kernel defined elsewhere: the launch check says it is not the candidate's
        node = self.functions.get((code.co_name, code.co_firstlineno))
        name = code.co_name
        if node is None:
            return [f"kernel {name} (line {code.co_firstlineno}) is not in the solution's source as it was "
                    "checked: kernels must be written in the solution file"]
        local = {a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
        local |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}
        local |= {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.Lambda)) and n is not node
                  and hasattr(n, "name")}
        parents: dict[int, ast.AST] = {}
        for parent in ast.walk(node):
            for child in ast.iter_child_nodes(parent):
                parents[id(child)] = parent
        findings: list[str] = []
        namespace = function.__globals__
        body_nodes = [n for statement in node.body for n in ast.walk(statement)]
        for item in body_nodes:
            if not isinstance(item, ast.Name) or not isinstance(item.ctx, ast.Load) or item.id in local:
                continue
            value = namespace.get(item.id, _MISSING)
            if value is _MISSING:
                value = getattr(builtins, item.id, _MISSING)
                if value is _MISSING or item.id in KERNEL_BUILTINS:
                    continue
            shown = item.id
            # Follow module attributes: `tl.math.rsqrt`, `libdevice.tanh`.
            current: ast.AST = item
            while isinstance(value, ModuleType):
                parent = parents.get(id(current))
                if not (isinstance(parent, ast.Attribute) and parent.value is current):
                    break
                value = getattr(value, parent.attr, _MISSING)
                shown = f"{shown}.{parent.attr}"
                current = parent
            if value is _MISSING:
                continue
            problem = self._describe_foreign(value)
            if problem is None:
                if is_kernel(value):
                    findings.extend(self.check(value))
                continue
            findings.append(
                f"line {item.lineno}: kernel {name} refers to {shown} ({problem}), which is not Triton: a kernel "
                "body may use only tl.*/triton.* functions, @triton.jit functions and constants (a GPU would not "
                "compile it; the CPU interpreter would run it as plain Python)")
        return list(dict.fromkeys(findings))

    @staticmethod
    def _describe_foreign(value: Any) -> str | None:
        """None when `value` may appear in a kernel body, else what it is."""
        if value is None or isinstance(value, (bool, numbers.Number, str, bytes)):
            return None
        if isinstance(value, tuple):
            described = [BodyChecker._describe_foreign(v) for v in value[:64]]
            return next((d for d in described if d is not None), None)
        if is_kernel(value) or _is_triton_builtin(value):
            return None
        if isinstance(value, ModuleType):
            root = value.__name__.split(".")[0]
            return None if root in TRITON_MODULES else f"the module {value.__name__}"
        module = getattr(value, "__module__", None) or getattr(type(value), "__module__", None) or ""
        if isinstance(module, str) and module.split(".")[0] in TRITON_MODULES:
            return None
        if any(value is getattr(builtins, b, _MISSING) for b in KERNEL_BUILTINS):
            return None
        if isinstance(value, FunctionType):
            return f"a Python function from {module or 'the solution'}"
        if isinstance(value, type):
            return f"the class {value.__name__}"
        if callable(value):
            return f"a callable {type(value).__name__} from {module or '?'}"
        return f"a {type(value).__name__} object"


def describe_foreign_argument(value: Any, depth: int = 0) -> str | None:
    """None when `value` may be passed to a kernel, else what it is.

    Kernels take tensors (and Triton's tensor wrappers and descriptors), scalars, strings, dtypes,
    constexprs, other kernels and tuples of those. A Python callable or object would be run as
    Python by the CPU interpreter (a combine function, a constexpr object whose method the body
    calls) and is refused on both tiers.
    """
    import torch

    if value is None or isinstance(value, (bool, numbers.Number, str, torch.Tensor, torch.dtype)):
        return None
    if isinstance(value, (tuple, list)):
        if depth > 4:
            return "a deeply nested container"
        for item in value[:256]:
            problem = describe_foreign_argument(item, depth + 1)
            if problem is not None:
                return problem
        return None
    if is_kernel(value):
        return None
    module = getattr(type(value), "__module__", "") or ""
    if module.split(".")[0] == "triton" and not isinstance(value, FunctionType):
        return None  # tl.constexpr, tl.dtype, TensorWrapper, TensorDescriptor ...
    if type(value).__module__ == "numpy" and not callable(value):
        return None  # numpy scalars
    if isinstance(value, FunctionType) or callable(value):
        return f"a Python callable ({getattr(value, '__qualname__', type(value).__name__)})"
    return f"a Python {type(value).__name__} object"
