"""The adversarial corpus: case files, their headers, and the problems they attack.

Each file in ``cases/`` is one candidate solution (pygpubench's ``submission_<technique>.py``
idea) whose module docstring is a header, one ``Key: value`` per line, in this order::

    Case: A1-torch-fallback
    Family: not_triton | host | semantic | caching | harness | timing | precision | control
    Problem: builtin/02_leaky_relu        (or adversarial/<stem> for tests/adversarial/problems/)
    Attack surface: what it targets
    Strategy: how it cheats, one or two sentences
    Expected status: a Status value, or "not ok" when several statuses are acceptable
    Expected violation: a ViolationCode value, or "none"
    Options: a JSON object of extra evaluate() options, e.g. {"time_on_cpu": true}
    Device: cpu | gpu
    Known gap: why the defences miss it (optional; the case is then a strict xfail)

A value may continue on following lines indented by at least two spaces (to keep lines short).
File names are ``<family>_<technique>.py``; controls are ``control_honest_*`` (must be ``ok``
with a reward above 0) and ``control_wrong_*`` (must be ``incorrect``).

Only the public API of tritongym is used here, so the corpus survives refactors of the
evaluator's internals.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import tritongym
from tritongym import Status, ViolationCode

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
PROBLEMS_DIR = HERE / "problems"

#: Header keys in their required order; the last one is optional.
REQUIRED_KEYS = (
    "Case", "Family", "Problem", "Attack surface", "Strategy", "Expected status",
    "Expected violation", "Options", "Device",
)
OPTIONAL_KEYS = ("Known gap",)
FAMILIES = ("not_triton", "host", "semantic", "caching", "harness", "timing", "precision", "control")
DEVICES = ("cpu", "gpu")
NOT_OK = "not ok"
_CASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.\-]*$")
_KEY_LINE = re.compile(r"^([A-Z][a-z]*(?: [a-z]+)*): (\S.*)$")


class HeaderError(ValueError):
    """A case file's header is missing or does not follow the schema."""


@dataclass(frozen=True)
class Case:
    """One parsed case file."""

    path: Path
    case_id: str
    family: str
    problem: str
    attack_surface: str
    strategy: str
    expected_status: Status | None  # None means "not ok": any status but ok
    expected_violation: ViolationCode | None
    options: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    known_gap: str | None = None

    @property
    def is_control(self) -> bool:
        return self.family == "control"

    @property
    def expects_ok(self) -> bool:
        return self.expected_status == Status.OK


def _header_lines(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise HeaderError(f"{path.name}: not valid Python ({exc.msg}, line {exc.lineno})") from exc
    docstring = ast.get_docstring(tree, clean=True)
    if not docstring:
        raise HeaderError(f"{path.name}: no module docstring; a case opens with its header")
    lines: list[str] = []
    for raw in docstring.splitlines():
        if not raw.strip():
            raise HeaderError(f"{path.name}: blank line inside the header; the docstring is the header")
        if raw[:2] == "  " and lines:
            lines[-1] += " " + raw.strip()
        else:
            lines.append(raw.rstrip())
    return lines


def parse_case(path: Path) -> Case:
    """Read and validate the header of one case file; raises `HeaderError` with the reason."""
    values: dict[str, str] = {}
    for line in _header_lines(path):
        match = _KEY_LINE.match(line)
        if match is None:
            raise HeaderError(f"{path.name}: header line {line!r} is not 'Key: value'")
        key, value = match.group(1), match.group(2).strip()
        if key not in REQUIRED_KEYS + OPTIONAL_KEYS:
            raise HeaderError(f"{path.name}: unknown header key {key!r}; keys are {', '.join(REQUIRED_KEYS)}"
                              f" and optionally {', '.join(OPTIONAL_KEYS)}")
        if key in values:
            raise HeaderError(f"{path.name}: header key {key!r} appears twice")
        values[key] = value
    keys = [k for k in values if k in REQUIRED_KEYS]
    if keys != list(REQUIRED_KEYS):
        missing = [k for k in REQUIRED_KEYS if k not in values]
        if missing:
            raise HeaderError(f"{path.name}: header lacks {', '.join(missing)}")
        raise HeaderError(f"{path.name}: header keys out of order: {keys}; expected {list(REQUIRED_KEYS)}")
    if "Known gap" in values and list(values)[-1] != "Known gap":
        raise HeaderError(f"{path.name}: 'Known gap' must be the last header line")

    case_id = values["Case"]
    if not _CASE_ID.match(case_id):
        raise HeaderError(f"{path.name}: case id {case_id!r} must be letters, digits, '.' and '-'")
    family = values["Family"]
    if family not in FAMILIES:
        raise HeaderError(f"{path.name}: family {family!r} is not one of {', '.join(FAMILIES)}")
    if not path.stem.startswith(f"{family}_"):
        raise HeaderError(f"{path.name}: the file name must start with its family ({family}_)")
    problem = values["Problem"]
    if not re.match(r"^(builtin|adversarial)/[A-Za-z0-9_]+$", problem):
        raise HeaderError(f"{path.name}: problem {problem!r} must be builtin/<name> or adversarial/<stem>")

    status_text = values["Expected status"]
    if status_text == NOT_OK:
        expected_status = None
    else:
        try:
            expected_status = Status(status_text)
        except ValueError as exc:
            raise HeaderError(f"{path.name}: expected status {status_text!r} is not a Status value "
                              f"({', '.join(s.value for s in Status)}) nor {NOT_OK!r}") from exc
    violation_text = values["Expected violation"]
    if violation_text == "none":
        expected_violation = None
    else:
        try:
            expected_violation = ViolationCode(violation_text)
        except ValueError as exc:
            raise HeaderError(f"{path.name}: expected violation {violation_text!r} is not a ViolationCode "
                              f"value ({', '.join(v.value for v in ViolationCode)}) nor 'none'") from exc
    if expected_violation is not None and expected_status not in (None, Status.INTEGRITY_VIOLATION):
        raise HeaderError(f"{path.name}: a violation is only reported with status integrity_violation "
                          f"(or 'not ok'), not {status_text!r}")
    try:
        options = json.loads(values["Options"])
    except json.JSONDecodeError as exc:
        raise HeaderError(f"{path.name}: Options is not JSON: {exc}") from exc
    if not isinstance(options, dict):
        raise HeaderError(f"{path.name}: Options must be a JSON object")
    for reserved in ("device", "problem", "solution"):
        if reserved in options:
            raise HeaderError(f"{path.name}: Options may not set {reserved!r} (the Device line decides it)")
    unknown = sorted(set(options) - set(tritongym.EvalOptions.__dataclass_fields__))
    if unknown:
        raise HeaderError(f"{path.name}: unknown evaluate() options {unknown}")
    device = values["Device"]
    if device not in DEVICES:
        raise HeaderError(f"{path.name}: device {device!r} is not one of {', '.join(DEVICES)}")

    if family == "control":
        if path.stem.startswith("control_honest_"):
            if expected_status != Status.OK or expected_violation is not None:
                raise HeaderError(f"{path.name}: an honest control expects status ok and violation none")
        elif path.stem.startswith("control_wrong_"):
            if expected_status != Status.INCORRECT or expected_violation is not None:
                raise HeaderError(f"{path.name}: a wrong control expects status incorrect and violation none")
        else:
            raise HeaderError(f"{path.name}: controls are named control_honest_* or control_wrong_*")
        if "Known gap" in values:
            raise HeaderError(f"{path.name}: a control cannot be a known gap")
    elif expected_status == Status.OK:
        raise HeaderError(f"{path.name}: only honest controls may expect status ok; an attack expects "
                          "no reward")

    return Case(
        path=path, case_id=case_id, family=family, problem=problem,
        attack_surface=values["Attack surface"], strategy=values["Strategy"],
        expected_status=expected_status, expected_violation=expected_violation,
        options=options, device=device, known_gap=values.get("Known gap"),
    )


def case_paths() -> list[Path]:
    """Every case file: controls first (honest, then wrong), then the attacks, by name."""
    paths = sorted(CASES_DIR.glob("*.py"))

    def order(path: Path) -> tuple[int, str]:
        if path.stem.startswith("control_honest_"):
            return (0, path.name)
        if path.stem.startswith("control_"):
            return (1, path.name)
        return (2, path.name)

    return sorted(paths, key=order)


def problem_paths() -> list[Path]:
    return sorted(PROBLEMS_DIR.glob("*.py"))


@cache
def _builtin_problems() -> dict[str, tritongym.Problem]:
    return {problem.problem_id: problem for problem in tritongym.builtin_suite()}


def load_problem(spec: str) -> tritongym.Problem:
    """``builtin/<name>`` from the built-in suite, ``adversarial/<stem>`` from ``problems/``."""
    kind, _, name = spec.partition("/")
    if kind == "builtin":
        problems = _builtin_problems()
        if spec not in problems:
            raise KeyError(f"no built-in problem {spec!r}; have {', '.join(sorted(problems))}")
        return problems[spec]
    path = PROBLEMS_DIR / f"{name}.py"
    if not path.is_file():
        raise KeyError(f"no adversarial problem {path}")
    return tritongym.load_problem_file(path, problem_id=spec)
