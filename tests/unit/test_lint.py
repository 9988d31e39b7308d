"""The code stays lint-clean under the project's ruff configuration (pyproject.toml)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_finds_nothing():
    # Through the interpreter, not PATH: the test extra installs ruff into this environment, and a
    # missing ruff is a failure, not a skip.
    assert importlib.util.find_spec("ruff") is not None, "ruff is not installed (pip install -e '.[test]')"
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "benchmarks"], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
