"""tritongym: a trustworthy evaluator, environment and RL library for LLM-written Triton kernels.

The top level re-exports the evaluator's public API::

    import tritongym
    result = tritongym.evaluate("problem.py", pathlib.Path("solution.py"), device="cpu")  # a str is source
    result.status, result.reward, result.violations

    # many at once, on a warm pool of sandboxed workers
    results = tritongym.evaluate_many([tritongym.EvalRequest(problem, code) for code in candidates])

Names are loaded on first use (PEP 562), so ``import tritongym`` and ``tritongym --help`` do not
pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tritongym.lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "DependencyError": "tritongym.errors",
    "EvaluatorError": "tritongym.errors",
    "OptionsError": "tritongym.errors",
    "ProblemError": "tritongym.errors",
    "SolutionError": "tritongym.errors",
    "TritongymError": "tritongym.errors",
    "EvalOptions": "tritongym.evaluator",
    "EvalResult": "tritongym.evaluator",
    "RewardConfig": "tritongym.evaluator",
    "Status": "tritongym.evaluator",
    "Violation": "tritongym.evaluator",
    "ViolationCode": "tritongym.evaluator",
    "compute_reward": "tritongym.evaluator",
    "evaluate": "tritongym.evaluator",
    "prs_keep_probability": "tritongym.evaluator",
    "Completed": "tritongym.execution",
    "EvalRequest": "tritongym.execution",
    "LocalPool": "tritongym.execution",
    "aevaluate": "tritongym.execution",
    "aevaluate_many": "tritongym.execution",
    "evaluate_many": "tritongym.execution",
    "Problem": "tritongym.tasks",
    "builtin_suite": "tritongym.tasks",
    "load_hf_dataset": "tritongym.tasks",
    "load_hf_rows": "tritongym.tasks",
    "load_kernelbench_dir": "tritongym.tasks",
    "load_problem_file": "tritongym.tasks",
    "load_problems": "tritongym.tasks",
}

__all__ = sorted([*_EXPORTS, "__version__"])


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
    from tritongym.errors import (
        DependencyError,
        EvaluatorError,
        OptionsError,
        ProblemError,
        SolutionError,
        TritongymError,
    )
    from tritongym.evaluator import (
        EvalOptions,
        EvalResult,
        RewardConfig,
        Status,
        Violation,
        ViolationCode,
        compute_reward,
        evaluate,
        prs_keep_probability,
    )
    from tritongym.execution import (
        Completed,
        EvalRequest,
        LocalPool,
        aevaluate,
        aevaluate_many,
        evaluate_many,
    )
    from tritongym.tasks import (
        Problem,
        builtin_suite,
        load_hf_dataset,
        load_hf_rows,
        load_kernelbench_dir,
        load_problem_file,
        load_problems,
    )
