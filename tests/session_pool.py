"""One warm evaluation pool per test process, for tests whose verdicts do not depend on how the
candidate's processes were started (the e2e helpers' `run_eval`, the adversarial corpus).

A fresh `tritongym.evaluate` imports torch in three new processes; the pool's jailed fork server
starts each evaluation's workers in milliseconds, and its verdicts are `evaluate`'s (the same
`run_evaluation` with another launcher). A suite's environment variable set to ``spawn``
(``TRITONGYM_E2E_LAUNCHER``, ``TRITONGYM_CORPUS_LAUNCHER``) sends its evaluations through `evaluate`
instead, in fresh processes every time.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

import tritongym

_POOL: list = []


def evaluate_in_session_pool(problem: Any, solution: Any, *, launcher_variable: str,
                             **options: Any) -> tritongym.EvalResult:
    """`tritongym.evaluate(problem, solution, **options)` through the process's pool (started on first
    use, closed at exit), or through `evaluate` itself when `launcher_variable` says ``spawn``."""
    if os.environ.get(launcher_variable, "pool") == "spawn":
        return tritongym.evaluate(problem, solution, **options)
    if not _POOL:
        from tritongym.execution import LocalPool

        _POOL.append(LocalPool(1))
        atexit.register(_POOL[0].close)
    request = tritongym.EvalRequest(problem, solution, tritongym.EvalOptions(**options))
    return _POOL[0].submit(request).result()
