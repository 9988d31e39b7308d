"""The package's layout keeps its promises: no import cycles, and the evaluator's trust boundary.

The evaluator is in rooms by who runs the code (docs/architecture.md, "The evaluator's rooms"):
`evaluator/worker/` runs beside candidate (or problem) code in a jailed worker,
`evaluator/cleanroom/` is the jailed clean room, `evaluator/jail/` and `evaluator/common/` are
shared, and the modules directly in `evaluator/` decide the verdict in the parent process.
Two rules follow, checked here statically (every import statement, function-level ones
included) and at run time (what a process really loaded):

* the parent process never imports a worker room: a module there may install hooks or keep
  state that candidate code can reach, and its records are proposals, never evidence;
* a worker never imports a deciding module: the code that decides a verdict is not in any
  address space that candidate code shares.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import tritongym

PACKAGE_DIR = Path(tritongym.__file__).resolve().parent
ROOT = Path(__file__).resolve().parents[2]
EVALUATOR = "tritongym.evaluator"
#: The rooms whose code runs inside jailed worker processes.
WORKER_ROOMS = (f"{EVALUATOR}.worker", f"{EVALUATOR}.cleanroom")
#: Modules outside the worker rooms that are worker-process entry points (the fork server's
#: child imports the worker modules before it forks into one; it is started by name, never imported).
WORKER_PROCESSES = ("tritongym.execution.forkserver_main",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(path): path for path in PACKAGE_DIR.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


class _Imports(ast.NodeVisitor):
    """The package's modules one module imports; `typing_only` ones are kept apart."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.runtime: set[str] = set()
        self.typing_only: set[str] = set()
        self._in_type_checking = False

    def _add(self, target: str) -> None:
        (self.typing_only if self._in_type_checking else self.runtime).add(target)

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._in_type_checking = True
            for child in node.body:
                self.visit(child)
            self._in_type_checking = False
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in MODULES:
                self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:
            if f"{source}.{alias.name}" in MODULES:  # a submodule
                self._add(f"{source}.{alias.name}")
            elif source in MODULES:  # a name defined in the module
                self._add(source)


def _graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    runtime, typing_only = {}, {}
    for module, path in MODULES.items():
        visitor = _Imports(module, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(encoding="utf-8")))
        runtime[module] = visitor.runtime - {module}
        typing_only[module] = visitor.typing_only - {module}
    return runtime, typing_only


RUNTIME, TYPING_ONLY = _graph()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _loaded_by(module: str) -> set[str]:
    """Every module of the package that importing `module` executes: its imports, transitively,
    and the ``__init__`` of every package on the way (Python runs those first)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        parts = current.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(RUNTIME.get(current, ()))
    return seen


def _in_rooms(module: str, rooms: tuple[str, ...]) -> bool:
    return any(module == room or module.startswith(room + ".") for room in rooms)


#: The deciding modules: those directly in evaluator/ (the package's own __init__ loads them lazily).
DECIDING = sorted(m for m, p in MODULES.items()
                  if m.startswith(EVALUATOR + ".") and m.count(".") == 2 and p.name != "__init__.py")
WORKER_SIDE = sorted(m for m in MODULES if _in_rooms(m, WORKER_ROOMS) or m in WORKER_PROCESSES)
PARENT_SIDE = sorted(set(MODULES) - set(WORKER_SIDE))


def test_the_graph_is_read_from_the_real_package():
    # The checks below are only as good as the graph: it must see the modules and edges we know.
    assert f"{EVALUATOR}.parent" in DECIDING and f"{EVALUATOR}.checks" in DECIDING
    assert f"{EVALUATOR}.worker.candidate" in WORKER_SIDE and f"{EVALUATOR}.cleanroom.worker" in WORKER_SIDE
    assert f"{EVALUATOR}.checks" in RUNTIME[f"{EVALUATOR}.parent"]
    assert f"{EVALUATOR}.worker.startup" in RUNTIME[f"{EVALUATOR}.worker.candidate"]
    assert f"{EVALUATOR}.result" in TYPING_ONLY["tritongym.service.metrics"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_the_package():
    # Type-only imports count: a module that needs another's types to be read is part of its design.
    graph = {module: RUNTIME[module] | TYPING_ONLY[module] for module in MODULES}
    assert _cycles(graph) == []


@pytest.mark.parametrize("module", PARENT_SIDE)
def test_no_parent_side_module_loads_a_worker_room(module):
    bad = sorted(m for m in _loaded_by(module) if m in WORKER_SIDE)
    assert bad == [], f"{module} imports worker-side code: {bad}"


@pytest.mark.parametrize("module", WORKER_SIDE)
def test_no_worker_loads_the_verdict_logic(module):
    bad = sorted(m for m in _loaded_by(module) if m in DECIDING)
    assert bad == [], f"{module} (runs in a jailed worker) imports deciding modules: {bad}"


def _modules_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-I", "-c", code + "\nimport sys, json\n"
                          "print(json.dumps(sorted(m for m in sys.modules if m.startswith('tritongym'))))"],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_a_parent_that_ran_an_evaluation_loaded_no_worker_room():
    loaded = _modules_after(
        "import tritongym\n"
        "solution = open('tests/fixtures/candidates/relu_honest.py').read()\n"
        "result = tritongym.evaluate('tests/fixtures/problems/tiny_relu.py', solution, device='cpu')\n"
        "assert result.status.value == 'ok', result.summary()\n")
    assert f"{EVALUATOR}.parent" in loaded and f"{EVALUATOR}.replays" in loaded  # the run did decide
    assert [m for m in loaded if _in_rooms(m, WORKER_ROOMS)] == []


@pytest.mark.parametrize("entry", [f"{EVALUATOR}.worker.candidate", f"{EVALUATOR}.worker.reference",
                                   f"{EVALUATOR}.cleanroom.worker", "tritongym.execution.forkserver_main"])
def test_a_worker_process_loads_no_deciding_module(entry):
    loaded = _modules_after(f"import {entry}")
    assert entry in loaded
    assert [m for m in loaded if m in DECIDING] == []
