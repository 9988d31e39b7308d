"""Reward from a verdict: Dr.Kernel's profiling-based reward (PR), configurable.

``reward = correct_weight·1[ok] + speedup_weight·min(speedup, speedup_cap) + coverage_weight·coverage``
for a result whose status is `ok`, and 0 for every other status (Dr.Kernel, arXiv 2602.05885,
§4 and `reward_client.py::calculate_reward_speedup`; the recipe uses weights 0.5/0.5/0.5 and a
cap of 3). A term whose measurement is unavailable (no GPU: speedup and coverage are null)
contributes 0, so on a CPU an `ok` verdict earns exactly `correct_weight`; so does a speedup from
timing marked not meaningful (the CPU protocol-test mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tritongym.errors import OptionsError
from tritongym.evaluator.result import EvalResult, Status


@dataclass(frozen=True)
class RewardConfig:
    """Weights of the reward terms.

    Attributes:
        correct_weight: reward for an `ok` verdict (Dr.Kernel ``init_correct_weight`` 0.5).
        speedup_weight: weight of the clipped speedup (``init_performance_weight`` 0.5).
        speedup_cap: speedups above this are clipped (Dr.Kernel 3.0); caps the payoff of any
            timing fluke or hack.
        coverage_weight: weight of the profiler coverage of the candidate's own kernels (PR,
            0.5 in the Dr.Kernel recipe); 0 turns PR off.
    """

    correct_weight: float = 0.5
    speedup_weight: float = 0.5
    speedup_cap: float = 3.0
    coverage_weight: float = 0.5

    def __post_init__(self) -> None:
        for name in ("correct_weight", "speedup_weight", "speedup_cap", "coverage_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise OptionsError(f"RewardConfig.{name} must be a finite number >= 0, got {value!r}")


def compute_reward(result: EvalResult, config: RewardConfig | None = None) -> float:
    """The reward of `result` under `config` (default: Dr.Kernel's weights)."""
    config = config or RewardConfig()
    if result.status != Status.OK:
        return 0.0
    reward = config.correct_weight
    timing_counts = result.timing is None or result.timing.meaningful
    if timing_counts and result.speedup is not None and math.isfinite(result.speedup):
        reward += config.speedup_weight * min(max(result.speedup, 0.0), config.speedup_cap)
    if result.coverage is not None and math.isfinite(result.coverage):
        reward += config.coverage_weight * min(max(result.coverage, 0.0), 1.0)
    return float(reward)


def prs_keep_probability(result: EvalResult, threshold: float = 0.3, factor: float = 0.1) -> float | None:
    """Dr.Kernel's profiling-based rejection sampling (PRS): the keep probability of a turn.

    ``p = clip((coverage − threshold) / factor, 0, 1)`` for a correct turn (threshold 0.3 and
    factor 0.1 in the Dr.Kernel recipe; ``factor = 0`` is a hard cut at ``coverage ≥ threshold``),
    and 1 for a turn that is not correct (PRS targets lazy *correct* kernels only).
    Returns None when the turn is correct but its coverage is unknown (no GPU): the caller decides,
    and should not pretend it was measured. Trainers sample ``keep ~ Bernoulli(p)``; the tensor
    version is `tritongym.rl.prs_keep_probability`.
    """
    if result.status != Status.OK:
        return 1.0
    if result.coverage is None:
        return None
    if factor == 0:
        return 1.0 if result.coverage >= threshold else 0.0
    return float(min(max((result.coverage - threshold) / factor, 0.0), 1.0))
