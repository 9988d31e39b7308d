"""The adversarial corpus's conventions: every case file has a valid header, ids are unique,
problems exist, and the schema itself rejects malformed headers (so it cannot rot silently)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .corpus import (
    FAMILIES,
    HeaderError,
    case_paths,
    load_problem,
    parse_case,
    problem_paths,
)

GOOD_HEADER = '''"""Case: X1-example
Family: semantic
Problem: builtin/02_leaky_relu
Attack surface: something
Strategy: does something,
  over two lines.
Expected status: integrity_violation
Expected violation: trivial_output
Options: {"num_trials": 3}
Device: cpu
"""
'''


@pytest.mark.parametrize("path", case_paths(), ids=lambda p: p.stem)
def test_case_header_is_valid(path: Path) -> None:
    case = parse_case(path)
    load_problem(case.problem)


def test_case_ids_are_unique() -> None:
    ids = [parse_case(p).case_id for p in case_paths()]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    assert not duplicates, f"duplicate case ids: {duplicates}"


def test_every_family_and_both_kinds_of_control_are_present() -> None:
    cases = [parse_case(p) for p in case_paths()]
    assert {c.family for c in cases} == set(FAMILIES)
    assert any(c.path.stem.startswith("control_honest_") and c.device == "cpu" for c in cases)
    assert any(c.path.stem.startswith("control_wrong_") and c.device == "cpu" for c in cases)


@pytest.mark.parametrize("path", problem_paths(), ids=lambda p: p.stem)
def test_every_adversarial_problem_loads_and_is_used(path: Path) -> None:
    spec = f"adversarial/{path.stem}"
    load_problem(spec)
    assert any(parse_case(p).problem == spec for p in case_paths()), f"no case uses {spec}"


def test_schema_accepts_a_good_header(tmp_path: Path) -> None:
    path = tmp_path / "semantic_example.py"
    path.write_text(GOOD_HEADER + "\nx = 1\n")
    case = parse_case(path)
    assert case.case_id == "X1-example"
    assert case.strategy == "does something, over two lines."
    assert case.options == {"num_trials": 3}
    assert case.known_gap is None


@pytest.mark.parametrize("broken, reason", [
    ("", "no module docstring"),
    (GOOD_HEADER.replace("Family: semantic\n", ""), "lacks Family"),
    (GOOD_HEADER.replace("Family: semantic", "Family: magic"), "family 'magic'"),
    (GOOD_HEADER.replace("integrity_violation", "integrity"), "not a Status value"),
    (GOOD_HEADER.replace("trivial_output", "trivial"), "not a ViolationCode"),
    (GOOD_HEADER.replace('{"num_trials": 3}', "{num_trials: 3}"), "not JSON"),
    (GOOD_HEADER.replace('{"num_trials": 3}', '{"trials": 3}'), "unknown evaluate() options"),
    (GOOD_HEADER.replace("Device: cpu", "Device: tpu"), "device 'tpu'"),
    (GOOD_HEADER.replace("Case: X1-example\n", "Case: X1-example\nCase: X2\n"), "appears twice"),
    (GOOD_HEADER.replace("Problem: builtin/02_leaky_relu\n", "").replace(
        "Device: cpu\n", "Device: cpu\nProblem: builtin/02_leaky_relu\n"), "out of order"),
    (GOOD_HEADER.replace("Device: cpu\n", "Device: cpu\nSeverity: high\n"), "unknown header key"),
    (GOOD_HEADER.replace("Device: cpu\n", "Device: cpu\n\nMore prose.\n"), "blank line"),
    (GOOD_HEADER.replace("Expected status: integrity_violation", "Expected status: ok").replace(
        "Expected violation: trivial_output", "Expected violation: none"),
     "only honest controls may expect status ok"),
    (GOOD_HEADER.replace("Expected status: integrity_violation", "Expected status: incorrect"),
     "only reported with status integrity_violation"),
])
def test_schema_rejects_a_malformed_header(tmp_path: Path, broken: str, reason: str) -> None:
    path = tmp_path / "semantic_example.py"
    path.write_text(broken + "\nx = 1\n")
    with pytest.raises(HeaderError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_case(path)


def test_schema_requires_the_family_prefix_in_the_file_name(tmp_path: Path) -> None:
    path = tmp_path / "harness_example.py"
    path.write_text(GOOD_HEADER)
    with pytest.raises(HeaderError, match="must start with its family"):
        parse_case(path)
