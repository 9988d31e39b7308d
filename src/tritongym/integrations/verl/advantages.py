"""verl advantage estimator ``trloo``, registered in verl's own registry (``register_adv_est``).

Select it with ``algorithm.adv_estimator=trloo``.

* ``trloo`` — Dr.Kernel's turn-level leave-one-out advantage (``tritongym.rl.trloo_advantages``)
  on verl's multi-turn layout: one row per trajectory, the model's turns are the maximal runs of
  ``response_mask == 1`` (environment feedback between them is masked 0, as verl's agent loops
  emit it), and each turn's reward is the sum of ``token_level_rewards`` from its first token up to
  the next turn (the ``tritongym_kernel`` agent loop places it on the turn's last token). Trajectories
  of one prompt share verl's ``uid``. The discount over turns is ``algorithm.gamma`` (verl's default
  1.0, the Dr.Kernel setting). Each turn's advantage and reward-to-go are broadcast to its model
  tokens; feedback tokens get 0.

Not registered: a ``grpo_loo`` (one outcome reward per trajectory, leave-one-out baseline). verl's
own ``rloo`` is exactly that (``tritongym.rl.rloo_advantages``, a group of one included: A = R);
``tests/integrations/test_verl_losses.py`` checks the two agree, so use ``algorithm.adv_estimator=rloo``.

Turn layout: verl hands an estimator only ``token_level_rewards``, ``response_mask`` and ``uid``, so by
default the turns are read off the mask. A step that masks a whole turn out of the loss (PRS in the
``tritongym`` trainer, ``trainer``) would then make that turn vanish and renumber the turns after it,
moving them into other peer groups; Dr.Kernel keeps such a turn (with its reward) in its peers'
baselines. The trainer therefore passes the turns explicitly for the duration of its advantage step
(`explicit_turns`): ``[n, L]`` turn numbers, 1-based on the model's tokens and 0 elsewhere, and the
turns that leave the groups altogether (KernelGYM's ``loss_mask`` 0, meaningful-turn masking).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np
import torch
from torch import Tensor
from verl.trainer.ppo.core_algos import register_adv_est

from tritongym.rl import trloo_advantages, turn_returns

__all__ = ["explicit_turns", "split_turns", "trloo_advantage_return", "turn_numbers"]

_explicit_turns: ContextVar[tuple[Tensor, Tensor | None] | None] = ContextVar("tritongym_verl_turns", default=None)


@contextmanager
def explicit_turns(turn_numbers: Tensor, excluded: Tensor | None = None) -> Iterator[None]:
    """Within this block ``trloo`` takes the turns from ``turn_numbers`` instead of the mask.

    Args:
        turn_numbers: ``[n, L]`` int; k ≥ 1 on the model tokens of turn k, 0 on feedback and padding.
        excluded: optional ``[n, T] bool``, True at (row, turn k−1) for turns that leave the TRLOO
            groups altogether (KernelGYM's ``loss_mask`` 0: meaningful-turn masking); they keep their
            number, so later turns are not renumbered. Turns dropped by MRS or PRS are *not* excluded:
            KernelGYM keeps them, with their rewards, in their peers' baselines.
    """
    token = _explicit_turns.set((turn_numbers, excluded))
    try:
        yield
    finally:
        _explicit_turns.reset(token)


def turn_numbers(response_mask: Tensor) -> Tensor:
    """``[B, L]`` long: k on the tokens of the k-th run of model tokens (k ≥ 1), 0 elsewhere."""
    mask = response_mask.bool()
    previous = torch.zeros_like(mask)
    previous[:, 1:] = mask[:, :-1]
    starts = mask & ~previous  # first token of each run of model tokens
    return torch.where(mask, starts.long().cumsum(-1), 0)


def split_turns(token_level_rewards: Tensor, response_mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Per-turn rewards from verl's token layout.

    Returns:
        ``(rewards [n, T], turn_mask [n, T] bool, turn_of_token [n, L] long)``; ``turn_of_token`` is
        the index of the turn a position belongs to (feedback tokens belong to the turn before
        them), −1 before the first model token.
    """
    if token_level_rewards.shape != response_mask.shape or token_level_rewards.ndim != 2:
        raise ValueError(
            f"token_level_rewards, response_mask: expected equal [n, L] shapes, got "
            f"{tuple(token_level_rewards.shape)}, {tuple(response_mask.shape)}"
        )
    mask = response_mask.bool()
    explicit = _explicit_turns.get()
    numbers, excluded = explicit if explicit is not None else (None, None)
    if numbers is None:
        numbers = turn_numbers(mask)
    elif numbers.shape != mask.shape:
        raise ValueError(f"explicit turns: expected shape {tuple(mask.shape)}, got {tuple(numbers.shape)}")
    numbers = numbers.to(device=mask.device, dtype=torch.long)
    # Feedback after turn k belongs to turn k; −1 before the first model token. An explicitly numbered
    # turn keeps its number even when the mask has dropped its tokens.
    turn_of_token = torch.cummax(numbers, dim=-1).values - 1 if numbers.numel() else numbers - 1
    num_turns = numbers.amax(dim=-1) if numbers.shape[-1] else numbers.new_zeros(mask.shape[0])
    width = max(int(num_turns.max().item()) if mask.numel() else 0, 1)
    rewards = torch.zeros(mask.shape[0], width, dtype=torch.float64, device=mask.device)
    counted = turn_of_token >= 0
    rewards.scatter_add_(
        1, turn_of_token.clamp_min(0), torch.where(counted, token_level_rewards.to(torch.float64), 0.0)
    )
    turn_mask = torch.arange(width, device=mask.device)[None, :] < num_turns[:, None]
    if excluded is not None:
        if excluded.shape[0] != mask.shape[0]:
            raise ValueError(f"explicit turns: excluded has {excluded.shape[0]} rows, expected {mask.shape[0]}")
        out = torch.zeros_like(turn_mask)
        cols = min(width, excluded.shape[1])
        out[:, :cols] = excluded[:, :cols].to(device=mask.device, dtype=torch.bool)
        turn_mask = turn_mask & ~out
    return rewards, turn_mask, turn_of_token


def _group_ids(index: Any, n: int) -> Tensor:
    if index is None:
        return torch.arange(n)  # no uid: every trajectory is its own group (baseline 0)
    _, inverse = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    return torch.as_tensor(inverse.reshape(-1), dtype=torch.long)


@register_adv_est("trloo")
def trloo_advantage_return(
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[Tensor, Tensor]:
    """verl estimator ``trloo``: ``tritongym.rl.trloo_advantages`` per turn, broadcast to tokens."""
    gamma = float(getattr(config, "gamma", 1.0) if config is not None else 1.0)
    rewards, turn_mask, turn_of_token = split_turns(token_level_rewards, response_mask)
    groups = _group_ids(index, rewards.shape[0])
    advantages = trloo_advantages(rewards, turn_mask, groups, gamma=gamma)
    returns = turn_returns(rewards, turn_mask, gamma)
    mask = response_mask.bool()
    gather_at = turn_of_token.clamp_min(0)
    token_adv = torch.where(mask, advantages.gather(1, gather_at), 0.0)
    token_ret = torch.where(mask, returns.to(torch.float64).gather(1, gather_at), 0.0)
    dtype = token_level_rewards.dtype
    return token_adv.to(dtype), token_ret.to(dtype)
