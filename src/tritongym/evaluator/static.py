"""Fast static pre-checks of a candidate's source, run before any process starts.

They read the source as an AST and never execute it. They decide what is certain from the
text: whether it parses, whether `ModelNew` is defined, whether any ``@triton.jit`` kernel
exists, and whether it uses the **forbidden vocabulary**: the constructs a kernel never needs and
an attack on the harness always does (reward-hacking.md §3.10, E1–E5, B10, A5, A6, D1–D5):

* introspection and escape hatches: ``gc``, ``inspect``, ``ctypes``/``cffi``, ``sys._getframe``, ``open``,
  ``sys.modules``, frame and code attributes (``f_back``, ``__globals__``, ``__code__`` ...),
  ``exec``/``eval``/``compile``/``__import__``;
* processes, threads, signals, sockets and descriptors: ``threading``, ``multiprocessing``,
  ``subprocess``, ``socket``, ``signal``, ``os._exit``, ``os.kill``, ``os.fork``, ``os.dup2``,
  ``os.write`` ...;
* borrowed or generated kernels and global knobs: ``torch.compile``, ``torch._dynamo``,
  ``torch._inductor``, assignments to ``torch.backends.*``, ``set_float32_matmul_precision``,
  CUDA streams and graphs;
* monkeypatching: assigning to an attribute of an imported module (``torch.allclose = ...``,
  ``time.perf_counter = ...``) or ``setattr`` on one.

Static rules are evaded by aliasing, string building and ``getattr`` (so they are never the only
defence: the run-time checks and the sandbox decide), but they name an attack when they see one.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tritongym.tasks.problem import defined_names

#: Modules a Triton solution never needs; importing one is a violation.
FORBIDDEN_MODULES = frozenset({
    "ctypes", "cffi", "gc", "inspect", "threading", "_thread", "multiprocessing", "concurrent",
    "subprocess", "socket", "signal", "importlib", "builtins", "marshal", "pickle", "dill",
    "asyncio", "pty", "fcntl", "mmap", "resource", "sysconfig", "site", "code", "codeop",
    "operator", "types", "weakref", "copyreg", "tracemalloc", "faulthandler", "pdb", "bdb",
    "torch._dynamo", "torch._inductor", "torch._C", "torch.utils._python_dispatch", "cuda", "cupy",
    "numba", "pycuda",
})
#: Dunder attributes honest code uses; every other ``__name__``-style attribute is forbidden.
ALLOWED_DUNDERS = frozenset({"__init__", "__name__", "__doc__", "__qualname__", "__module__", "__call__",
                             "__len__", "__getitem__", "__setitem__", "__iter__", "__next__", "__enter__",
                             "__exit__", "__version__"})
#: Built-in functions a Triton kernel body may call (everything else must be tl.*/triton.* or @jit).
KERNEL_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "abs", "print", "isinstance",
                             "enumerate", "zip", "tuple", "list", "getattr", "static_print", "static_assert"})
#: Built-in functions that execute or reach code dynamically.
FORBIDDEN_CALLS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint", "globals", "vars", "setattr",
                             "open", "delattr"})
#: Attribute names that reach frames, code objects or module internals.
FORBIDDEN_ATTRIBUTES = frozenset({
    "_getframe", "settrace", "setprofile", "f_back", "f_globals", "f_locals", "f_code", "f_builtins",
    "tb_frame", "gi_frame", "cr_frame", "ag_frame", "__globals__", "__code__", "__closure__", "__builtins__",
    "__subclasses__", "__loader__", "__spec__", "_current_frames",
})
_FORMAT_ATTRIBUTE = re.compile(r"\{[^{}]*\.[^{}]*\}|\{[^{}]*\[[^{}]*\}")

#: Dotted names that are forbidden wherever they appear.
FORBIDDEN_DOTTED = {
    "sys.modules": "sys.modules tampering",
    "sys.exit": "exiting the worker",
    "os._exit": "exiting the worker",
    "os.kill": "signalling processes",
    "os.killpg": "signalling processes",
    "os.fork": "forking",
    "os.forkpty": "forking",
    "os.system": "running commands",
    "os.popen": "running commands",
    "os.dup2": "redirecting file descriptors",
    "os.dup": "redirecting file descriptors",
    "os.write": "writing to raw file descriptors",
    "os.fdopen": "opening raw file descriptors",
    "os.open": "opening raw file descriptors",
    "os.environ": "the process environment",
    "os.putenv": "the process environment",
    "torch.compile": "torch.compile (generated kernels are not the candidate's own)",
    "torch._dynamo": "torch._dynamo",
    "torch._inductor": "torch._inductor",
    "torch.set_float32_matmul_precision": "a global precision knob",
    "torch.cuda.Stream": "CUDA side streams",
    "torch.cuda.stream": "CUDA side streams",
    "torch.cuda.graph": "CUDA graph capture",
    "torch.cuda.CUDAGraph": "CUDA graph capture",
    "torch.cuda.set_stream": "CUDA side streams",
    "torch.utils.cpp_extension": "compiled extensions (not Triton)",
}
for _name in ("execv", "execve", "execvp", "execl", "execlp", "spawnv", "spawnl", "posix_spawn"):
    FORBIDDEN_DOTTED[f"os.{_name}"] = "running commands"


@dataclass(frozen=True)
class StaticReport:
    """What the source shows without running it."""

    syntax_error: str | None = None
    defines_model_new: bool = False
    triton_kernels: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    findings: tuple[str, ...] = field(default_factory=tuple)


def _dotted(node: ast.expr) -> str:
    """Dotted name of an expression, with any call stripped: ``@triton.jit(...)`` → ``triton.jit``."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_triton_jit(name: str) -> bool:
    """``triton.jit`` after import aliases are resolved (``import triton as tr`` → ``tr.jit``)."""
    return name in ("jit", "triton.jit", "triton.language.jit", "triton.runtime.jit", "triton.runtime.jit.jit")


class _Scanner(ast.NodeVisitor):
    """Collects forbidden constructs, resolving import aliases (``import torch as t``)."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()
        self.found: dict[str, None] = {}

    def note(self, node: ast.AST, what: str) -> None:
        self.found.setdefault(f"line {getattr(node, 'lineno', '?')}: {what}", None)

    def resolve(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        real = self.aliases.get(head, head)
        return f"{real}.{rest}" if rest else real

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            root = alias.name.split(".")[0]
            self.modules.add(alias.asname or root)
            self.aliases[alias.asname or root] = alias.name if alias.asname else root
            self._check_module(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        self._check_module(node, module)
        for alias in node.names:
            full = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = full
            self._check_module(node, full)
            self._check_dotted(node, full)

    def _check_module(self, node: ast.AST, name: str) -> None:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in FORBIDDEN_MODULES:
                self.note(node, f"imports {name}")
                return

    def _check_dotted(self, node: ast.AST, dotted: str) -> None:
        for forbidden, why in FORBIDDEN_DOTTED.items():
            if dotted == forbidden or dotted.startswith(forbidden + "."):
                self.note(node, f"uses {forbidden} ({why})")
                return
        if dotted.startswith("torch.backends.") and dotted.count(".") >= 2:
            pass  # reading a backend flag is harmless; writing one is caught in visit_Assign

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.note(node, f"accesses .{node.attr}")
        elif node.attr.startswith("__") and node.attr.endswith("__") and node.attr not in ALLOWED_DUNDERS:
            self.note(node, f"accesses .{node.attr}")
        dotted = _dotted(node)
        if dotted:
            resolved = self.resolve(dotted)
            self._check_dotted(node, resolved)
            parts = resolved.split(".")
            if parts[0] in ("torch", "triton") and any(p.startswith("_") and not p.startswith("__") for p in parts):
                self.note(node, f"uses the private {resolved} (internals of {parts[0]})")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # "{0.__globals__}".format(f) reads attributes without an attribute node.
        if isinstance(node.value, str) and _FORMAT_ATTRIBUTE.search(node.value):
            self.note(node, "a format string that reads attributes")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__",):
            self.note(node, f"uses {node.id}")

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2:
            name = node.args[1]
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.note(node, f"{node.func.id}() with a computed attribute name")
            elif name.value in FORBIDDEN_ATTRIBUTES or (
                    name.value.startswith("__") and name.value.endswith("__") and name.value not in ALLOWED_DUNDERS):
                self.note(node, f"{node.func.id}() of .{name.value}")
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            target = _dotted(node.args[0]) if node.args and node.func.id in ("setattr", "delattr") else ""
            if node.func.id in ("setattr", "delattr"):
                if self.resolve(target).split(".")[0] in self.modules | {"torch", "triton", "time", "sys", "os"}:
                    self.note(node, f"{node.func.id} on the module {target} (monkeypatching)")
            else:
                self.note(node, f"calls {node.func.id}()")
        self.generic_visit(node)

    def _check_store(self, node: ast.AST, target: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_store(node, element)
            return
        if isinstance(target, ast.Attribute):
            dotted = self.resolve(_dotted(target))
            root = dotted.split(".")[0]
            if root in self.modules or root in ("torch", "triton", "time", "sys", "os", "math"):
                self.note(node, f"assigns to {dotted} (monkeypatching a module)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_store(node, target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node, node.target)
        self.generic_visit(node)


def _kernel_body_calls(tree: ast.Module, scanner: _Scanner, kernels: set[str]) -> list[str]:
    """Calls inside ``@triton.jit`` bodies that are not Triton: the interpreter would run them as Python.

    On a GPU a kernel can call only ``tl``/``triton`` functions and other ``@triton.jit``
    functions; the CPU interpreter runs the body as Python and would execute any helper (with
    the op trace suspended), so such calls are rejected here.
    """
    module_level = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                          ast.ClassDef))}
    module_level |= {t.id for node in tree.body if isinstance(node, ast.Assign) for t in node.targets
                     if isinstance(t, ast.Name)}
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef) or function.name not in kernels:
            continue
        local = {a.arg for a in function.args.args + function.args.kwonlyargs}
        local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for call in ast.walk(function):
            if not isinstance(call, ast.Call):
                continue
            root = _root_name(call.func)
            if root is None:
                continue  # a method of an expression's value: (a + b).to(...)
            if scanner.resolve(root).split(".")[0] in ("triton", "math"):
                continue
            if isinstance(call.func, ast.Name) and (root in kernels or root in KERNEL_BUILTINS):
                continue
            if root in local and root not in module_level:
                continue  # a local value or its methods: x.to(...).to(...), acc.sum(...)
            shown = _dotted(call.func) or root
            found.append(f"line {call.lineno}: kernel {function.name} calls {shown}(), which is not a Triton "
                         "function (only tl.*, triton.* and @triton.jit functions run inside kernels)")
    return found


def _root_name(node: ast.expr) -> str | None:
    """The name an expression starts from, through calls, attributes and subscripts."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            break
    return node.id if isinstance(node, ast.Name) else None


def inspect_source(source: str) -> StaticReport:
    """Parse `source` and report what it defines and which forbidden constructs it uses."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return StaticReport(syntax_error=f"SyntaxError: {exc.msg}{where}")
    scanner = _Scanner()
    scanner.visit(tree)
    kernels = tuple(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(_is_triton_jit(scanner.resolve(_dotted(d))) for d in node.decorator_list)
    )
    forbidden = list(scanner.found)
    forbidden += _kernel_body_calls(tree, scanner, set(kernels))
    findings = []
    if any(isinstance(node, ast.Try) for node in ast.walk(tree)):
        findings.append("the source uses try/except; a fallback path that skips the Triton kernels "
                        "is caught at run time (every forward must launch a candidate kernel)")
    return StaticReport(
        defines_model_new="ModelNew" in defined_names(tree),
        triton_kernels=kernels,
        forbidden=tuple(dict.fromkeys(forbidden)),
        findings=tuple(findings),
    )
