"""tritongym.rl: exact, tested RL algorithm pieces in pure PyTorch (no trainer imported).

Advantages (GRPO, Dr.GRPO, RLOO, TRLOO, OTB, EMPG, OPMD, AsymRE), rollout-mismatch correction
(TIS, MIS/IcePop, rejection sampling, Dr.Kernel MRS, TRM, DVP), policy losses (PPO dual clip,
REINFORCE, TOPR, the hybrid RL+IL dense KL) and aggregation modes, Dr.Kernel's PR/PRS reward
shaping, the response-length-triggered LR decay, and diagnostics. Formulas, inputs, defaults and
sources: ``docs/rl.md``; the spec: ``rl-algorithms.md``.

Conventions: tensors in, tensors out; masks explicit (bool, or 0/1 with non-zero = valid); group
ids are integer tensors; every weight and mask is stop-gradient; shapes are validated and errors
are ``ValueError("<name>: expected …, got …")``.
"""

from __future__ import annotations

from .advantages import (
    broadcast_to_tokens,
    dr_grpo_advantages,
    grpo_advantages,
    rloo_advantages,
    trloo_advantages,
    turn_grpo_advantages,
    turn_returns,
)
from .correction import (
    apply_row_mask,
    geometric_rs_mask,
    k3_rs_mask,
    mrs_mask,
    rollout_log_ratio,
    sequence_mis_weights,
    sequence_rs_mask,
    sequence_tis_weights,
    token_mis_weights,
    token_tis_weights,
    token_veto_mask,
)
from .diagnostics import (
    collision_probability,
    logit_update_norm,
    mismatch_metrics,
    token_entropy,
    token_kl,
)
from .dvp import (
    OUT_OF_SET_LOG_PROB,
    DVPLogProbs,
    dvp_log_probs,
    dvp_log_probs_from_topk,
    min_p_safe_mask,
)
from .empg import empg_advantages, step_mean_entropy
from .estimators import AdvantageInputs, compute_advantages
from .hybrid import dense_kl_loss, sparse_kl_returns
from .offpolicy import (
    asymre_advantages,
    opmd_advantages,
    opmd_pairwise_loss,
    topr_token_loss,
    topr_weights,
)
from .otb import logit_gradient_proxy, otb_advantages, sum_pi_squared
from .policy_loss import (
    PolicyLossInputs,
    aggregate_loss,
    compute_policy_loss,
    kl_estimate,
    ppo_clip_fractions,
    ppo_clip_token_loss,
    reinforce_token_loss,
)
from .registry import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATION_MODES,
    POLICY_LOSSES,
    AdvantageEstimator,
    AggregationMode,
    Entry,
    KLEstimator,
    PolicyLoss,
    Registry,
    StrEnum,
)
from .schedulers import ResponseLengthLRDecay
from .shaping import (
    meaningful_turn_mask,
    profiling_reward,
    prs_keep_probability,
    prs_sample,
    zero_variance_group_mask,
)
from .trm import (
    ln_trm_mask,
    ln_trm_normaliser,
    ser_mask,
    trm_aggregate_loss,
    trm_bounds,
    trm_exact_mask,
    trm_mask,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "AdvantageEstimator",
    "AdvantageInputs",
    "AggregationMode",
    "DVPLogProbs",
    "Entry",
    "KLEstimator",
    "OUT_OF_SET_LOG_PROB",
    "POLICY_LOSSES",
    "PolicyLoss",
    "PolicyLossInputs",
    "Registry",
    "ResponseLengthLRDecay",
    "StrEnum",
    "aggregate_loss",
    "apply_row_mask",
    "asymre_advantages",
    "broadcast_to_tokens",
    "collision_probability",
    "compute_advantages",
    "compute_policy_loss",
    "dense_kl_loss",
    "dr_grpo_advantages",
    "dvp_log_probs",
    "dvp_log_probs_from_topk",
    "empg_advantages",
    "geometric_rs_mask",
    "grpo_advantages",
    "k3_rs_mask",
    "kl_estimate",
    "ln_trm_mask",
    "ln_trm_normaliser",
    "logit_gradient_proxy",
    "logit_update_norm",
    "meaningful_turn_mask",
    "min_p_safe_mask",
    "mismatch_metrics",
    "mrs_mask",
    "opmd_advantages",
    "opmd_pairwise_loss",
    "otb_advantages",
    "ppo_clip_fractions",
    "ppo_clip_token_loss",
    "profiling_reward",
    "prs_keep_probability",
    "prs_sample",
    "reinforce_token_loss",
    "rloo_advantages",
    "rollout_log_ratio",
    "sequence_mis_weights",
    "sequence_rs_mask",
    "sequence_tis_weights",
    "ser_mask",
    "sparse_kl_returns",
    "step_mean_entropy",
    "sum_pi_squared",
    "token_entropy",
    "token_kl",
    "token_mis_weights",
    "token_tis_weights",
    "token_veto_mask",
    "topr_token_loss",
    "topr_weights",
    "trloo_advantages",
    "trm_aggregate_loss",
    "trm_bounds",
    "trm_exact_mask",
    "trm_mask",
    "turn_grpo_advantages",
    "turn_returns",
    "zero_variance_group_mask",
]
