"""The trusted evaluator: `evaluate(problem, solution, **options) -> EvalResult`.

Imports only the standard library, torch, triton and numpy (the workers import less).
"""

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

__all__ = [
    "TOLERANCE_PRESETS",
    "EvalOptions",
    "EvalResult",
    "KernelLaunches",
    "Notice",
    "NoticeCode",
    "RewardConfig",
    "Status",
    "TimingReport",
    "Tolerance",
    "TrialReport",
    "Violation",
    "ViolationCode",
    "compute_reward",
    "evaluate",
    "prs_keep_probability",
]
