"""Fast static pre-checks of a candidate's source, run before any process starts.

They read the source as an AST and never execute it. They decide only what the text alone
decides without doubt: whether it parses, whether `ModelNew` is defined, whether it uses Triton
at all, and whether it uses a construct **with no honest use in a kernel solution** that an attack
on the harness needs. Everything else is judged by what the code *does*, at run time: kernels are
found as objects after the import (`kernels`), plain Python inside a kernel is caught at launch,
and what ``importlib``, ``operator``, ``types``, ``functools``, ``packaging`` or a computed
``getattr`` could be used for is refused by the run-time policy (`audit_policy`) when it happens.

Each rule names the attack it stops (reward-hacking.md ids; docs/integrity.md has the table):

* ``gc``, ``ctypes``/``cffi``, frame and code attributes (``sys._getframe``,
  ``f_back``, ``f_locals``, ``__globals__``, ``__code__``, ``__closure__``, ``__defaults__``,
  ``cell_contents``...), numpy's raw-memory array interface: reaching the harness's objects or
  memory (B10, D4, E3);
* ``exec``/``eval``/``compile``/``__import__``/``breakpoint``: code the gate never saw (A5, E5);
* processes, threads, signals, sockets, raw descriptors (``subprocess``, ``multiprocessing``,
  ``threading``, ``signal``, ``socket``, ``os.fork``/``kill``/``system``/``exec*``, ``os.write``,
  ``os.read``, ``os.dup2``, ``os._exit``, ``sys.exit``): work outside the call, talking on the
  harness's channel, killing the evaluator (D2, E1, E2);
* monkeypatching: assigning to an attribute of an imported module (``torch.allclose = ...``,
  ``time.perf_counter = ...``), ``setattr``/``delattr`` on one, ``sys.modules`` (D4, E3). Not
  through a name the module also binds to a stand-in (``triton = MagicMock()`` in an import
  guard: `stand_ins`), and not ``triton.jit``/``autotune``/``heuristics`` (`WATCHED_AT_RUN_TIME`):
  the worker compares those by identity after every forward, so a real rebinding is named there
  and a fallback branch that never runs is not;
* borrowed kernels and global knobs: ``torch.compile``, ``torch._dynamo``, Inductor's compiler
  and code generator (``torch._inductor`` except the runtime helpers below),
  ``torch.utils.cpp_extension``, ``set_float32_matmul_precision``, CUDA streams and graphs (A5, B6,
  D1);
* switching torch's mode handling (``_disable_current_modes``, ``DisableTorchFunction`` and the
  mode-stack functions): blinding the op and host-read traces (E5).

Not refused by spelling, because honest code written the way LLMs and libraries write it uses them
and they borrow no kernel: ``inspect`` (``inspect.signature`` as a version-compatibility check;
what ``inspect`` could do against the harness, frame walks and reading the harness's defaults, is
refused at run time), and Inductor's *runtime helpers* that Inductor-generated and KernelBook /
KernelLLM-style kernels import (`INDUCTOR_RUNTIME`): ``triton_helpers`` (``@triton.jit`` helpers
such as ``max2``, ``maximum``, ``welford_reduce``, and the ``libdevice``/``math`` aliases),
``triton_heuristics.grid`` (a grid helper), ``hints`` (enums) and ``extern_kernels`` (a table of
ATen ops: work done through it is PyTorch work, which the op trace counts), and dynamo's
``testing.rand_strided`` (KernelBook rows make their sample inputs with it). ``triton_heuristics``
and ``torch._dynamo.testing`` may be imported as namespaces; every use of such a name must reach
one of those helpers (`HELPER_NAMESPACES`).

Static rules are evaded by spelling (string-built names), so they are never the only defence:
the run-time policy, the evidence checks and the sandbox decide; a static rule names an attack
early and cheaply when it sees one.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from tritongym import pyparse
from tritongym.tasks.problem import defined_names

#: Modules no kernel solution needs; importing one is a violation.
FORBIDDEN_MODULES = frozenset({
    "ctypes", "cffi", "gc", "threading", "_thread", "multiprocessing", "concurrent", "subprocess",
    "socket", "signal", "builtins", "marshal", "pickle", "dill", "pty", "fcntl", "mmap", "resource", "code",
    "codeop", "tracemalloc", "faulthandler", "pdb", "bdb", "torch._dynamo", "torch._inductor",
    "torch.utils.cpp_extension", "torch.utils._python_dispatch", "cuda", "cupy", "numba", "pycuda",
})
#: Inductor's runtime helpers, and the one dynamo helper KernelBook rows import, allowed by what
#: each object is: Triton helpers and aliases, a grid helper (three lines of arithmetic on sizes),
#: enums, the ATen-op table, and ``rand_strided`` (a random tensor with given sizes and strides:
#: input making; used to fake an output it is a wrong answer, which the comparison decides). None
#: compiles, generates or launches a kernel, so `torch._inductor` / `torch._dynamo` allow them (and
#: the packages above them when imported *from*: ``from torch._inductor.runtime import triton_helpers``).
#: The rest of those modules stays refused: ``triton_heuristics``' autotuners (``CachingAutotuner``,
#: ``pointwise``, ``reduction``) compile and launch kernels themselves, ``torch._dynamo.testing``'s
#: other helpers run dynamo's compiler.
INDUCTOR_RUNTIME = (
    "torch._inductor.runtime.triton_helpers", "torch._inductor.runtime.triton_heuristics.grid",
    "torch._inductor.runtime.hints", "torch._inductor.select_algorithm.extern_kernels",
    "torch._dynamo.testing.rand_strided",
)
#: Modules that hold allowed helpers beside refused objects. Importing one as a namespace
#: (``from torch._inductor.runtime import triton_heuristics``, ``import torch._dynamo.testing as t``)
#: is allowed; each use of the name must then reach an allowed helper (``triton_heuristics.grid``):
#: any other use, the bare name included, is refused, so the namespace cannot hand out the rest.
HELPER_NAMESPACES = ("torch._inductor.runtime.triton_heuristics", "torch._dynamo.testing")


def inductor_runtime(dotted: str) -> bool:
    """Whether `dotted` names one of the allowed helpers (or something inside one)."""
    return any(dotted == allowed or dotted.startswith(allowed + ".") for allowed in INDUCTOR_RUNTIME)


#: Built-in functions that execute code from strings or reach harness state.
FORBIDDEN_CALLS = frozenset({"exec", "eval", "compile", "__import__", "breakpoint", "open"})
#: Attribute names that reach frames, code objects, closures or raw memory.
FORBIDDEN_ATTRIBUTES = frozenset({
    "_getframe", "settrace", "setprofile", "f_back", "f_globals", "f_locals", "f_code", "f_builtins",
    "tb_frame", "gi_frame", "cr_frame", "ag_frame", "__globals__", "__code__", "__closure__", "__builtins__",
    "__subclasses__", "_current_frames", "__defaults__", "__kwdefaults__", "cell_contents",
    "__array_interface__", "__array_struct__",
    # torch's mode-handling switches (blind the op and host-read traces)
    "_disable_current_modes", "DisableTorchFunction", "DisableTorchFunctionSubclass", "_DisableTorchDispatch",
    "_pop_mode", "_pop_mode_temporarily", "_push_mode", "_set_torch_function_mode", "_pop_torch_function_stack",
    "_pop_torch_dispatch_stack", "_push_on_torch_function_stack", "_push_on_torch_dispatch_stack",
    "_ExcludeDispatchKeyGuard", "_unset_dispatch_mode", "_set_dispatch_mode",
})
_FORMAT_FIELD = re.compile(r"\{([^{}]*)\}")

#: Dotted names that are forbidden wherever they appear, with the attack they serve.
FORBIDDEN_DOTTED = {
    "sys.modules": "replacing modules the harness uses",
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
    "os.write": "writing to raw file descriptors (the harness's channel)",
    "os.writev": "writing to raw file descriptors (the harness's channel)",
    "os.read": "reading raw file descriptors (the harness's channel)",
    "os.readv": "reading raw file descriptors (the harness's channel)",
    "os.fdopen": "opening raw file descriptors",
    "os.open": "opening raw file descriptors",
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
#: Modules whose attributes a candidate must not assign (monkeypatching the harness's world).
PATCHED_ROOTS = frozenset({"torch", "triton", "time", "sys", "os", "math", "numpy", "json", "socket", "struct",
                           "tritongym", "hmac", "builtins"})
#: Module attributes whose assignment the run time judges, not the text: the candidate worker
#: captures each before the import and compares identities after every forward (`candidate.
#: _watchlist`), so a real rebinding is named there, while the same statement in a branch that never
#: runs (a fallback for machines without Triton) changes nothing and is not tampering.
WATCHED_AT_RUN_TIME = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})


@dataclass(frozen=True)
class StaticReport:
    """What the source shows without running it.

    `triton_kernels` lists the decorated kernels the text shows (informational: kernels are
    found at run time, however they are made); `uses_triton` is whether the solution imports
    Triton at all (without it no kernel can exist, which the gate decides early).
    """

    syntax_error: str | None = None
    defines_model_new: bool = False
    triton_kernels: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    findings: tuple[str, ...] = field(default_factory=tuple)
    uses_triton: bool = True


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


def _plain_chain(node: ast.expr) -> bool:
    """Whether `node` is only names and attributes (``a.b.c``), no call or subscript inside."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _is_triton_jit(name: str) -> bool:
    """``triton.jit`` after import aliases are resolved (``import triton as tr`` → ``tr.jit``)."""
    return name in ("jit", "triton.jit", "triton.language.jit", "triton.runtime.jit", "triton.runtime.jit.jit")


class _Scanner(ast.NodeVisitor):
    """Collects forbidden constructs, resolving import aliases (``import torch as t``)."""

    def __init__(self, stand_ins: frozenset[str] = frozenset()) -> None:
        self.aliases: dict[str, str] = {}
        self.modules: set[str] = set()
        self.found: dict[str, None] = {}
        self.uses_triton = False
        #: Names the module also binds to an object of its own (`stand_ins`).
        self.stand_ins = stand_ins

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
            if alias.name not in HELPER_NAMESPACES:
                self._check_module(node, alias.name)
            self.uses_triton |= root == "triton"

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        fulls = [f"{module}.{alias.name}" if module else alias.name for alias in node.names]
        if not (fulls and all(inductor_runtime(full) or full in HELPER_NAMESPACES for full in fulls)):
            # `from torch._inductor.runtime import triton_helpers` names an allowed helper; the
            # package it comes from is judged by what is imported from it.
            self._check_module(node, module)
        self.uses_triton |= module.split(".")[0] == "triton"
        for alias, full in zip(node.names, fulls, strict=True):
            self.aliases[alias.asname or alias.name] = full
            if full in HELPER_NAMESPACES:
                continue  # its uses are judged where they appear (visit_Attribute, visit_Name)
            self._check_module(node, full)
            self._check_dotted(node, full)

    def _check_module(self, node: ast.AST, name: str) -> None:
        if inductor_runtime(name):
            return
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            if ".".join(parts[:i]) in FORBIDDEN_MODULES:
                self.note(node, f"imports {name}")
                return

    def _check_dotted(self, node: ast.AST, dotted: str) -> None:
        if inductor_runtime(dotted):
            return
        for forbidden, why in FORBIDDEN_DOTTED.items():
            if dotted == forbidden or dotted.startswith(forbidden + "."):
                self.note(node, f"uses {forbidden} ({why})")
                return

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_ATTRIBUTES:
            self.note(node, f"accesses .{node.attr}")
        dotted = _dotted(node)
        if dotted:
            resolved = self.resolve(dotted)
            if inductor_runtime(resolved) and _plain_chain(node):
                return  # `torch._inductor.runtime.triton_helpers.max2`: its prefixes are not uses
            self._check_dotted(node, resolved)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # "{0.__globals__}".format(f) reads attributes without an attribute node; a string that
        # names a forbidden attribute is how getattr(...)/format reach it.
        if not isinstance(node.value, str):
            return
        if node.value in FORBIDDEN_ATTRIBUTES:
            self.note(node, f"names the attribute {node.value}")
            return
        for body in _FORMAT_FIELD.findall(node.value):
            if any(part in FORBIDDEN_ATTRIBUTES for part in re.split(r"[.\[\]!:]", body)):
                self.note(node, "a format string that reads a forbidden attribute")
                return

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_ATTRIBUTES:
            self.note(node, f"uses the name {node.id}")  # e.g. a class defining __array_interface__
        namespace = self.aliases.get(node.id)
        if namespace in HELPER_NAMESPACES:
            # Reached only by a use that is not an allowed helper's plain attribute chain
            # (visit_Attribute stops there): `h = triton_heuristics`, `triton_heuristics.pointwise`.
            helpers = ", ".join(a.rpartition(".")[2] for a in INDUCTOR_RUNTIME if a.startswith(namespace + "."))
            self.note(node, f"uses {namespace} other than through its allowed helpers ({helpers})")

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in FORBIDDEN_ATTRIBUTES:
            self.note(node, f"defines {node.name}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
            self.note(node, f"calls {node.func.id}()")
        if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and node.args:
            target = self.resolve(_dotted(node.args[0]))
            if _dotted(node.args[0]).split(".")[0] in self.stand_ins:
                pass  # possibly a stand-in object, not the module: the run time's identity checks decide
            elif target.split(".")[0] in PATCHED_ROOTS or target in self.modules:
                self.note(node, f"{node.func.id} on the module {target} (monkeypatching)")
        self.generic_visit(node)

    def _check_store(self, node: ast.AST, target: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._check_store(node, element)
            return
        if isinstance(target, ast.Attribute):
            written = _dotted(target)
            dotted = self.resolve(written)
            root = dotted.split(".")[0]
            if written.split(".")[0] in self.stand_ins or dotted in WATCHED_AT_RUN_TIME:
                return  # a stand-in's attribute, or one the run time watches by identity
            if (root in PATCHED_ROOTS or root in self.modules) and "." in dotted:
                self.note(node, f"assigns to {dotted} (monkeypatching a module)")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_store(node, target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_store(node, node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_store(node, target)
        self.generic_visit(node)


def stand_ins(tree: ast.AST) -> frozenset[str]:
    """Names the module binds, somewhere, to an object of its own rather than to another name.

    ``triton = MagicMock()`` in an ``except ImportError`` fallback, ``class triton: ...``: after
    such a binding, ``triton.jit = ...`` may assign to the stand-in, not to the module, and the
    text cannot tell which branch runs. Assignments through these names are left to the run
    time's identity checks, which compare the real modules' attributes with the ones captured
    before the import. ``t = torch`` (a plain name or attribute chain) is an alias, not a stand-in.
    """
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and not (
                isinstance(node.value, (ast.Name, ast.Attribute)) and _plain_chain(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
    return frozenset(names)


def inspect_source(source: str) -> StaticReport:
    """Parse `source` and report what it defines and which forbidden constructs it uses."""
    try:
        tree = pyparse.parse(source)
    except SyntaxError as exc:
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return StaticReport(syntax_error=f"SyntaxError: {exc.msg}{where}", uses_triton=False)
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return StaticReport(syntax_error=f"the source cannot be parsed: {type(exc).__name__}", uses_triton=False)
    scanner = _Scanner(stand_ins(tree))
    scanner.visit(tree)
    kernels = tuple(
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(_is_triton_jit(scanner.resolve(_dotted(d))) for d in node.decorator_list)
    )
    findings = []
    if any(isinstance(node, ast.Try) for node in ast.walk(tree)):
        findings.append("the source uses try/except; a fallback path that skips the Triton kernels "
                        "is caught at run time (every forward must launch a candidate kernel)")
    return StaticReport(
        defines_model_new="ModelNew" in defined_names(tree),
        triton_kernels=kernels,
        forbidden=tuple(scanner.found),
        findings=tuple(findings),
        uses_triton=scanner.uses_triton,
    )
