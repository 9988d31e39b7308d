"""Shared fixtures and marker handling for the whole test suite.

Markers (registered in pyproject.toml):

* ``gpu``: skipped unless ``torch.cuda.is_available()``;
* ``sandbox``: skipped when bubblewrap cannot jail a process here
  (`tritongym.evaluator.jail.sandbox.bwrap_problem()` says why);
* ``slow``: runs by default; deselect with ``-m "not slow"``.

The KernelBench data is read in place from ``<repo>/../shared/datasets/kernelbench/`` (a fresh
clone with ``shared/`` beside it works); tests that need it skip, with the path, when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
KERNELBENCH_DIR = REPO_ROOT.parent / "shared" / "datasets" / "kernelbench"
# TRITONGYM_KERNELBENCH_JSONL names the file where shared/ is not beside the repository (a worktree).
KERNELBENCH_JSONL = Path(os.environ.get("TRITONGYM_KERNELBENCH_JSONL", "")
                         or KERNELBENCH_DIR / "kernelbench_l1-l3.jsonl")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests without CUDA and ``sandbox`` tests where bwrap cannot run."""
    wants_gpu = any(item.get_closest_marker("gpu") for item in items)
    wants_sandbox = any(item.get_closest_marker("sandbox") for item in items)
    skip_gpu = skip_sandbox = None
    if wants_gpu:
        import torch

        if not torch.cuda.is_available():
            skip_gpu = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    if wants_sandbox:
        from tritongym.evaluator.jail.sandbox import bwrap_problem

        problem = bwrap_problem()
        if problem is not None:
            skip_sandbox = pytest.mark.skip(reason=f"needs a working bubblewrap sandbox: {problem}")
    for item in items:
        if skip_gpu is not None and item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)
        if skip_sandbox is not None and item.get_closest_marker("sandbox"):
            item.add_marker(skip_sandbox)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (the folder holding ``src/`` and ``tests/``)."""
    return REPO_ROOT


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """``tests/fixtures``: small problems and candidate solutions for the evaluator tests."""
    return FIXTURES


@pytest.fixture(scope="session")
def kernelbench_jsonl() -> Path:
    """The shared KernelBench levels 1-3 JSONL (250 rows); skips when ``shared/`` is not beside the repo."""
    if not KERNELBENCH_JSONL.is_file():
        pytest.skip(
            f"the shared KernelBench dataset is absent: {KERNELBENCH_JSONL} "
            "(clone the project with shared/ beside it)"
        )
    return KERNELBENCH_JSONL


@pytest.fixture(scope="session")
def kernelbench_rows(kernelbench_jsonl: Path) -> list[dict]:
    """The shared dataset's rows as dicts, in file order."""
    import json

    with kernelbench_jsonl.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="session")
def builtin_problems():
    """`tritongym.builtin_suite()`, loaded once."""
    from tritongym.tasks import builtin_suite

    return builtin_suite()
