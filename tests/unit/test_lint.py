"""The code stays lint-clean under the project's ruff configuration (pyproject.toml)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (pip install -e '.[test]')")
def test_ruff_finds_nothing():
    done = subprocess.run(["ruff", "check", "src", "tests", "benchmarks"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
