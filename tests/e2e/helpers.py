"""Helpers for the end-to-end tests: real evaluations on the CPU (Triton interpreter).

A fresh evaluation starts real worker processes (about 4-6 s each on 2 cores, mostly start-up), so
`run_eval` goes through one warm pool for the whole session (`tests/session_pool.py`: a
`tritongym.execution.LocalPool`, whose fork server's workers start in milliseconds, and whose
verdicts are `evaluate`'s, the same `run_evaluation` with another launcher), and its results are
cached per session: tests that assert different properties of the same evaluation share one run.
Cached results must be treated as read-only. ``TRITONGYM_E2E_LAUNCHER=spawn`` makes `run_eval`
call `evaluate` itself (fresh processes every time, as `tests/adversarial/test_corpus.py`'s
``TRITONGYM_CORPUS_LAUNCHER``); the tests that are about the fresh path (`test_isolation.py`,
`test_clean_room_prestart.py`, the CLI's) ask for it (``run_eval(..., fresh=True)``) or call
`evaluate` directly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.session_pool import evaluate_in_session_pool

from tritongym import EvalResult, evaluate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PROBLEMS = FIXTURES / "problems"
CANDIDATES = FIXTURES / "candidates"
TINY_RELU = PROBLEMS / "tiny_relu.py"
TINY_LINEAR = PROBLEMS / "tiny_linear.py"

#: Options of every e2e evaluation unless a test says otherwise: the CPU, two trials on the task's
#: own inputs (the perturbed input families still run after them), a generous timeout.
E2E_OPTIONS: dict[str, Any] = {"device": "cpu", "num_trials": 2, "timeout": 60.0}


def candidate(name: str) -> Path:
    """tests/fixtures/candidates/<name>.py (or .txt, for sources that must not parse)."""
    for suffix in (".py", ".txt"):
        path = CANDIDATES / f"{name}{suffix}"
        if path.is_file():
            return path
    raise AssertionError(f"no fixture candidate named {name}")


_CACHE: dict[tuple, EvalResult] = {}


def _pooled(problem: Path, solution: Path, **options: Any) -> EvalResult:
    return evaluate_in_session_pool(problem, solution, launcher_variable="TRITONGYM_E2E_LAUNCHER", **options)


def run_eval(name: str, problem: Path = TINY_RELU, *, fresh: bool = False, **options: Any) -> EvalResult:
    """Evaluate tests/fixtures/candidates/<name>.py against `problem`, once per session: through the
    session's pool, or with `fresh` through `evaluate`'s own fresh processes (what a test about the
    candidate's process itself needs: its environment, its parent, how it was started)."""
    merged = {**E2E_OPTIONS, **options}
    key = (name, str(problem), fresh, tuple(sorted(merged.items())))
    if key not in _CACHE:
        _CACHE[key] = (evaluate if fresh else _pooled)(problem, candidate(name), **merged)
    return _CACHE[key]


def task_trials(result: EvalResult):
    """The trials on the task's own `get_inputs()` (perturbed-family trials left out)."""
    return [t for t in result.trials if t.family == "get_inputs"]


def run_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m tritongym.cli ARGS`` in a subprocess, capturing text output."""
    return subprocess.run(
        [sys.executable, "-m", "tritongym.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=FIXTURES.parents[1],
    )


def processes_with(marker: str) -> list[int]:
    """PIDs of live processes whose command line contains `marker` (this process excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(entry))
    return found


def kill_all(pids: list[int]) -> None:
    """Clean up after a failed assertion so no test leaves sleepers behind."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
