"""verl V1 trainer ``tritongym``: verl's sync trainer plus Dr.Kernel's per-turn MRS and PRS before the advantages.

Select it with ``trainer.v1.trainer_mode=tritongym`` (verl's trainer registry, ``register_trainer``;
registered when TransferQueue, which verl's V1 trainer needs, is installed).

PRS (profiling-based rejection sampling, Dr.Kernel arXiv 2602.05885; KernelGYM
``coverage_helper.compute_coverage_rejection_mask``; ``rl-algorithms.md`` §2.4–2.5) drops *turns*
of correct but lazy kernels from the loss: keep ~ Bernoulli(p), p = clip((coverage − 0.3)/0.1, 0, 1)
(``tritongym.evaluator.prs_keep_probability``, recorded per turn by the ``tritongym_kernel`` agent
loop). In verl one row holds a whole multi-turn trajectory, and an estimator or a policy loss sees
no turns, so this trainer does it in the one place that sees both the rows and the turn layout, its
advantage step, in Dr.Kernel's order (``rl-algorithms.md`` §2.5):

1. MRS, when enabled (``+tritongym.mrs.enable=True``; Dr.Kernel's mismatch rejection,
   ``tritongym.rl.mrs_mask`` on turn rows): a trajectory whose geometric-mean π_old/π_rollout over
   all its tokens leaves [lower, upper] loses every turn, and a turn with one token whose ratio is
   below the veto threshold is dropped (per turn, as Dr.Kernel does; the ``tritongym_drkernel`` loss,
   which sees only whole rows, drops the trajectory). π_old and π_rollout are verl's
   ``old_log_probs`` and ``rollout_log_probs`` (``rollout.calculate_log_probs=True``);
2. PRS (``tritongym.prs.enable``, default True): keep ~ Bernoulli(p) per (trajectory, turn)
   (``tritongym.rl.prs_sample``; the generator is seeded by ``data.seed`` and the global step, so a
   resumed run draws the same);
3. a dropped turn's tokens leave ``response_mask`` (no gradient, out of the loss's token and
   sequence counts) and its reward is zeroed (Dr.Kernel step 5, "zero rewards of masked turns");
4. verl's own advantage step runs unchanged (KL in reward, rollout correction, the estimator); for
   ``trloo`` the turns come from the recorded layout (`tritongym.integrations.verl.advantages.explicit_turns`),
   so a dropped turn still counts, with reward 0, in its peers' leave-one-out baselines and in its
   trajectory's reward-to-go, as in KernelGYM (grouping by turn index, not by the final mask).

Everything else is ``PPOTrainerSync``. Settings: a top-level ``tritongym`` section of verl's
config (Hydra ``+`` overrides; verl ignores it), ``tritongym.mrs.{enable,lower,upper,veto_threshold}``
(off; bounds 0.999 / 1.001, veto 1e-4 when on) and ``tritongym.prs.enable`` (on). With MRS here,
use a loss without it (``tritongym_ppo``, or verl's ``vanilla``), not ``tritongym_drkernel``.
Metrics: ``tritongym/{mrs,prs}_rejected_turns`` (counts) and ``…_fraction`` (of model turns). Where
coverage is unmeasured (no GPU profile) the PRS keep probability is 1 and PRS changes nothing.

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
from tritongym.rl import geometric_rs_mask, prs_sample, rollout_log_ratio

__all__ = ["KernelPPOTrainer", "TurnRejection", "mrs_turn_drop", "prs_turn_drop"]


@dataclass(frozen=True)
class TurnRejection:
    """The ``tritongym`` section of verl's config: which per-turn rejections run before the advantages."""

    mrs: bool = False
    mrs_lower: float = 0.999
    mrs_upper: float = 1.001
    mrs_veto_threshold: float | None = 1e-4
    prs: bool = True

    @classmethod
    def from_config(cls, config: Any) -> TurnRejection:
        section = config.get("tritongym", None) or {}
        unknown = set(section) - {"mrs", "prs"}
        mrs, prs = dict(section.get("mrs", None) or {}), dict(section.get("prs", None) or {})
        unknown |= {f"mrs.{k}" for k in set(mrs) - {"enable", "lower", "upper", "veto_threshold"}}
        unknown |= {f"prs.{k}" for k in set(prs) - {"enable"}}
        if unknown:
            raise ValueError(f"tritongym trainer: unknown settings {sorted(unknown)}; known: tritongym.mrs.enable, "
                             ".lower, .upper, .veto_threshold, tritongym.prs.enable")
        settings = cls(mrs=bool(mrs.get("enable", False)), mrs_lower=float(mrs.get("lower", 0.999)),
                       mrs_upper=float(mrs.get("upper", 1.001)),
                       mrs_veto_threshold=None if mrs.get("veto_threshold", 1e-4) is None
                       else float(mrs.get("veto_threshold", 1e-4)),
                       prs=bool(prs.get("enable", True)))
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
                                        upper=settings.mrs_upper)  # [B]
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
        fields = ["response_mask", "rm_scores", TURN_NUMBERS, TURN_KEEP_PROBABILITY]
        if settings.mrs:
            fields += ["old_log_probs", "rollout_log_probs"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        numbers = padded[TURN_NUMBERS].long()
        mask = padded["response_mask"]
        turns = int((numbers.amax(dim=-1)).sum()) if numbers.numel() else 0
        drop = torch.zeros_like(numbers, dtype=torch.bool)
        if settings.mrs:
            if "rollout_log_probs" not in padded.keys():
                raise ValueError("tritongym.mrs needs the rollout's log-probs: set "
                                 "actor_rollout_ref.rollout.calculate_log_probs=True")
            drop = mrs_turn_drop(padded["old_log_probs"], padded["rollout_log_probs"], mask, numbers, settings)
            rejected = int(_turn_count(numbers, drop))
            metrics["tritongym/mrs_rejected_turns"] = float(rejected)
            metrics["tritongym/mrs_rejected_fraction"] = rejected / turns if turns else 0.0
        if settings.prs:
            prs_drop, dropped, _ = prs_turn_drop(numbers, padded[TURN_KEEP_PROBABILITY], self._prs_generator())
            # PRS runs on the mask MRS left: a turn MRS already dropped is not counted again.
            dropped = int(_turn_count(numbers, prs_drop & ~drop))
            drop |= prs_drop
            metrics["tritongym/prs_rejected_turns"] = float(dropped)
            metrics["tritongym/prs_rejected_fraction"] = dropped / turns if turns else 0.0
        if drop.any():
            kept = (~drop).to(mask.dtype)
            update = {
                "response_mask": response_to_nested(mask * kept, nested_mask),
                "rm_scores": response_to_nested(padded["rm_scores"] * kept.to(padded["rm_scores"].dtype), nested_mask),
            }
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                            fields=TensorDict(update, batch_size=len(batch)))
        with explicit_turns(numbers):
            return super()._compute_advantage(batch, metrics)


def _turn_count(turn_numbers: Tensor, token_drop: Tensor) -> int:
    """How many (trajectory, turn) pairs have a dropped token."""
    marked = torch.where(token_drop, turn_numbers, 0)
    width = int(turn_numbers.max().item()) + 1 if turn_numbers.numel() else 1
    hit = torch.zeros(turn_numbers.shape[0], width, dtype=torch.bool)
    hit.scatter_(1, marked, token_drop)
    return int(hit[:, 1:].sum())
