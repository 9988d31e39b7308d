"""Kernels rebuilt from the hashed source, checked to be Triton and nothing else.

The clean room never imports the solution module. For each kernel a launch log names
(``name:first line``), it takes that function's text from the source the parent hashed, checks
that the body is Triton (`check_kernel_body`), and compiles it with ``triton.jit`` in a namespace
that holds only what the log's bindings may name: modules from `launchlog.KERNEL_MODULES`
(``triton``, ``tl``, libdevice, Inductor's Triton helpers) and of Triton's language package,
objects of those modules, other
kernels of the same file (checked the same way), a few builtins, and plain numbers, strings and
dtypes for module-level constants. Whatever the candidate's module did at import (a global bound
after a check, an ``int`` subclass with methods, a helper named like Triton, a replaced
interpreter method) does not exist here. The header is not evaluated either: each default's
text is replaced by the value the log gives for it (`KernelBuilder.defaults`), and annotations
stay the text Triton reads (compiled postponed, checked like the body).

Why a body check at all: on a GPU, Triton's compiler refuses Python it cannot lower; the CPU
interpreter runs the body as Python, so without the check a kernel could call anything its
namespace reaches. The rules below are what a Triton kernel is made of:

* statements: assignments, ``for``/``while``/``if``, ``return``, ``pass``/``break``/``continue``,
  ``assert``, expression statements; no nested ``def``/``lambda``/``class``, no ``import``,
  ``global``, ``with``, ``try``, comprehensions or generators;
* names: parameters, locals, bindings from the log, allowed builtins (`BUILTINS`);
* attributes: no dunder anywhere; a chain from an allowed module must exist on that module and
  reach only what kernels are made of (`refused_object`): another allowed module, a number or a
  string, or an object defined in an allowed module or Triton's language package (``tl.core``
  imports Python's ``builtins`` and ``inspect``: ``tl.core.builtins.eval`` names a real attribute
  and is still refused; ``tl.str_to_ty`` is host code that calls ``eval``: refused); a private
  name only through such a chain, to Triton's own kernel helpers (`refused_private`:
  ``triton.language.standard._log2``);
  on values (tensors, dtypes) only the public members of ``tl.tensor`` and ``tl.dtype`` plus
  ``dtype``/``shape``/``T``/``value`` (`value_attributes`), never ``handle`` (the interpreter's raw
  array);
* calls: a module function, a kernel of the file, an allowed builtin, a value's method, or a
  kernel passed as an argument.
"""

from __future__ import annotations
import __future__

import ast
import importlib
import os
import tempfile
import textwrap
import types
from dataclasses import dataclass
from typing import Any

from tritongym import pyparse
from tritongym.evaluator.worker.launchlog import KERNEL_MODULES, in_triton_language

#: Builtins a kernel body may call or name (constexpr arithmetic and loops).
BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "tuple", "list", "zip",
                      "enumerate"})
#: Value attributes that are never allowed (the interpreter's raw arrays and Python internals).
DENIED_VALUE_ATTRIBUTES = frozenset({"handle", "data", "fn", "globals", "code", "mro", "to_ir"})

_STATEMENTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.While, ast.If, ast.Return, ast.Expr,
               ast.Pass, ast.Break, ast.Continue, ast.Assert)
_EXPRESSIONS = (ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Call, ast.Attribute, ast.Name, ast.Constant,
                ast.Tuple, ast.List, ast.Subscript, ast.Slice, ast.IfExp, ast.JoinedStr, ast.FormattedValue,
                ast.Starred, ast.keyword, ast.arguments, ast.arg, ast.expr_context, ast.operator, ast.unaryop,
                ast.boolop, ast.cmpop)


class KernelRefused(Exception):
    """The kernel is not Triton, or its log binds something the clean room does not provide."""


#: Triton's IR module (pybind): its enums are kernel arguments (``tl.PropagateNan.ALL``).
_IR_MODULE = "triton._C.libtriton.ir"
#: Modules whose functions stand in for Triton's own on the CPU tier: while a kernel is interpreted,
#: Triton's interpreter swaps ``tl``'s builtins for its versions (a helper kernel is rebuilt then),
#: and the interpreter fixes give libdevice its CPU implementations. Neither is reachable as a module.
STAND_IN_MODULES = frozenset({"triton.runtime.interpreter", "tritongym.evaluator.worker.interpreter_fixes"})
#: Host code defined in allowed modules, not kernel code: Inductor's helpers that switch the host's
#: Triton driver, and ``tl.str_to_ty``, which parses a type string and hands part of it to Python's
#: ``eval`` with the real builtins (a kernel passing it a string it built would run any Python).
HOST_HELPERS = frozenset({"set_driver_to_cpu", "set_driver_to_gpu", "str_to_ty"})


def refused_object(value: Any, name: str) -> str | None:
    """Why a kernel may not use `value`, reached as attribute `name` of an allowed module (None: it may).

    Allowed modules import others (``triton.language.core`` imports ``builtins`` and ``inspect``,
    Inductor's ``triton_compat`` imports ``torch``), so existing on an allowed module says nothing:
    what the name reaches must itself be Triton's.
    """
    if isinstance(value, types.ModuleType):
        return None if is_kernel_module(value.__name__) else f"module {value.__name__}"
    if value is None or type(value) in (bool, int, float, str):
        return None
    owner = getattr(value, "__module__", None)
    if name in HOST_HELPERS or getattr(value, "__name__", None) in HOST_HELPERS:
        return f"{name}, which is host code of {owner}, not kernel code"
    # Triton's language package defines kernel code in submodules too (``tl.extra.cuda.gdc_wait``
    # is ``triton.language.extra.cuda.gdc``'s). The clean room never ran candidate code: an object
    # reached here from a real Triton module, with such an owner, is Triton's own.
    if owner in KERNEL_MODULES or owner in STAND_IN_MODULES or in_triton_language(owner):
        return None
    # An enum class or member: on Triton 3.9 a Python enum (``type(PropagateNan)`` is EnumType, which
    # has ``__members__``); on 3.6 a pybind11 enum, whose metaclass has none, only the class itself.
    if owner == _IR_MODULE and (isinstance(value, type) and hasattr(value, "__members__")
                                or hasattr(type(value), "__members__")):
        return None
    return f"{name}, which is {owner or 'Python'}'s, not Triton's"


def is_kernel_module(name: Any) -> bool:
    """A module a kernel may name: `launchlog.KERNEL_MODULES` or a module of Triton's language package."""
    return isinstance(name, str) and (name in KERNEL_MODULES or in_triton_language(name))


def refused_private(value: Any, name: str) -> str | None:
    """Why a kernel may not use `value`, reached under the private name `name` (None: it may).

    Triton's public functions call private helpers of their own (``tl.sort`` calls
    ``triton.language.standard._log2``, a constexpr function), and kernels copied from Triton's
    source call them too. A private name is allowed for exactly those: an object of Triton's
    language package that is kernel code (a jitted or constexpr function, a Triton builtin). Every
    other private name stays refused: Triton's host-side helpers, and, whatever it claims to be,
    anything the candidate's module defines (it does not exist in the clean room's Triton).
    """
    if name.startswith("__"):
        return f"{name} (dunder names are not Triton)"
    why = refused_object(value, name)
    if why is not None:
        return why
    owner = getattr(value, "__module__", None)
    if in_triton_language(owner) and _is_kernel_code(value):
        return None
    return f"{name} (private names are not Triton, except Triton's own kernel helpers)"


def _is_kernel_code(value: Any) -> bool:
    from triton.language import core
    from triton.runtime import jit

    kinds = tuple(kind for kind in (getattr(jit, "JITCallable", None), jit.KernelInterface) if kind is not None)
    return isinstance(value, kinds) or bool(core.is_builtin(value))


def value_attributes() -> frozenset[str]:
    """Public members of Triton's tensor and dtype classes: what a kernel may use on a value."""
    from triton import language as tl

    samples: list[Any] = [tl.tensor, tl.dtype, tl.constexpr, tl.float32, tl.pointer_type(tl.float32)]
    try:
        samples.append(tl.block_type(tl.float32, [2]))
    except Exception:  # noqa: BLE001 - another Triton's constructor: the classes above still count
        samples.append(tl.block_type)
    # TMA descriptors (``desc.load([m, n])``, ``desc.store(...)``): Triton >= 3.4.
    samples += [cls for cls in (getattr(tl, "tensor_descriptor", None), getattr(tl, "tensor_descriptor_base", None))
                if cls is not None]
    # Instances too: ``element_ty``, ``address_space``, ``numel`` are set in __init__.
    names = {n for sample in samples for n in dir(sample) if not n.startswith("_")}
    names |= {"dtype", "shape", "T", "value", "numel", "type", "strides"}
    return frozenset(names - DENIED_VALUE_ATTRIBUTES)


def find_function(source: str, name: str, line: int) -> ast.FunctionDef:
    """The module-level or nested ``def name`` whose first line (decorators included) is `line`."""
    tree = pyparse.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first == line:
                return node
    raise KernelRefused(f"kernel {name} (line {line}) is not a function of the checked source")


@dataclass
class _Scope:
    params: set[str]
    locals: set[str]
    bindings: dict[str, dict[str, Any]]


def _assigned_names(function: ast.FunctionDef) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _module_chain(node: ast.AST, scope: _Scope) -> list[str] | None:
    """``tl.math.exp`` → ["<module name>", "math", "exp"] when the root is a bound module."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id in scope.params or node.id in scope.locals:
        return None
    binding = scope.bindings.get(node.id, {})
    if "module" not in binding:
        return None
    return [binding["module"], *reversed(parts)]


def _chain_problem(chain: list[str]) -> str | None:
    """Why ``module.a.b`` may not be used in a kernel: a missing attribute, or what it reaches."""
    try:
        value = allowed_module(chain[0])
    except KernelRefused as exc:
        return str(exc)
    for depth, part in enumerate(chain[1:], start=1):
        if not hasattr(value, part):
            return f"{'.'.join(chain[:depth])} has no {part}"
        value = getattr(value, part)
    if chain[-1].startswith("_"):
        return refused_private(value, chain[-1])
    return refused_object(value, chain[-1])


def header_defaults(function: ast.FunctionDef) -> list[tuple[ast.arg, ast.expr]]:
    """Each parameter that has a default, with the default's expression."""
    arguments = function.args
    positional = [*arguments.posonlyargs, *arguments.args]
    pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults, strict=True))
    pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True) if d is not None]
    return pairs


def header_annotations(function: ast.FunctionDef) -> list[tuple[str, ast.expr]]:
    """Each annotation of the ``def``, by parameter (``return`` for the return annotation).

    Kernels are compiled with postponed annotations (`KernelBuilder._compile`): Python never
    evaluates one, and Triton's CPU interpreter reads them as their text (``"tl.constexpr"``, as
    on the candidate's side). Triton's GPU compiler does evaluate them (it visits each parameter
    node whole), so they are checked like the body, and their names must be bound.
    """
    arguments = function.args
    annotated = [(a.arg, a.annotation) for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
                 if a.annotation is not None]
    return annotated + ([("return", function.returns)] if function.returns is not None else [])


def check_kernel_body(function: ast.FunctionDef, bindings: dict[str, dict[str, Any]],
                      value_attrs: frozenset[str]) -> list[str]:
    """Why this function is not a Triton kernel (empty when it is one)."""
    problems: list[str] = []
    params = {a.arg for a in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]}
    if function.args.vararg or function.args.kwarg:
        problems.append("a kernel takes no *args or **kwargs")
    scope = _Scope(params=params, locals=_assigned_names(function), bindings=bindings)
    body = ast.Module(body=function.body, type_ignores=[])
    # Defaults are not walked: their text is never evaluated here, the builder puts the values the
    # log gives for them in their place (`KernelBuilder.defaults`). Annotations are (`header_annotations`).
    annotations = [node for _, annotation in header_annotations(function) for node in ast.walk(annotation)]
    for node in [*ast.walk(body), *annotations]:
        if isinstance(node, ast.Module):
            continue
        if not isinstance(node, _STATEMENTS + _EXPRESSIONS):
            problems.append(f"line {getattr(node, 'lineno', '?')}: {type(node).__name__} is not Triton")
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in params or node.id in scope.locals or node.id in BUILTINS:
                continue
            binding = bindings.get(node.id)
            if binding is None:
                problems.append(f"line {node.lineno}: {node.id} is not defined for the kernel")
            elif not {"module", "const", "constexpr", "tl_dtype", "kernel", "attr", "builtin"} & set(binding):
                problems.append(f"line {node.lineno}: {node.id} is a {binding.get('unknown', 'Python object')}, "
                                "not a Triton function, kernel, module or number")
        elif isinstance(node, ast.Attribute):
            chain = _module_chain(node, scope)
            # Private names only through a module of Triton's, to its own kernel helpers (`refused_private`).
            if node.attr.startswith("_") and (chain is None or node.attr.startswith("__")):
                problems.append(f"line {node.lineno}: attribute {node.attr} (private attributes are not Triton)")
                continue
            if chain is None:
                if node.attr not in value_attrs:
                    problems.append(f"line {node.lineno}: .{node.attr} on a value is not a Triton tensor member")
                continue
            why = _chain_problem(chain)
            if why is not None:
                problems.append(f"line {node.lineno}: {'.'.join(chain[1:])} ({why})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("__"):
            problems.append(f"line {node.lineno}: a dunder string constant")
    return problems


@dataclass
class BuiltKernel:
    key: str
    jit: Any


class KernelBuilder:
    """Builds each logged kernel once, from the hashed source, in a namespace of its own."""

    def __init__(self, source: str, workdir: str | None = None) -> None:
        self.source = source
        self.workdir = workdir or tempfile.mkdtemp(prefix="tritongym-cleanroom-")
        self.built: dict[str, BuiltKernel] = {}
        self._value_attrs = value_attributes()
        self._building: set[str] = set()

    def resolve(self, binding: dict[str, Any], table: dict[str, dict[str, Any]]) -> Any:
        """The object a binding names, from the clean room's own modules only."""
        from triton import language as tl

        if "const" in binding:
            value = binding["const"]
            if value is not None and type(value) not in (bool, int, float, str):
                raise KernelRefused(f"a constant of type {type(value).__name__}")
            return value
        if "constexpr" in binding:
            value = binding["constexpr"]
            if value is not None and type(value) not in (bool, int, float, str):
                raise KernelRefused(f"a constexpr of type {type(value).__name__}")
            return tl.constexpr(value)
        if "tl_dtype" in binding:
            return tl_dtype(binding["tl_dtype"])
        if "module" in binding:
            return allowed_module(binding["module"])
        if "builtin" in binding:
            name = binding["builtin"]
            if name not in BUILTINS:
                raise KernelRefused(f"builtin {name!r} is not available to kernels")
            return __builtins__[name] if isinstance(__builtins__, dict) else getattr(__builtins__, name)
        if "attr" in binding:
            owner, name = binding["attr"]
            if not isinstance(name, str) or name.startswith("__"):
                raise KernelRefused(f"{owner}.{name} is not available to kernels")
            module = allowed_module(owner)
            if not hasattr(module, name):
                raise KernelRefused(f"{owner} has no {name}")
            value = getattr(module, name)
            why = refused_private(value, name) if name.startswith("_") else refused_object(value, name)
            if why is not None:
                raise KernelRefused(f"{owner}.{name} is not available to kernels ({why})")
            return value
        if "kernel" in binding:
            return self.build(binding["kernel"], table).jit
        raise KernelRefused(f"a {binding.get('unknown', 'Python object')} (kernels may use Triton functions, "
                            "kernels of the same file, modules of Triton and numbers only)")

    def build(self, key: str, table: dict[str, dict[str, Any]]) -> BuiltKernel:
        # Built once per key *and* bindings: a log whose kernel carries other module constants (a
        # fresh kernel object per call, each with that call's globals) gets a kernel with those.
        cache_key = f"{key}|{_bindings_digest(key, table)}"
        if cache_key in self.built:
            return self.built[cache_key]
        if key in self._building:
            raise KernelRefused(f"kernel {key} refers to itself")
        entry = table.get(key)
        # The key is `launchlog.kernel_key`'s ``name:first line``: a key that says another kernel than
        # its entry would name one kernel in messages and build another.
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not isinstance(
                entry.get("line"), int) or not isinstance(entry.get("globals"), dict) or (
                key != f"{entry['name']}:{entry['line']}"):
            raise KernelRefused(f"kernel {key} is not described in the log")
        self._building.add(key)
        try:
            function = find_function(self.source, entry["name"], entry["line"])
            bindings = {str(k): v for k, v in entry["globals"].items() if isinstance(v, dict)}
            bindings.update(self.annotation_names(function, entry, bindings))
            problems = check_kernel_body(function, bindings, self._value_attrs)
            if problems:
                raise KernelRefused(f"kernel {entry['name']}: " + "; ".join(problems[:4]))
            from triton import language as tl

            # The interpreter finds triton.language among a kernel's globals to patch it; a helper
            # that names no `tl` (it only does arithmetic) still needs it there, under a name the
            # body check never lets a kernel use.
            namespace: dict[str, Any] = {"__builtins__": {name: _builtin(name) for name in BUILTINS},
                                         "_tritongym_language": tl}
            used = {n.id for n in ast.walk(function) if isinstance(n, ast.Name)}
            for name, binding in bindings.items():
                if name in used:
                    namespace[name] = self.resolve(binding, table)
            replaced = self.defaults(function, entry, namespace, table)
            jit = self._compile(function, namespace, key, replaced)
        finally:
            self._building.discard(key)
        built = BuiltKernel(key=key, jit=jit)
        self.built[cache_key] = built
        return built

    def annotation_names(self, function: ast.FunctionDef, entry: dict[str, Any],
                         bindings: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Bindings for the names of annotations that no global of the body binds, from what the
        log says each annotation evaluated to: a bare name (``BLOCK: constexpr`` after ``from
        triton.language import constexpr``) is bound to that value; the root of a chain
        (``scale: tl.float32`` in a kernel whose body names no ``tl``: a wrapper calling a helper)
        to the kernel module through which the chain reaches that value. Nothing else is bound,
        and what is bound is checked and resolved like any binding."""
        header = entry.get("header") if isinstance(entry.get("header"), dict) else {}
        logged = header.get("annotations") if isinstance(header.get("annotations"), dict) else {}
        names: dict[str, dict[str, Any]] = {}
        for parameter, annotation in header_annotations(function):
            binding = logged.get(parameter)
            if not isinstance(binding, dict):
                continue
            if isinstance(annotation, ast.Name):
                if annotation.id not in bindings:
                    names[annotation.id] = binding
                continue
            parts: list[str] = []
            root: ast.AST = annotation
            while isinstance(root, ast.Attribute):
                parts.append(root.attr)
                root = root.value
            if not parts or not isinstance(root, ast.Name) or root.id in bindings or root.id in names:
                continue
            module = _module_reaching(list(reversed(parts)), self._annotation_value(binding))
            if module is not None:
                names[root.id] = {"module": module}
        return names

    def _annotation_value(self, binding: dict[str, Any]) -> Any:
        try:
            return self.resolve(binding, {})
        except KernelRefused:
            return _UNRESOLVED

    def defaults(self, function: ast.FunctionDef, entry: dict[str, Any], namespace: dict[str, Any],
                 table: dict[str, dict[str, Any]]) -> list[tuple[ast.expr, str]]:
        """Bind the values the log gives for the kernel's defaults in `namespace`, each under a
        name of its own, and say which expression of the text each name replaces.

        A default's text is never evaluated here: ``FP8_MAX: tl.constexpr = float8_info.max``
        names an object of the candidate's module, which this process does not have, and needs
        not, since Python bound a value to it when the candidate's ``def`` ran
        (`launchlog.LaunchLog._header`). Each value is resolved like a global's binding (numbers,
        strings, Triton's own objects, kernels of the file); a default without one is refused.
        """
        header = entry.get("header") if isinstance(entry.get("header"), dict) else {}
        logged = header.get("defaults") if isinstance(header.get("defaults"), dict) else {}
        replaced: list[tuple[ast.expr, str]] = []
        for index, (parameter, node) in enumerate(header_defaults(function)):
            binding = logged.get(parameter.arg)
            if not isinstance(binding, dict):
                raise KernelRefused(f"kernel {entry['name']}: the log gives no value for the default of "
                                    f"{parameter.arg}")
            try:
                value = self.resolve(binding, table)
            except KernelRefused as exc:
                raise KernelRefused(f"kernel {entry['name']}: the default of {parameter.arg} is {exc}") from None
            name = f"_tritongym_default_{index}"
            namespace[name] = value
            replaced.append((node, name))
        return replaced

    def _compile(self, function: ast.FunctionDef, namespace: dict[str, Any], key: str,
                 replaced: list[tuple[ast.expr, str]] = ()) -> Any:
        """``triton.jit`` over the function's own text (no decorators), from a file of its own, with
        each header expression of `replaced` replaced by the name its logged value is bound to."""
        import triton

        lines = self.source.splitlines(keepends=True)
        # Column offsets are UTF-8 byte offsets; the last expression is replaced first, so the
        # offsets of the ones before it still hold.
        segment = [line.encode("utf-8") for line in lines[function.lineno - 1:function.end_lineno]]
        for node, name in sorted(replaced, key=lambda item: (item[0].lineno, item[0].col_offset), reverse=True):
            first, last = node.lineno - function.lineno, node.end_lineno - function.lineno
            joined = segment[first][:node.col_offset] + name.encode("ascii") + segment[last][node.end_col_offset:]
            segment[first:last + 1] = [joined]
        text = textwrap.dedent(b"".join(segment).decode("utf-8"))
        flags = __future__.annotations.compiler_flag  # postponed: Triton reads annotations as text
        safe = "".join(c if c.isalnum() else "_" for c in key)
        path = os.path.join(self.workdir, f"kernel_{safe}.py")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        code = compile(text, path, "exec", flags=flags, dont_inherit=True)
        exec(code, namespace)  # noqa: S102 - the checked text of one kernel, in a namespace of Triton only
        return triton.jit(namespace[function.name])


def _bindings_digest(key: str, table: dict[str, Any]) -> str:
    """A stable digest of a kernel's table entry and those of the kernels it names (their globals'
    bindings), for the build cache: a kernel built with other constants is another kernel."""
    import hashlib
    import json

    entries: dict[str, Any] = {}
    pending = [key]
    while pending and len(entries) < 256:
        name = pending.pop()
        if name in entries:
            continue
        entry = table.get(name) if isinstance(table, dict) else None
        entries[name] = entry
        # every kernel the entry names, among its globals or its logged defaults
        stack: list[Any] = [entry]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                if isinstance(value.get("kernel"), str):
                    pending.append(value["kernel"])
                stack.extend(value.values())
            elif isinstance(value, list):
                stack.extend(value)
    try:
        text = json.dumps(entries, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        text = repr(entries)
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


_UNRESOLVED = object()


def _module_reaching(parts: list[str], value: Any) -> str | None:
    """The first kernel module (`launchlog.KERNEL_MODULES`, by name) on which the attribute chain
    `parts` reaches exactly `value`, or None."""
    if value is _UNRESOLVED:
        return None
    for name in sorted(KERNEL_MODULES):
        try:
            current = allowed_module(name)
        except KernelRefused:
            continue
        for part in parts:
            current = getattr(current, part, _UNRESOLVED)
        if current is value:
            return name
    return None


def _builtin(name: str) -> Any:
    import builtins

    return getattr(builtins, name)


def allowed_module(name: Any) -> Any:
    if not is_kernel_module(name):
        raise KernelRefused(f"module {name!r} is not available to kernels")
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise KernelRefused(f"module {name} cannot be imported here: {exc}") from exc


def tl_dtype(name: Any) -> Any:
    from triton import language as tl

    for attribute in dir(tl):
        value = getattr(tl, attribute, None)
        if isinstance(value, tl.dtype) and str(value) == name:
            return value
    raise KernelRefused(f"unknown Triton dtype {name!r}")
