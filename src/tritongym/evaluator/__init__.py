"""The trusted evaluator: `evaluate(problem, solution, **options) -> EvalResult`.

Imports only the standard library, torch, triton and numpy. The package is in rooms by who runs
the code (docs/architecture.md, "The evaluator's rooms"):

* this folder: the **parent** process, which decides: `parent` (one evaluation end to end),
  `checks`, `oprules`, `trivial`, `static`, `compare`, `plausibility`, `coverage`,
  `interpreter_gaps`, `replays`, `measurement`, `session`, `reference`, `reward`, `result`,
  `options`;
* `worker/`: code that runs inside a jailed worker, **beside candidate (or problem) code**;
  nothing there decides, and the parent never imports it;
* `cleanroom/`: the jailed clean-room worker, which never runs candidate code;
* `jail/`: how a worker is confined (bubblewrap, seccomp, cgroups);
* `common/`: what both sides agree on (the wire, devices, input families, profile records).

tests/unit/test_layout.py checks the boundary: the parent never loads `worker/` or
`cleanroom/`, and no worker loads a deciding module. Names are loaded on first use (PEP 562), so
a worker that imports `tritongym.evaluator.worker.candidate` does not load the verdict logic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongym.lazy import lazy_exports

_EXPORTS = {
    "TOLERANCE_PRESETS": "tritongym.evaluator.options",
    "EvalOptions": "tritongym.evaluator.options",
    "Tolerance": "tritongym.evaluator.options",
    "evaluate": "tritongym.evaluator.parent",
    "EvalResult": "tritongym.evaluator.result",
    "KernelLaunches": "tritongym.evaluator.result",
    "Notice": "tritongym.evaluator.result",
    "NoticeCode": "tritongym.evaluator.result",
    "Status": "tritongym.evaluator.result",
    "TimingReport": "tritongym.evaluator.result",
    "TrialReport": "tritongym.evaluator.result",
    "Violation": "tritongym.evaluator.result",
    "ViolationCode": "tritongym.evaluator.result",
    "RewardConfig": "tritongym.evaluator.reward",
    "compute_reward": "tritongym.evaluator.reward",
    "prs_keep_probability": "tritongym.evaluator.reward",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from tritongym.evaluator.options import TOLERANCE_PRESETS, EvalOptions, Tolerance
    from tritongym.evaluator.parent import evaluate
    from tritongym.evaluator.result import (
        EvalResult,
        KernelLaunches,
        Notice,
        NoticeCode,
        Status,
        TimingReport,
        TrialReport,
        Violation,
        ViolationCode,
    )
    from tritongym.evaluator.reward import RewardConfig, compute_reward, prs_keep_probability
