"""verl V1 trainer ``tritongym``: verl's sync trainer plus Dr.Kernel's PRS before the advantage step.

Select it with ``trainer.v1.trainer_mode=tritongym`` (verl's trainer registry, ``register_trainer``;
registered when TransferQueue, which verl's V1 trainer needs, is installed).

PRS (profiling-based rejection sampling, Dr.Kernel arXiv 2602.05885; KernelGYM
``coverage_helper.compute_coverage_rejection_mask``; ``rl-algorithms.md`` §2.4–2.5) drops *turns*
of correct but lazy kernels from the loss: keep ~ Bernoulli(p), p = clip((coverage − 0.3)/0.1, 0, 1)
(``tritongym.evaluator.prs_keep_probability``, recorded per turn by the ``tritongym_kernel`` agent
loop). In verl one row holds a whole multi-turn trajectory, and an estimator or a policy loss sees
no turns, so this trainer does it in the one place that sees both the rows and the turn layout, its
advantage step, in Dr.Kernel's order:

1. draw keep per (trajectory, turn) (``tritongym.rl.prs_sample``; the generator is seeded by
   ``data.seed`` and the global step, so a resumed run draws the same);
2. a dropped turn's tokens leave ``response_mask`` (no gradient, out of the loss's token and
   sequence counts) and its reward is zeroed (Dr.Kernel step 5, "zero rewards of masked turns");
3. verl's own advantage step runs unchanged (KL in reward, rollout correction, the estimator); for
   ``trloo`` the turns come from the recorded layout (`tritongym.integrations.verl.advantages.explicit_turns`),
   so a dropped turn still counts, with reward 0, in its peers' leave-one-out baselines and in its
   trajectory's reward-to-go, as in KernelGYM (grouping by turn index, not by the final mask).

Everything else is ``PPOTrainerSync``. Metrics: ``tritongym/prs_rejected_turns`` (count) and
``tritongym/prs_rejected_fraction`` (of model turns). Where coverage is unmeasured (no GPU profile)
the keep probability is 1 and the step changes nothing.

Group filtering (Dr.Kernel's degenerate-group rejection on last-turn rewards) needs no trainer code:
verl's V1 replay buffer does it with ``algorithm.filter_groups.enable=true
algorithm.filter_groups.metric=tritongym/last_reward`` (the agent loop writes that metric).
"""

from __future__ import annotations

from typing import Any

import torch
import transfer_queue as tq
from tensordict import TensorDict
from torch import Tensor
from verl.trainer.ppo.v1 import PPOTrainerSync, register_trainer
from verl.workers.utils.padding import response_to_nested

from tritongym.integrations.verl.advantages import explicit_turns
from tritongym.integrations.verl.agent_loop import TURN_KEEP_PROBABILITY, TURN_NUMBERS
from tritongym.rl import prs_sample

__all__ = ["KernelPPOTrainer", "prs_turn_drop"]


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
    """``PPOTrainerSync`` with Dr.Kernel's PRS applied per turn before the advantages (module docstring)."""

    def _prs_generator(self) -> torch.Generator:
        seed = self.config.data.get("seed", None)
        return torch.Generator().manual_seed((0 if seed is None else int(seed)) * 1_000_003 + int(self.global_steps))

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        fields = ["response_mask", "rm_scores", TURN_NUMBERS, TURN_KEEP_PROBABILITY]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        numbers = padded[TURN_NUMBERS].long()
        drop, dropped, turns = prs_turn_drop(numbers, padded[TURN_KEEP_PROBABILITY], self._prs_generator())
        metrics["tritongym/prs_rejected_turns"] = float(dropped)
        metrics["tritongym/prs_rejected_fraction"] = dropped / turns if turns else 0.0
        if dropped:
            mask = padded["response_mask"]
            kept = (~drop).to(mask.dtype)
            update = {
                "response_mask": response_to_nested(mask * kept, nested_mask),
                "rm_scores": response_to_nested(padded["rm_scores"] * kept.to(padded["rm_scores"].dtype), nested_mask),
            }
            tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id,
                            fields=TensorDict(update, batch_size=len(batch)))
        with explicit_turns(numbers):
            return super()._compute_advantage(batch, metrics)
