"""The trajectory schema's pieces that every producer shares: one turn's record, a run's common
provenance, and the trajectory record itself.

The agent runner (`tritongym.env.agent`) and the trainer rollouts (`tritongym.integrations.trl`)
write trajectories that `tritongym report`, `tritongym.env.export` and the RL code read alike, so
the field names and their meaning live here once.
"""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from tritongym.env.evaluators import Evaluator, options_to_dict

if TYPE_CHECKING:
    from tritongym.env.core import KernelEnv, Turn
    from tritongym.tasks import Problem

__all__ = ["run_provenance", "trajectory_record", "turn_record"]


def turn_record(turn: Turn, messages: list[dict[str, str]], info: dict[str, Any], *, generation_s: float,
                wall_s: float, usage: dict[str, Any] | None, finish_reason: str | None,
                reasoning: str | None = None, **extra: Any) -> dict[str, Any]:
    """One turn as stored: what the model saw and said, the verdict, the feedback and the timings.

    `extra` adds producer-specific fields (the agent runner's ``request_attempts``).
    """
    return {
        "turn": turn.turn, "iteration": turn.iteration, "messages": messages, "reply": turn.reply,
        "reasoning": reasoning, "code": turn.code, "void": turn.void, "status": turn.status,
        "result": turn.result.to_dict() if turn.result is not None else None, "reward": turn.reward,
        "feedback": turn.feedback, "feedback_message": turn.message,
        "usage": usage, "finish_reason": finish_reason, **extra,
        "generation_s": round(generation_s, 4), "eval_s": round(turn.eval_s, 4), "env_s": round(info["env_s"], 6),
        "wall_s": round(wall_s, 4),
    }


def run_provenance(env: KernelEnv, evaluator: Evaluator) -> dict[str, Any]:
    """Versions, device, the evaluator and its options, template hashes and history of a run."""
    import torch
    import triton

    from tritongym import __version__

    options = getattr(evaluator, "options", None)
    device = getattr(options, "device", None)
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return {
        "tritongym": __version__, "torch": torch.__version__, "triton": triton.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "device": device, "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor(),
        "evaluator": evaluator.describe() if hasattr(evaluator, "describe") else {"kind": type(evaluator).__name__},
        "evaluator_options": options_to_dict(options),
        "prompt_templates": env.templates.hashes(),
        "template_origins": dict(env.templates.origins),
        "history": env.history.describe(),
    }


def trajectory_record(problem: Problem, env: KernelEnv, *, sample: int, mode: str, stop_reason: str,
                      turns: list[dict[str, Any]], provenance: dict[str, Any], recheck: Any = None,
                      resumed_from_turn: int | None = None, **extra: Any) -> dict[str, Any]:
    """One finished trajectory as stored (`extra`: producer-specific fields, e.g. ``training_step``)."""
    best = env.best_turn()
    return {
        "problem": problem.name, "problem_id": problem.problem_id, "level": problem.level,
        "problem_hash": problem.content_hash, "sample": sample, "mode": mode,
        "turn_budget": env.turn_budget, "stop_reason": stop_reason, "turns": turns,
        "best_turn": best.turn if best else None, "best_reward": best.reward if best else 0.0,
        "recheck": recheck, "resumed_from_turn": resumed_from_turn, **extra,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "provenance": provenance,
    }
