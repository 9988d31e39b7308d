"""tritongym: a trustworthy evaluator, environment and RL library for LLM-written Triton kernels.

The top level re-exports the evaluator's public API::

    from tritongym import evaluate, builtin_suite
    result = evaluate(builtin_suite()[0], "examples/builtin/01_....py", device="cpu")
    result.status, result.reward, result.violations
"""

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

__version__ = "0.1.0"

__all__ = [
    "DependencyError",
    "EvalOptions",
    "EvalResult",
    "EvaluatorError",
    "OptionsError",
    "Problem",
    "ProblemError",
    "RewardConfig",
    "SolutionError",
    "Status",
    "TritongymError",
    "Violation",
    "ViolationCode",
    "__version__",
    "builtin_suite",
    "compute_reward",
    "evaluate",
    "load_hf_dataset",
    "load_hf_rows",
    "load_kernelbench_dir",
    "load_problem_file",
    "load_problems",
]
