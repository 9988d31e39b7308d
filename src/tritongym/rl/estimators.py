"""Advantage estimators behind one call shape: ``compute_advantages(name, AdvantageInputs, **options)``.

Family: plumbing over ``advantages.py`` and ``otb.py``. Every registered estimator takes the same
``AdvantageInputs`` dataclass and declares the fields it needs (``requires``), so a trainer
adapter never branches on estimator names (the lesson from verl's ``compute_advantage``, style
guide Part 1 §6). The output level differs by estimator and is stated in each entry:

=========================  ==============================================  ===========
name                       requires                                        returns
=========================  ==============================================  ===========
``grpo``, ``dr_grpo``,     scores, group_ids                               ``[n]``
``rloo``
``trloo``, ``turn_grpo``   turn_rewards, turn_mask, group_ids              ``[n, T]``
``optimal_token_baseline`` token_rewards, response_mask, group_ids,        ``[n, L]``
                           log_probs_old, sum_pi_squared
=========================  ==============================================  ===========

Plug-ins register with ``ADVANTAGE_ESTIMATORS.register("name", requires=(...))`` on a function
``fn(inputs: AdvantageInputs, **options) -> Tensor``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from torch import Tensor

from .advantages import (
    dr_grpo_advantages,
    grpo_advantages,
    rloo_advantages,
    trloo_advantages,
    turn_grpo_advantages,
)
from .otb import otb_advantages
from .registry import ADVANTAGE_ESTIMATORS, AdvantageEstimator

__all__ = ["AdvantageInputs", "compute_advantages"]


@dataclass(frozen=True)
class AdvantageInputs:
    """Everything an advantage estimator may need; unset fields are None.

    Attributes:
        group_ids: ``[n] int`` prompt-group ids (not necessarily adjacent).
        scores: ``[n] float`` one outcome reward per sequence.
        turn_rewards: ``[n, T] float`` per-turn rewards.
        turn_mask: ``[n, T] bool`` turns that exist.
        token_rewards: ``[n, L] float`` token-level rewards (outcome on the last valid token).
        response_mask: ``[n, L] bool`` response mask.
        log_probs_old: ``[n, L] float`` trainer log-probs of the sampled tokens.
        sum_pi_squared: ``[n, L] float`` Σπ² from the same trainer logits.
        rollout_is_weights: ``[n, L] float`` truncated IS weights (OTB's IS-aware W).
    """

    group_ids: Tensor
    scores: Tensor | None = None
    turn_rewards: Tensor | None = None
    turn_mask: Tensor | None = None
    token_rewards: Tensor | None = None
    response_mask: Tensor | None = None
    log_probs_old: Tensor | None = None
    sum_pi_squared: Tensor | None = None
    rollout_is_weights: Tensor | None = None


FIELD_NAMES = frozenset(f.name for f in fields(AdvantageInputs))


@ADVANTAGE_ESTIMATORS.register(AdvantageEstimator.GRPO, requires=("scores", "group_ids"))
def _grpo(inputs: AdvantageInputs, **options: float | bool) -> Tensor:
    return grpo_advantages(inputs.scores, inputs.group_ids, **options)  # type: ignore[arg-type]


@ADVANTAGE_ESTIMATORS.register(AdvantageEstimator.DR_GRPO, requires=("scores", "group_ids"))
def _dr_grpo(inputs: AdvantageInputs) -> Tensor:
    return dr_grpo_advantages(inputs.scores, inputs.group_ids)  # type: ignore[arg-type]


@ADVANTAGE_ESTIMATORS.register(AdvantageEstimator.RLOO, requires=("scores", "group_ids"))
def _rloo(inputs: AdvantageInputs) -> Tensor:
    return rloo_advantages(inputs.scores, inputs.group_ids)  # type: ignore[arg-type]


@ADVANTAGE_ESTIMATORS.register(AdvantageEstimator.TRLOO, requires=("turn_rewards", "turn_mask", "group_ids"))
def _trloo(inputs: AdvantageInputs, gamma: float = 1.0) -> Tensor:
    return trloo_advantages(inputs.turn_rewards, inputs.turn_mask, inputs.group_ids, gamma)  # type: ignore[arg-type]


@ADVANTAGE_ESTIMATORS.register(
    AdvantageEstimator.TURN_GRPO, requires=("turn_rewards", "turn_mask", "group_ids")
)
def _turn_grpo(inputs: AdvantageInputs, gamma: float = 1.0) -> Tensor:
    return turn_grpo_advantages(inputs.turn_rewards, inputs.turn_mask, inputs.group_ids, gamma)  # type: ignore[arg-type]


@ADVANTAGE_ESTIMATORS.register(
    AdvantageEstimator.OTB,
    requires=("token_rewards", "response_mask", "group_ids", "log_probs_old", "sum_pi_squared"),
)
def _otb(inputs: AdvantageInputs, **options: float | bool) -> Tensor:
    return otb_advantages(
        inputs.token_rewards,  # type: ignore[arg-type]
        inputs.response_mask,  # type: ignore[arg-type]
        inputs.group_ids,
        inputs.log_probs_old,  # type: ignore[arg-type]
        inputs.sum_pi_squared,  # type: ignore[arg-type]
        rollout_is_weights=inputs.rollout_is_weights,
        **options,  # type: ignore[arg-type]
    )


def compute_advantages(name: str | AdvantageEstimator, inputs: AdvantageInputs, **options: object) -> Tensor:
    """Run the advantage estimator registered as ``name`` after checking its required inputs.

    Args:
        name: a ``ADVANTAGE_ESTIMATORS`` name (see the module table) or a plug-in's.
        inputs: ``AdvantageInputs``.
        options: estimator keywords (``gamma`` for TRLOO, ``leave_one_out`` for OTB, ...).

    Returns:
        The estimator's advantages (shape per the module table).
    """
    entry = ADVANTAGE_ESTIMATORS.entry(name)
    missing = sorted(f for f in entry.requires if f in FIELD_NAMES and getattr(inputs, f) is None)
    if missing:
        raise ValueError(
            f"advantage estimator {entry.name!r}: expected inputs {sorted(entry.requires)}, missing {missing}"
        )
    return entry.fn(inputs, **options)
