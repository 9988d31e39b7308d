"""verl V1 trainer ``tritongym``: verl's sync trainer plus Dr.Kernel's per-turn masks before the advantages.

Select it with ``trainer.v1.trainer_mode=tritongym`` (verl's trainer registry, ``register_trainer``;
registered when TransferQueue, which verl's V1 trainer needs, is installed).

In verl one row holds a whole multi-turn trajectory, and an estimator or a policy loss sees no
turns, so this trainer does Dr.Kernel's per-turn steps in the one place that sees both the rows and
the turn layout, its advantage step, in the order of KernelGYM's ``RayKernelTrainer.fit``
(``kernel_trainer.py`` @3a84417; ``rl-algorithms.md`` §2.5):

1. meaningful-turn masking (``tritongym.meaningful_turns.enable``, default True; KernelGYM's rollout
   with ``mask_void_turn=True``, ``tritongym.rl.meaningful_turn_mask``): once an earlier turn of a
   trajectory scored above 0, a later turn scoring ≤ 0 gets KernelGYM's ``loss_mask`` 0 — it leaves
   ``response_mask``, its reward is zeroed and it leaves its peers' TRLOO groups;
2. MRS, when enabled (``+tritongym.mrs.enable=True``; ``tritongym.rl.mrs_mask`` on turn rows, on the
   mask step 1 left): a trajectory whose geometric-mean π_old/π_rollout over all its tokens leaves
   [lower, upper] loses every turn, and a turn with one token whose ratio is below the veto
   threshold is dropped (per turn, as KernelGYM does; the ``tritongym_drkernel`` loss, which sees
   only whole rows, drops the trajectory). π_old and π_rollout are verl's ``old_log_probs`` and
   ``rollout_log_probs`` (``rollout.calculate_log_probs=True``);
3. PRS (``tritongym.prs.enable``, default True): keep ~ Bernoulli(p) per (trajectory, turn),
   p = clip((coverage − 0.3)/0.1, 0, 1) (``tritongym.rl.prs_sample``; the generator is seeded by
   ``data.seed`` and the global step, so a resumed run draws the same);
4. a turn dropped by MRS or PRS leaves ``response_mask`` only (no gradient, out of the loss's token
   and sequence counts) and **keeps its reward**: KernelGYM zeroes rewards only where ``loss_mask``
   is 0 (step 1), so a rejected turn still counts with its real reward in its peers' leave-one-out
   baselines and in its trajectory's earlier reward-to-go;
5. verl's own advantage step runs unchanged (KL in reward, rollout correction, the estimator); for
   ``trloo`` the turns come from the recorded layout
   (`tritongym.integrations.verl.advantages.explicit_turns`), so a dropped turn keeps its place and
   a masked one (step 1) leaves its group.

When no model token is left in the batch (every turn masked or rejected), the step writes zero
advantages and skips the actor and critic updates (metric ``tritongym/skipped_steps`` 1) instead of
failing in verl's rollout correction ("response_mask must contain at least one valid token").

Everything else is ``PPOTrainerSync``. Settings: a top-level ``tritongym`` section of verl's
config (Hydra ``+`` overrides; verl ignores it), ``tritongym.meaningful_turns.enable`` (on),
``tritongym.mrs.{enable,lower,upper,veto_threshold}`` (off; bounds 0.999 / 1.001, veto 1e-4 when
on) and ``tritongym.prs.enable`` (on). With MRS here, use a loss without it (``tritongym_ppo``, or
verl's ``vanilla``), not ``tritongym_drkernel``. Metrics: ``tritongym/{not_meaningful,mrs,prs}_turns``
(counts; ``mrs_rejected_turns``, ``prs_rejected_turns``) and their ``…_fraction`` (of model turns).
Where coverage is unmeasured (no GPU profile) the PRS keep probability is 1 and PRS changes nothing.

Group filtering (Dr.Kernel's degenerate-group rejection on last-turn rewards) needs no trainer code:
verl's V1 replay buffer does it with ``algorithm.filter_groups.enable=true
algorithm.filter_groups.metric=tritongym/last_reward`` (the agent loop writes that metric).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from torch import Tensor
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
from verl.workers.utils.padding import response_to_nested

from tritongym.integrations.verl.advantages import explicit_turns
from tritongym.integrations.verl.agent_loop import TURN_KEEP_PROBABILITY, TURN_NUMBERS
from tritongym.rl import geometric_rs_mask, meaningful_turn_mask, prs_sample, rollout_log_ratio

__all__ = ["KernelPPOTrainer", "TurnRejection", "mrs_turn_drop", "not_meaningful_turns", "prs_turn_drop",
           "turn_rewards"]


@dataclass(frozen=True)
class TurnRejection:
    """The ``tritongym`` section of verl's config: which per-turn rejections run before the advantages."""

    mrs: bool = False
    mrs_lower: float = 0.999
    mrs_upper: float = 1.001
    mrs_veto_threshold: float | None = 1e-4
    prs: bool = True
    meaningful_turns: bool = True

    @classmethod
    def from_config(cls, config: Any) -> TurnRejection:
        section = config.get("tritongym", None) or {}
        unknown = set(section) - {"mrs", "prs", "meaningful_turns"}
        mrs, prs = dict(section.get("mrs", None) or {}), dict(section.get("prs", None) or {})
        meaningful = dict(section.get("meaningful_turns", None) or {})
        unknown |= {f"mrs.{k}" for k in set(mrs) - {"enable", "lower", "upper", "veto_threshold"}}
        unknown |= {f"prs.{k}" for k in set(prs) - {"enable"}}
        unknown |= {f"meaningful_turns.{k}" for k in set(meaningful) - {"enable"}}
        if unknown:
            raise ValueError(f"tritongym trainer: unknown settings {sorted(unknown)}; known: tritongym.mrs.enable, "
                             ".lower, .upper, .veto_threshold, tritongym.prs.enable, "
                             "tritongym.meaningful_turns.enable")
        settings = cls(mrs=bool(mrs.get("enable", False)), mrs_lower=float(mrs.get("lower", 0.999)),
                       mrs_upper=float(mrs.get("upper", 1.001)),
                       mrs_veto_threshold=None if mrs.get("veto_threshold", 1e-4) is None
                       else float(mrs.get("veto_threshold", 1e-4)),
                       prs=bool(prs.get("enable", True)),
                       meaningful_turns=bool(meaningful.get("enable", True)))
        if not 0 < settings.mrs_lower <= 1.0 <= settings.mrs_upper:
            raise ValueError(f"tritongym.mrs: expected 0 < lower <= 1 <= upper, got {settings.mrs_lower}, "
                             f"{settings.mrs_upper}")
        loss_mode = config.actor_rollout_ref.actor.policy_loss.get("loss_mode", "vanilla")
        if settings.mrs and loss_mode == "tritongym_drkernel":
            raise ValueError("tritongym.mrs.enable=True rejects per turn before the advantages; the "
                             "tritongym_drkernel loss would reject again per trajectory: use "
                             "actor_rollout_ref.actor.policy_loss.loss_mode=tritongym_ppo")
        return settings


def mrs_turn_drop(old_log_probs: Tensor, rollout_log_probs: Tensor, response_mask: Tensor, turn_numbers: Tensor,
                  settings: TurnRejection) -> Tensor:
    """Dr.Kernel's MRS (``tritongym.rl.mrs_mask`` on turn rows): ``drop [B, L] bool`` of rejected turns' tokens.

    In Dr.Kernel's layout each turn is a row: the geometric bound pools all rows of a trajectory
    (here: one verl row, ``geometric_rs_mask``), the veto acts per row, i.e. per turn (here: a vetoed
    token drops the tokens of its turn). Same decisions as ``mrs_mask`` on the turn rows (a test
    checks it), without building a ``[B·T, L]`` copy of the batch.
    """
    mask = response_mask.bool()
    keep_trajectory = geometric_rs_mask(old_log_probs, rollout_log_probs, mask, lower=settings.mrs_lower,
                                        upper=settings.mrs_upper, clamp_tokens=False)  # [B], as mrs_mask
    drop = (turn_numbers > 0) & ~keep_trajectory[:, None]
    if settings.mrs_veto_threshold is not None:
        delta = rollout_log_ratio(old_log_probs, rollout_log_probs, mask)
        vetoed = mask & (delta < math.log(settings.mrs_veto_threshold))  # tokens far below the rollout's prob
        numbers = turn_numbers.long()
        hit = torch.zeros(numbers.shape[0], int(numbers.max().item()) + 1 if numbers.numel() else 1,
                          dtype=torch.bool)
        hit.scatter_reduce_(1, numbers, vetoed, reduce="amax")  # turn k has a vetoed token
        hit[:, 0] = False  # feedback tokens are never in a turn
        drop |= (numbers > 0) & hit.gather(1, numbers)
    return drop


def prs_turn_drop(turn_numbers: Tensor, keep_probability: Tensor,
                  generator: torch.Generator | None = None) -> tuple[Tensor, int, int]:
    """Draw PRS once per (row, turn) and return the tokens of the dropped turns.

    Args:
        turn_numbers: ``[B, L]`` long, k ≥ 1 on the model tokens of turn k, 0 elsewhere.
        keep_probability: ``[B, L]`` float, each token's turn's keep probability (any value off turns).
        generator: for reproducible draws.

    Returns:
        ``(drop [B, L] bool, dropped_turns, turns)``.
    """
    if turn_numbers.shape != keep_probability.shape or turn_numbers.ndim != 2:
        raise ValueError(f"turn_numbers, keep_probability: expected equal [B, L] shapes, got "
                         f"{tuple(turn_numbers.shape)}, {tuple(keep_probability.shape)}")
    numbers = turn_numbers.long()
    width = int(numbers.max().item()) + 1 if numbers.numel() else 1
    on_turn = numbers > 0
    # Per (row, turn): the probability on its tokens (they all carry the same value), 1 where absent.
    prob = torch.ones(numbers.shape[0], width, dtype=torch.float64)
    prob.scatter_reduce_(1, numbers, torch.where(on_turn, keep_probability.double(), 1.0), reduce="amin")
    present = torch.zeros(numbers.shape[0], width, dtype=torch.bool)
    present.scatter_(1, numbers, on_turn)
    present[:, 0] = False
    keep = torch.ones_like(present)
    keep[present] = prs_sample(prob[present].clamp(0.0, 1.0), generator=generator)
    drop = on_turn & ~keep.gather(1, numbers)
    return drop, int((present & ~keep).sum()), int(present.sum())


def turn_rewards(token_scores: Tensor, turn_numbers: Tensor) -> tuple[Tensor, Tensor]:
    """Per-turn rewards ``[B, T]`` (the sum of the scores on turn k's model tokens) and which turns exist."""
    numbers = turn_numbers.long()
    width = max(int(numbers.max().item()) if numbers.numel() else 0, 1)
    sums = torch.zeros(numbers.shape[0], width + 1, dtype=torch.float64)
    sums.scatter_add_(1, numbers, token_scores.to(torch.float64))
    present = torch.zeros(numbers.shape[0], width + 1, dtype=torch.bool)
    present.scatter_(1, numbers, numbers > 0)
    return sums[:, 1:], present[:, 1:]


def not_meaningful_turns(token_scores: Tensor, turn_numbers: Tensor) -> tuple[Tensor, Tensor]:
    """KernelGYM's ``mask_void_turn`` on verl rows: ``(masked turns [B, T] bool, their tokens [B, L] bool)``.

    A turn is masked when an earlier turn of its trajectory scored above 0 and it scored ≤ 0
    (`tritongym.rl.meaningful_turn_mask`); the rewards are read off the token scores (the agent loop
    puts each turn's reward on its last model token).
    """
    rewards, present = turn_rewards(token_scores, turn_numbers)
    masked = present & ~meaningful_turn_mask(rewards, present)
    numbers = turn_numbers.long()
    padded = torch.cat([torch.zeros_like(masked[:, :1]), masked], dim=1)  # column 0: feedback, never masked
    return masked, padded.gather(1, numbers)


@register_trainer("tritongym")
class KernelPPOTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` with Dr.Kernel's per-turn MRS and PRS before the advantages (module docstring)."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        TurnRejection.from_config(config)  # a bad setting stops the run before any model is loaded
        super().__init__(config, *args, **kwargs)

    def _prs_generator(self) -> torch.Generator:
        seed = self.config.data.get("seed", None)
        return torch.Generator().manual_seed((0 if seed is None else int(seed)) * 1_000_003 + int(self.global_steps))

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        settings = TurnRejection.from_config(self.config)
        self._tritongym_skip_update = False
        fields = ["response_mask", "rm_scores", TURN_NUMBERS, TURN_KEEP_PROBABILITY]
        if settings.mrs:
            fields += ["old_log_probs", "rollout_log_probs"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        numbers = padded[TURN_NUMBERS].long()
        mask = padded["response_mask"]
        scores = padded["rm_scores"]
        turns = int((numbers.amax(dim=-1)).sum()) if numbers.numel() else 0
        # 1. KernelGYM's loss_mask: turns that are not meaningful leave the loss, their groups and their rewards.
        excluded, void = None, torch.zeros_like(numbers, dtype=torch.bool)
        if settings.meaningful_turns:
            excluded, void = not_meaningful_turns(scores, numbers)
            masked = int(excluded.sum())
            metrics["tritongym/not_meaningful_turns"] = float(masked)
            metrics["tritongym/not_meaningful_fraction"] = masked / turns if turns else 0.0
        # 2.-3. MRS, then PRS, on the mask step 1 left; they edit the loss mask only.
        drop = torch.zeros_like(void)
        if settings.mrs:
            if "rollout_log_probs" not in padded.keys():
                raise ValueError("tritongym.mrs needs the rollout's log-probs: set "
                                 "actor_rollout_ref.rollout.calculate_log_probs=True")
            drop = mrs_turn_drop(padded["old_log_probs"], padded["rollout_log_probs"], mask.bool() & ~void,
                                 numbers, settings) & ~void
            rejected = int(_turn_count(numbers, drop))
            metrics["tritongym/mrs_rejected_turns"] = float(rejected)
            metrics["tritongym/mrs_rejected_fraction"] = rejected / turns if turns else 0.0
        if settings.prs:
            prs_drop, _, _ = prs_turn_drop(numbers, padded[TURN_KEEP_PROBABILITY], self._prs_generator())
            prs_drop &= ~(drop | void)  # a turn already out is not counted again
            dropped = int(_turn_count(numbers, prs_drop))
            drop |= prs_drop
            metrics["tritongym/prs_rejected_turns"] = float(dropped)
            metrics["tritongym/prs_rejected_fraction"] = dropped / turns if turns else 0.0
        out = drop | void
        update: dict[str, Tensor] = {}
        if out.any():
            update["response_mask"] = response_to_nested(mask * (~out).to(mask.dtype), nested_mask)
        if void.any():  # 4. only KernelGYM's loss_mask zeroes rewards; MRS/PRS-rejected turns keep theirs
            update["rm_scores"] = response_to_nested(scores * (~void).to(scores.dtype), nested_mask)
        left = bool((mask.bool() & ~out).any())
        metrics["tritongym/skipped_steps"] = 0.0 if left else 1.0
        if not left:  # nothing to learn from: zero advantages, and the updates are skipped
            self._tritongym_skip_update = True
            zeros = torch.zeros_like(scores, dtype=torch.float32)
            update.update({"advantages": response_to_nested(zeros, nested_mask),
                           "returns": response_to_nested(zeros, nested_mask)})
        if update:
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                            fields=TensorDict(update, batch_size=len(batch)))
        if not left:
            return batch
        with explicit_turns(numbers, excluded):
            return super()._compute_advantage(batch, metrics)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        if getattr(self, "_tritongym_skip_update", False):
            return batch  # every turn of the step was masked or rejected (tritongym/skipped_steps)
        return super()._update_actor(batch, metrics)

    def _update_critic(self, batch: Any, metrics: dict) -> Any:
        if getattr(self, "_tritongym_skip_update", False):
            return batch
        return super()._update_critic(batch, metrics)


def _turn_count(turn_numbers: Tensor, token_drop: Tensor) -> int:
    """How many (trajectory, turn) pairs have a dropped token."""
    marked = torch.where(token_drop, turn_numbers, 0)
    width = int(turn_numbers.max().item()) + 1 if turn_numbers.numel() else 1
    hit = torch.zeros(turn_numbers.shape[0], width, dtype=torch.bool)
    hit.scatter_(1, marked, token_drop)
    return int(hit[:, 1:].sum())
