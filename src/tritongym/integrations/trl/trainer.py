"""TRL's ``GRPOTrainer`` with Dr.Kernel's turn-level advantages, and two callbacks.

`TRLOOGRPOTrainer` is the smallest hook TRL 1.16 allows (it has no advantage registry): it lets
``GRPOTrainer._generate_and_score_completions`` run unchanged (generation through the
`KernelRollout`, rewards, TRL's own logging), then replaces the batch's sequence-level
advantages with per-token ones:

    A[i,k] = trloo_advantages(turn_rewards, turn_mask, group, γ)   per turn k (tritongym.rl, docs/rl.md)
    advantage of token t of row i = A[i,k] for t in turn k's span, 0 on feedback tokens

where a group is a run of ``num_generations`` rows (TRL's layout) and the baseline of a turn is the
mean reward-to-go of the other trajectories of the prompt that reached it. TRL's loss accepts
``[B, T]`` advantages as they are. Before the advantages, in the order of KernelGYM's ``fit()``
(@3a84417), as the verl plug-in's ``tritongym`` trainer does:

1. meaningful-turn masking (``meaningful_turns=True``; KernelGYM's rollout with
   ``mask_void_turn=True``, ``tritongym.rl.meaningful_turn_mask``): a turn scoring ≤ 0 after an
   earlier turn of its trajectory scored > 0 leaves the loss, its reward is zeroed and it leaves
   its peers' baselines;
2. PRS (Dr.Kernel's profiling-based rejection sampling): each turn is kept with its keep
   probability (``turn_keep_prob`` from the rollout, 1 when coverage is unmeasured, i.e. on a CPU);
   a dropped turn's tokens leave the loss mask and it **keeps its reward** in its peers' baselines
   and its trajectory's reward-to-go (KernelGYM zeroes rewards only where step 1 masked);
3. the group filter (``group_filter_std``): KernelGYM's ``PPOBatchFilter`` on the last-turn rewards
   as step 1 left them (unbiased std of groups of two or more, < the threshold → out).

Every collective (gather, broadcast) runs on every process whatever the local masks are, so
processes that drop turns and processes that do not stay in step.

DVP (dynamic vocabulary pruning, arXiv 2512.23087; ``tritongym.rl.dvp_log_probs``) with
``dvp_alpha=α``: the rollout samples with min-p α (``GRPOConfig(min_p=α)``, checked), and every
log-prob the loss sees is the pruned policy's, log π_S(y) = z_y − logsumexp over {v : z_v ≥ max z +
log α} (z = logits / temperature): the trainer's fused LM-head forward is wrapped so that, when
TRL asks for per-token log-probs, they come from the model's own logits through
``dvp_log_probs``; a completion token outside the pruned policy's set (or, with a KL term, outside
the reference's) at scoring time leaves the loss mask (``tritongym.rl.dvp``: AND ``in_safe`` into the
mask; its log-prob is only a finite placeholder). This materialises the
``[B, L, V]`` logits that TRL's fused head avoids: fine at TRL's small scale, not for long contexts
with large vocabularies.

`ResponseLengthLRCallback` feeds each optimizer step's mean response length (TRL's
``completions/mean_length``) to a `tritongym.rl.ResponseLengthLRDecay` scheduler given to the
trainer; `RunLogCallback` appends every log line to ``metrics.jsonl`` in the run folder.
"""

from __future__ import annotations

import json
import math
import types
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import broadcast_object_list, gather_object, is_peft_model
from transformers import TrainerCallback
from trl import GRPOTrainer
from trl.trainer.utils import FusedCausalLMOutput

from tritongym.rl import (
    ResponseLengthLRDecay,
    dvp_log_probs,
    meaningful_turn_mask,
    prs_sample,
    trloo_advantages,
    turn_grpo_advantages,
    zero_variance_group_mask,
)

__all__ = ["TURN_ADVANTAGES", "ResponseLengthLRCallback", "RunLogCallback", "TRLOOGRPOTrainer",
           "install_dvp_log_probs", "turn_token_advantages"]

#: The turn-level advantage estimators the trainer can use: ``trloo`` (Dr.Kernel's, leave-one-out, the
#: default) and ``turn_grpo`` (KernelGYM's multi-turn ``grpo``: the self-included group mean of the
#: turn's returns, no std), the biased comparison point of Dr.Kernel's ablation (docs/rl.md).
TURN_ADVANTAGES = {"trloo": trloo_advantages, "turn_grpo": turn_grpo_advantages}


def install_dvp_log_probs(model: Any, alpha: float, *, temperature: float = 1.0) -> None:
    """Make ``model(..., labels=..., fused_lm_head=True)`` return DVP log-probs (π_S) instead of π's.

    ``model`` must already carry TRL's fused LM head (``GRPOTrainer`` adds it): other calls
    (generation, ``fused_lm_head=False``) go to that forward unchanged. Label −100 positions get 0,
    as TRL's head gives them. A label outside the pruned set V_S has no π_S log-prob: it gets the
    full softmax's, detached (no gradient), a finite placeholder — ``dvp_log_probs``'s −1e4 would make
    TRL's KL term exp(ref − logp) overflow to inf, and inf × a 0 mask is NaN. The trainer takes such
    tokens out of the loss mask (`TRLOOGRPOTrainer`), so the placeholder never counts.
    """
    fused = model.forward  # TRL's fused-head forward (an instance attribute)
    plain = type(model).forward  # the model class's own forward: logits

    def forward(self: Any, *args: Any, fused_lm_head: bool = False, labels: Any = None, shift_labels: Any = None,
                num_items_in_batch: Any = None, **kwargs: Any) -> Any:
        if not fused_lm_head:
            return fused(*args, fused_lm_head=False, labels=labels, shift_labels=shift_labels,
                         num_items_in_batch=num_items_in_batch, **kwargs)
        kwargs["use_cache"] = False
        kwargs.pop("logits_to_keep", None)  # set below from the labels
        targets = labels[:, 1:] if shift_labels is None else shift_labels
        # Only the positions with a label are scored (TRL labels the completion, -100 on the prompt): the
        # LM head runs on those alone (`logits_to_keep`), not on a long prompt's positions whose
        # log-probs would be thrown away; the results are laid back at their positions, 0 elsewhere.
        scored = (targets != -100).any(dim=0).nonzero()
        skip = int(scored[0]) if len(scored) else targets.size(1) - 1
        width = targets.size(1) - skip
        logits = plain(self, *args, logits_to_keep=width + (1 if shift_labels is None else 0), **kwargs).logits
        logits, targets = logits[:, :width], targets[:, skip:]
        mask = targets != -100
        dvp = dvp_log_probs(logits, targets.clamp_min(0), alpha, temperature=temperature)
        with torch.no_grad():  # TRL's entropy metric: the full distribution's, as its own head reports it
            full = torch.distributions.Categorical(logits=logits.float() / temperature)
            entropy = full.entropy()
            placeholder = full.logits.gather(-1, targets.clamp_min(0)[..., None])[..., 0]  # log π(y), finite
        log_probs = torch.where(mask, torch.where(dvp.in_safe, dvp.log_probs, placeholder.to(dvp.log_probs.dtype)), 0.0)
        entropy = torch.where(mask, entropy, 0.0)
        loss = -log_probs.sum() / (mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch)
        if skip:
            log_probs, entropy = (torch.cat([value.new_zeros(value.size(0), skip), value], dim=1)
                                  for value in (log_probs, entropy))
            mask = torch.cat([mask.new_zeros(mask.size(0), skip), mask], dim=1)
        return FusedCausalLMOutput(loss=loss, log_probs=log_probs, entropy=entropy, label_mask=mask)

    model.forward = types.MethodType(forward, model)


def turn_token_advantages(turn_advantages: torch.Tensor, spans: list[list[list[int]]], width: int) -> torch.Tensor:
    """Broadcast ``[n, T]`` per-turn advantages to ``[n, width]`` tokens: each turn's value on its
    ``[start, end)`` span of the completion, 0 elsewhere (feedback and padding)."""
    out = torch.zeros(turn_advantages.shape[0], width, dtype=torch.float32)
    for i, row in enumerate(spans):
        for k, (start, end) in enumerate(row):
            out[i, start:min(end, width)] = float(turn_advantages[i, k])
    return out


class TRLOOGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` with TRLOO turn-level advantages and PRS as a loss mask (module docstring).

    Args:
        *args, **kwargs: those of ``GRPOTrainer``; ``rollout_func`` must be a
            `tritongym.integrations.trl.KernelRollout` (or anything forwarding ``turn_rewards``
            and ``turn_spans``).
        turn_gamma: γ, the discount over turns (Dr.Kernel: 1.0).
        prs: apply PRS (default True; a no-op where coverage is unmeasured).
        prs_seed: seed of the PRS draws (None: torch's global generator).
        dvp_alpha: DVP's min-p threshold α in (0, 1] (module docstring), or None (default) for the
            full-softmax log-probs. Needs ``GRPOConfig(min_p=α)`` so sampling prunes with the same rule.
        group_filter_std: Dr.Kernel's group filter (``REJECTION_SAMPLE``, threshold 1e-3): a prompt
            group whose last-turn rewards (after meaningful-turn masking) have an unbiased std below
            this leaves the loss (``tritongym.rl.zero_variance_group_mask``). TRL cannot resample a
            step's prompts, so the group is masked rather than replaced. None (default): no filter.
        meaningful_turns: KernelGYM's ``mask_void_turn`` (default True, as released; module docstring).
        advantage: the turn-level estimator, a key of `TURN_ADVANTAGES`: ``trloo`` (default) or
            ``turn_grpo`` (the self-included group mean, for ablations; everything else unchanged).
    """

    def __init__(self, *args: Any, turn_gamma: float = 1.0, prs: bool = True, prs_seed: int | None = None,
                 group_filter_std: float | None = None, dvp_alpha: float | None = None,
                 meaningful_turns: bool = True, advantage: str = "trloo", **kwargs: Any) -> None:
        if advantage not in TURN_ADVANTAGES:
            raise ValueError(f"advantage must be one of {sorted(TURN_ADVANTAGES)}, got {advantage!r}")
        if not 0.0 <= turn_gamma <= 1.0:
            raise ValueError(f"turn_gamma must be in [0, 1], got {turn_gamma}")
        if group_filter_std is not None and not group_filter_std >= 0:
            raise ValueError(f"group_filter_std must be >= 0 or None, got {group_filter_std}")
        if dvp_alpha is not None:
            if not 0.0 < dvp_alpha <= 1.0:
                raise ValueError(f"dvp_alpha must be in (0, 1], got {dvp_alpha}")
            min_p = getattr(kwargs.get("args"), "min_p", None)
            if min_p != dvp_alpha:
                raise ValueError(f"dvp_alpha={dvp_alpha} needs the rollout to sample from the same pruned policy: "
                                 f"set GRPOConfig(min_p={dvp_alpha}) (got min_p={min_p})")
        super().__init__(*args, **kwargs)
        self.dvp_alpha = dvp_alpha
        if dvp_alpha is not None:
            # The objects TRL gave the fused head (the base model under PEFT, whose reference is the same
            # model with the adapter off); the reference model too, so the KL term compares π_S with π_S_ref.
            target = self.model.get_base_model() if is_peft_model(self.model) else self.model
            install_dvp_log_probs(target, dvp_alpha, temperature=self.temperature)
            if self.ref_model is not None:
                install_dvp_log_probs(self.ref_model, dvp_alpha, temperature=self.temperature)
        self.turn_gamma = float(turn_gamma)
        self.advantage = advantage
        self.group_filter_std = group_filter_std
        self.meaningful_turns = bool(meaningful_turns)
        self.prs = prs
        self._prs_generator = None
        if prs_seed is not None:
            self._prs_generator = torch.Generator().manual_seed(prs_seed)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)  # fills inputs with the rollout's fields
        return self._apply_turn_advantages(inputs, output)

    def _apply_turn_advantages(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> dict[str, Any]:
        """Replace ``output["advantages"]`` with per-token TRLOO advantages; PRS into the loss mask."""
        missing = [key for key in ("turn_rewards", "turn_spans") if key not in inputs[0]]
        if missing:
            raise ValueError(f"TRLOOGRPOTrainer needs {missing} per row from the rollout; pass "
                             "rollout_func=KernelRollout(...) (tritongym.integrations.trl)")
        mode = "train" if self.model.training else "eval"
        group_size = self.num_generations if mode == "train" else self.num_generations_eval
        local = [(row["turn_rewards"], row.get("turn_keep_prob") or [1.0] * len(row["turn_rewards"]))
                 for row in inputs]
        rows = gather_object(local)  # the whole batch: groups may span processes
        n, turns = len(rows), max(len(r) for r, _ in rows)
        if n % group_size:
            raise ValueError(f"{n} rows do not split into groups of num_generations={group_size}")
        rewards = torch.zeros(n, turns, dtype=torch.float64)
        turn_mask = torch.zeros(n, turns, dtype=torch.bool)
        keep_prob = torch.ones(n, turns, dtype=torch.float64)
        for i, (row_rewards, row_keep) in enumerate(rows):
            rewards[i, : len(row_rewards)] = torch.tensor(row_rewards, dtype=torch.float64)
            turn_mask[i, : len(row_rewards)] = True
            keep_prob[i, : len(row_keep)] = torch.tensor(row_keep, dtype=torch.float64)
        groups = torch.arange(n) // group_size  # TRL: consecutive runs of num_generations rows
        start = self.accelerator.process_index * len(inputs)
        # 1. KernelGYM's loss_mask: turns that are not meaningful leave the loss, their groups and their rewards.
        in_groups = turn_mask
        if self.meaningful_turns:
            in_groups = meaningful_turn_mask(rewards, turn_mask)
        rewards = torch.where(in_groups, rewards, 0.0)
        masked = turn_mask & ~in_groups
        # 2. PRS. The draw covers the whole batch; process 0's is broadcast so every process drops the
        # same turns (their RNG states may differ). Rejected turns keep their rewards.
        keep = in_groups.clone()
        if self.prs:
            drawn = prs_sample(keep_prob.flatten(), generator=self._prs_generator).view_as(keep_prob) | ~turn_mask
            if self.accelerator.num_processes > 1:
                shared = [drawn]
                broadcast_object_list(shared, from_process=0)
                drawn = shared[0]
            keep &= drawn
        rejected = int((in_groups & ~keep)[start: start + len(inputs)].sum())  # this process's PRS-dropped turns
        filtered_groups = 0
        if self.group_filter_std is not None:
            # 3. Dr.Kernel's group filter on last-turn rewards (as step 1 left them): a filtered group keeps no turn.
            last = rewards.gather(1, (turn_mask.sum(dim=1) - 1).clamp_min(0)[:, None])[:, 0]
            keep_rows = zero_variance_group_mask(last, groups, min_std=self.group_filter_std)
            filtered_groups = int((~keep_rows).sum()) // group_size
            keep = keep & keep_rows[:, None]
        advantages = TURN_ADVANTAGES[self.advantage](rewards, in_groups, groups, gamma=self.turn_gamma)
        local_adv = advantages[start: start + len(inputs)]
        spans = [row["turn_spans"] for row in inputs]
        width = output["completion_ids"].shape[1]
        device = output["completion_ids"].device
        drop = (turn_mask & ~keep)[start: start + len(inputs)].to(torch.float64)
        output["advantages"] = turn_token_advantages(local_adv * (1.0 - drop), spans, width).to(device)
        token_drop = turn_token_advantages(drop, spans, width).to(device).bool()
        base = output.get("tool_mask", torch.ones_like(output["completion_mask"]))
        if self.dvp_alpha is not None:
            out_of_set = self._dvp_out_of_set(output) & (base * output["completion_mask"]).bool()
            token_drop |= out_of_set
            self._metrics[mode]["tritongym/dvp_out_of_set_tokens"].append(
                float(self.accelerator.gather(out_of_set.sum()).sum()))
        output["tool_mask"] = base * (~token_drop).to(base.dtype)
        loss_mask = output["completion_mask"] * output["tool_mask"]
        # TRL divides by this count. The gather runs on every process, whether or not this one dropped
        # a token (a collective under a per-process condition deadlocks or mismatches). A batch left
        # with no token keeps 1 so its (zero) loss stays finite.
        output["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum().clamp_min(1)
        metrics = self._metrics[mode]
        metrics["tritongym/trloo_advantage_abs"].append(float(advantages[in_groups].abs().mean())
                                                        if in_groups.any() else 0.0)
        metrics["tritongym/turns_per_trajectory"].append(float(turn_mask.sum(dim=1).double().mean()))
        metrics["tritongym/not_meaningful_turns"].append(float(masked.sum()))
        metrics["tritongym/prs_rejected_turns"].append(float(self.accelerator.gather(
            torch.tensor(float(rejected), device=device)).sum()))
        if self.group_filter_std is not None:
            metrics["tritongym/filtered_groups"].append(float(filtered_groups))
        return output

    def _dvp_out_of_set(self, output: dict[str, Any]) -> torch.Tensor:
        """``[B, L]`` bool: completion tokens outside the pruned set V_S of the policy (its weights of this
        step, π_old) or, with a KL term, of the reference model."""
        completion = output["completion_ids"]
        input_ids = torch.cat([output["prompt_ids"], completion], dim=1)
        attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
        width = completion.size(1)
        models = [self.accelerator.unwrap_model(self.model)]
        if self.beta != 0.0 and self.ref_model is not None:
            models.append(self.ref_model)
        out = torch.zeros_like(completion, dtype=torch.bool)
        for model in models:
            with torch.no_grad():
                # The LM head on the positions that predict the completion only (`logits_to_keep`).
                logits = type(model).forward(model, input_ids=input_ids, attention_mask=attention, use_cache=False,
                                             logits_to_keep=width + 1).logits[:, :-1]
            out |= ~dvp_log_probs(logits, completion, self.dvp_alpha, temperature=self.temperature).in_safe
        return out


class ResponseLengthLRCallback(TrainerCallback):
    """Feeds each optimizer step's mean response length to a `ResponseLengthLRDecay` (arXiv 2602.01826).

    Give the trainer the scheduler and this callback::

        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        scheduler = ResponseLengthLRDecay(optimizer)            # κ = 3, W = 50, period 1.8·s*, floor 0.1
        trainer = GRPOTrainer(..., optimizers=(optimizer, scheduler), callbacks=[ResponseLengthLRCallback()])

    The trainer advances the scheduler's clock after every optimizer step; on the step's log
    (``logging_steps=1``: one log per step, whose ``completions/mean_length`` counts the model's
    tokens only, env-masked feedback excluded) the callback records the length for that step and
    re-applies the LR for the next step, so a surge takes effect at once.
    """

    metric = "completions/mean_length"

    def __init__(self) -> None:
        self.scheduler: ResponseLengthLRDecay | None = None
        self.observed_steps: list[int] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, lr_scheduler: Any = None, **_: Any) -> None:
        if not isinstance(lr_scheduler, ResponseLengthLRDecay):
            raise ValueError("ResponseLengthLRCallback needs the trainer's scheduler to be a "
                             "tritongym.rl.ResponseLengthLRDecay: pass optimizers=(optimizer, "
                             "ResponseLengthLRDecay(optimizer)) to the trainer")
        if getattr(args, "logging_steps", 1) != 1:
            raise ValueError(f"ResponseLengthLRCallback needs one log per optimizer step: set logging_steps=1 "
                             f"(got {args.logging_steps})")
        self.scheduler = lr_scheduler

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
        if self.scheduler is None or not logs or self.metric not in logs or state.global_step < 1:
            return
        step = state.global_step - 1  # the optimizer step this log belongs to
        if self.observed_steps and self.observed_steps[-1] >= step:
            return
        length = float(logs[self.metric])
        if not math.isfinite(length):
            return
        self.scheduler.observe(length, step=step)
        self.observed_steps.append(step)
        lrs = self.scheduler.get_lr()  # the next step's LR, with the surge state just updated
        for group, lr in zip(self.scheduler.optimizer.param_groups, lrs, strict=True):
            group["lr"] = lr
        self.scheduler._last_lr = lrs


class RunLogCallback(TrainerCallback):
    """Appends every log (``{"step": global_step, **logs}``) to ``<folder>/metrics.jsonl``."""

    def __init__(self, folder: str | Path) -> None:
        self.path = Path(folder) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any) -> None:
        if not logs or not state.is_world_process_zero:
            return
        clean = {k: (v if not isinstance(v, float) or math.isfinite(v) else None) for k, v in logs.items()}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"step": state.global_step, **clean}) + "\n")
