"""The trusted evaluator: `evaluate(problem, solution, **options) -> EvalResult`.

Imports only the standard library, torch, triton and numpy (the workers import less).
"""

from tritongym.evaluate.options import TOLERANCE_PRESETS, EvalOptions, Tolerance
from tritongym.evaluate.parent import evaluate
from tritongym.evaluate.result import (
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
from tritongym.evaluate.reward import RewardConfig, compute_reward

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
]
