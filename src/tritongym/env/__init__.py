"""The multi-turn environment, agent runner and test-time scaling (docs/environment.md).

Light to import: the evaluator is loaded when the first step evaluates, and the agent runner's
HTTP and progress dependencies (the ``env`` extra) only by the runner.
"""

from tritongym.env.core import EpisodeError, KernelEnv, Turn, success_rule
from tritongym.env.evaluators import CallableEvaluator, Evaluator, PoolEvaluator, as_evaluator
from tritongym.env.extract import (
    extract_first_python_block,
    extract_last_python_block,
    extract_whole_reply,
    resolve_extractor,
    strip_reasoning,
)
from tritongym.env.feedback import LEVELS, FeedbackPolicy, scrub_values
from tritongym.env.history import (
    Attempt,
    BestK,
    Chain,
    CharBudget,
    FullHistory,
    HistoryPolicy,
    LastK,
    NoHistory,
    StripThinking,
    TokenBudget,
    parse_history,
)
from tritongym.env.templates import PromptTemplates

__all__ = [
    "LEVELS", "Attempt", "BestK", "CallableEvaluator", "Chain", "CharBudget", "EpisodeError", "Evaluator",
    "FeedbackPolicy", "FullHistory", "HistoryPolicy", "KernelEnv", "LastK", "NoHistory", "PoolEvaluator",
    "PromptTemplates", "StripThinking", "TokenBudget", "Turn", "as_evaluator", "extract_first_python_block",
    "extract_last_python_block", "extract_whole_reply", "parse_history", "resolve_extractor", "scrub_values",
    "strip_reasoning", "success_rule",
]
