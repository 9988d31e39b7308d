"""verl policy losses ``tritongym_drkernel`` (PPO dual clip with Dr.Kernel's mismatch rejection, MRS)
and ``tritongym_ppo`` (the same without MRS, for the ``tritongym`` trainer mode, which applies MRS
per turn before the advantages).

Select one with ``actor_rollout_ref.actor.policy_loss.loss_mode=tritongym_drkernel``. It runs in
verl's actor workers (``verl/workers/utils/losses.py::ppo_loss`` calls it with ``old_log_prob``,
``log_prob``, ``advantages``, ``response_mask``, ``loss_agg_mode``, the ``ActorConfig`` and
``rollout_is_weights``) and composes ``tritongym.rl``:

* the token loss is ``tritongym.rl.ppo_clip_token_loss`` with verl's own clip keys
  (``actor.clip_ratio_low`` / ``clip_ratio_high``, falling back to ``clip_ratio``, and the dual clip
  ``actor.clip_ratio_c``);
* the loss mask is cut by ``tritongym.rl.mrs_mask`` (Dr.Kernel MRS: a row is dropped when the
  geometric mean of π_old/π_rollout over its tokens leaves [0.999, 1.001], or when any of its tokens
  has π_old/π_rollout < 1e-4); in verl's layout a row is one whole multi-turn trajectory;
* the reduction is verl's ``agg_loss`` with ``config.global_batch_info`` (data-parallel and
  micro-batch invariant), in ``actor.loss_agg_mode``.

Why the IS weights: verl 0.9.1 hands a policy loss no rollout log-probs, only
``rollout_is_weights``. With ``algorithm.rollout_correction.rollout_is=token`` and a threshold no
weight reaches (``rollout_is_threshold=1e9``; verl clamps log-ratios to ±20 first, e^20 ≈ 4.9e8),
each weight is exactly exp(log π_old − log π_rollout), which is what MRS needs. As in Dr.Kernel
(``ROLLOUT_IS=null``) the weights are then *not* multiplied into the loss: MRS only masks.
Without weights the loss raises with the settings to add.

Options: verl's ``PolicyLossConfig`` rejects unknown keys, so MRS bounds cannot travel in verl's
config. ``tritongym_drkernel`` uses Dr.Kernel's recipe values; other values (or TRM's sample
criteria, ``tritongym.rl.trm_mask``) are one call away in your own plug-in::

    register_policy_loss("my_loss")(make_policy_loss(mrs=MRSOptions(lower=0.99, upper=1.01)))

Not expressible here: DVP (``tritongym.rl.dvp_log_probs`` needs the actor's logits; verl's loss
interface passes log-probs only) and per-turn masking (PRS, MRS's per-turn veto: the ``tritongym``
trainer mode, ``tritongym.integrations.verl.trainer``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from verl.trainer.ppo.core_algos import agg_loss, register_policy_loss

from tritongym.integrations.verl import lr_decay
from tritongym.rl import apply_row_mask, mrs_mask, ppo_clip_fractions, ppo_clip_token_loss, trm_mask

__all__ = ["MRSOptions", "TRMOptions", "drkernel_policy_loss", "make_policy_loss", "ppo_policy_loss"]

NEEDS_WEIGHTS = (
    "needs π_old/π_rollout per token, which verl 0.9.1 passes to a policy loss only as rollout IS "
    "weights: set algorithm.rollout_correction.rollout_is=token, "
    "algorithm.rollout_correction.rollout_is_threshold=1e9 (no weight truncated) and keep "
    "actor_rollout_ref.rollout.calculate_log_probs=true (the default)"
)


@dataclass(frozen=True)
class MRSOptions:
    """Dr.Kernel MRS bounds (``tritongym.rl.mrs_mask``; defaults from the 8B/14B recipe scripts).

    Attributes:
        lower, upper: bounds of the per-trajectory geometric mean of π_old/π_rollout.
        veto_threshold: a row with any token ratio below it is dropped; None disables the veto.
    """

    lower: float = 0.999
    upper: float = 1.001
    veto_threshold: float | None = 1e-4

    def __post_init__(self) -> None:
        if not 0 < self.lower <= 1.0 <= self.upper:
            raise ValueError(f"MRSOptions: expected 0 < lower <= 1 <= upper, got {self.lower}, {self.upper}")
        if self.veto_threshold is not None and not 0 < self.veto_threshold < 1:
            raise ValueError(
                f"MRSOptions.veto_threshold: expected a value in (0, 1) or None, got {self.veto_threshold}")


@dataclass(frozen=True)
class TRMOptions:
    """TRM sample criteria on π_old vs π_rollout (``tritongym.rl.trm_mask``); None disables one."""

    max_k2: float | None = 0.05
    mean_k3: float | None = 0.001


def _log_ratio_from_weights(rollout_is_weights: Tensor | None, mask: Tensor) -> Tensor:
    """log(π_old/π_rollout) per token from verl's token IS weights (0 on masked tokens)."""
    if rollout_is_weights is None:
        raise ValueError(f"policy loss tritongym_drkernel {NEEDS_WEIGHTS}")
    weights = rollout_is_weights.detach().to(torch.float64)
    if bool(((weights <= 0) & mask).any()):
        raise ValueError(
            "policy loss tritongym_drkernel: rollout_is_weights has zeros on valid tokens (an IcePop "
            f"'lo_hi' threshold or a rejection mask zeroed them), so the log-ratios are lost; it {NEEDS_WEIGHTS}"
        )
    return torch.where(mask, weights.clamp_min(1e-300).log(), 0.0)  # Δ = log π_old − log π_rollout


def make_policy_loss(
    *, mrs: MRSOptions | None = MRSOptions(), trm: TRMOptions | None = None
) -> Callable[..., tuple[Tensor, dict[str, Any]]]:
    """A verl policy-loss function (the ``register_policy_loss`` call shape) with these masks.

    Args:
        mrs: Dr.Kernel MRS bounds, or None for no MRS.
        trm: TRM sample criteria on π_old vs π_rollout, or None for no TRM.

    Returns:
        ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config,
        rollout_is_weights) -> (loss, metrics)``; register it with verl's ``register_policy_loss``.
    """

    def policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        if config is None:
            raise ValueError("policy loss tritongym_drkernel: verl passes the actor config; got None")
        clip = config.clip_ratio
        clip_low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
        clip_high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
        dual_clip = config.get("clip_ratio_c", 3.0)
        mask = response_mask.bool()
        metrics: dict[str, Any] = {}
        if mrs is not None or trm is not None:
            delta = _log_ratio_from_weights(rollout_is_weights, mask)  # [B, L]
            zeros = torch.zeros_like(delta)
            keep = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)
            if mrs is not None:
                kept = mrs_mask(delta, zeros, mask, lower=mrs.lower, upper=mrs.upper,
                                veto_threshold=mrs.veto_threshold)
                metrics["tritongym/mrs_keep_fraction"] = kept.double().mean().item()
                keep = keep & kept
            if trm is not None:
                kept = trm_mask(delta, zeros, mask, max_k2=trm.max_k2, mean_k3=trm.mean_k3)
                metrics["tritongym/trm_keep_fraction"] = kept.double().mean().item()
                keep = keep & kept
            mask = apply_row_mask(mask, keep)
        options = {"clip_low": clip_low, "clip_high": clip_high, "dual_clip": dual_clip}
        token_loss = ppo_clip_token_loss(log_prob, old_log_prob, advantages, mask, **options)  # ℓ [B, L]
        loss = agg_loss(loss_mat=token_loss, loss_mask=mask, loss_agg_mode=loss_agg_mode, **config.global_batch_info)
        fractions = ppo_clip_fractions(log_prob.detach(), old_log_prob, advantages, mask, **options)
        metrics["actor/ppo_kl"] = fractions.pop("rl/ppo_kl").item()  # verl's name for the same k1 estimate
        metrics.update({f"tritongym/{name.split('/')[-1]}": value.item() for name, value in fractions.items()})
        metrics.update(lr_decay.record(config.global_batch_info))
        return loss, metrics

    return policy_loss


drkernel_policy_loss = register_policy_loss("tritongym_drkernel")(make_policy_loss())
# The same PPO dual clip without MRS: for the ``tritongym`` trainer mode, which rejects per turn
# before the advantages (tritongym.integrations.verl.trainer); the LR decay hook records here too.
ppo_policy_loss = register_policy_loss("tritongym_ppo")(make_policy_loss(mrs=None))
