"""Off-policy REINFORCE variants: TOPR, OPMD and AsymRE (optional items of the issue).

Family: losses and advantages that stay well-behaved when the data were not sampled from π_θ.

References (formulas as in ``rl-algorithms.md`` §1.4 and §1.6):

* TOPR — Le Roux, Bellemare et al., *Tapered Off-Policy REINFORCE*, arXiv 2503.14286 (abstract
  and secondary summaries quoting the update rule, [S]): positives get a plain SFT-like gradient,
  negatives a sequence-level ratio truncated to [0, 1] (objective bounded above, paper Prop. 3.2).
* OPMD / AsymRE — Yao, Chen et al., *Group-Relative REINFORCE is Secretly an Off-Policy
  Algorithm*, arXiv 2509.24203 (abstract + derivation [R]); Trinity-RFT ``opmd_advantage.py``,
  ``asymre_advantage.py`` [C]; Kimi k1.5's pairwise-consistency loss.

Deliberately left out: Trinity's REC clip families, the (1/(1+τ)) OPMD loss rescaling (apply it
with ``aggregate_loss(..., loss_scale_factor=1 + tau)``), and Reinforce-Ada's adaptive sampling.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import (
    SAFETY_BOUND,
    as_bool_mask,
    as_group_ids,
    check_floating,
    check_ndim,
    check_shape,
    compute_dtype,
    group_inverse,
    group_sum,
    result_dtype,
)

__all__ = [
    "asymre_advantages",
    "opmd_advantages",
    "opmd_pairwise_loss",
    "topr_token_loss",
    "topr_weights",
]


@torch.no_grad()
def topr_weights(log_probs: Tensor, behaviour_log_probs: Tensor, mask: Tensor, rewards: Tensor) -> Tensor:
    """TOPR's per-sequence coefficient α (arXiv 2503.14286 update rule [S]; spec §1.4(a)).

    Math:
        α = 1                                          if R ≥ 0
        α = min(1, exp(Σ_t m (log_probs − behaviour_log_probs)))   if R < 0   (Σ clamped ±20)

    Args:
        log_probs: ``[B, L] float`` log π_θ; behaviour_log_probs: ``[B, L] float`` log μ (data policy).
        mask: ``[B, L] bool``; rewards: ``[B] float`` sequence rewards (±1 in the paper).

    Returns:
        ``[B]`` float32 (float64 for float64 input), no grad.
    """
    check_ndim(log_probs, 2, "log_probs", "[B, L]")
    check_floating(log_probs, "log_probs")
    check_shape(behaviour_log_probs, log_probs.shape, "behaviour_log_probs")
    bool_mask = as_bool_mask(mask, "mask", log_probs.shape)
    check_shape(rewards, (log_probs.shape[0],), "rewards")
    dtype = compute_dtype(log_probs)
    delta = torch.where(bool_mask, log_probs.to(dtype) - behaviour_log_probs.to(dtype), 0.0)
    seq_ratio = delta.sum(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()  # π(y)/μ(y)
    return torch.where(rewards.to(dtype) >= 0, 1.0, seq_ratio.clamp_max(1.0))  # α


def topr_token_loss(log_probs: Tensor, behaviour_log_probs: Tensor, mask: Tensor, rewards: Tensor) -> Tensor:
    """Per-token TOPR loss −sg(α)·R·log π_θ(y_t) (arXiv 2503.14286; spec §1.4(a)).

    Aggregate with ``seq-mean-token-sum`` to get the paper's per-sequence Σ_t log π_θ(y_t).

    Math:
        ℓ[b,t] = −sg(α_b)·R_b·log_probs[b,t] on valid tokens, 0 elsewhere

    Returns:
        ``[B, L]`` float32 (float64 for float64 input).
    """
    alpha = topr_weights(log_probs, behaviour_log_probs, mask, rewards)
    bool_mask = as_bool_mask(mask, "mask", log_probs.shape)
    dtype = compute_dtype(log_probs)
    coef = (alpha * rewards.detach().to(dtype))[:, None]  # sg(α)·R
    safe = torch.where(bool_mask, log_probs.to(dtype), 0.0)
    return torch.where(bool_mask, -coef * safe, 0.0)


def opmd_advantages(scores: Tensor, group_ids: object, *, tau: float = 1.0, baseline: str = "mean") -> Tensor:
    """OPMD advantages A = r − b (arXiv 2509.24203; Trinity-RFT ``opmd_advantage`` [C]; spec §1.6).

    Math:
        baseline "mean":       b = mean_g r
        baseline "logavgexp":  b = τ·log mean_g exp(r/τ)     (e.g. r = [1, 0], τ = 1 → 0.62011)
        A[i] = scores[i] − b_g

    Returns:
        ``[n]``, the dtype of ``scores``. Defaults: τ = 1.0, baseline "mean" (Trinity).
    """
    check_ndim(scores, 1, "scores", "[n]")
    ids = as_group_ids(group_ids, scores.shape[0])
    if tau <= 0:
        raise ValueError(f"tau: expected a value > 0, got {tau}")
    r = scores.to(torch.float64)
    inverse, num = group_inverse(ids)
    count = group_sum(torch.ones_like(r), inverse, num)
    if baseline == "mean":
        base = group_sum(r, inverse, num) / count
    elif baseline == "logavgexp":
        shift = torch.full((num,), -torch.inf, dtype=torch.float64).scatter_reduce(
            0, inverse, r / tau, "amax"
        )
        mean_exp = group_sum((r / tau - shift[inverse]).exp(), inverse, num) / count
        base = tau * (shift + mean_exp.log())  # τ log mean exp(r/τ)
    else:
        raise ValueError(f"baseline: expected 'mean' or 'logavgexp', got {baseline!r}")
    return (r - base[inverse]).to(result_dtype(scores))


def asymre_advantages(scores: Tensor, group_ids: object, *, delta: float = -0.1) -> Tensor:
    """AsymRE advantages A = r − (mean_g r + δ) (arXiv 2509.24203; Trinity ``asymre_advantage`` [C]).

    Math:
        A[i] = scores[i] − (mean_g + delta);  a group of size 1 has baseline 0 (A = r)
        delta = 0 reduces to Dr.GRPO.

    Returns:
        ``[n]``, the dtype of ``scores``. Defaults: δ = −0.1 (Trinity).
    """
    check_ndim(scores, 1, "scores", "[n]")
    ids = as_group_ids(group_ids, scores.shape[0])
    r = scores.to(torch.float64)
    inverse, num = group_inverse(ids)
    count = group_sum(torch.ones_like(r), inverse, num)
    base = group_sum(r, inverse, num) / count + delta
    base = torch.where(count > 1, base, 0.0)
    return (r - base[inverse]).to(result_dtype(scores))


def opmd_pairwise_loss(
    seq_log_probs: Tensor, ref_seq_log_probs: Tensor, scores: Tensor, group_ids: object, *, tau: float = 1.0
) -> Tensor:
    """Pairwise-consistency group loss of arXiv 2509.24203 (spec §1.6(a)); mean over groups.

    Math:
        a_i = scores_i − τ·(seq_log_probs_i − ref_seq_log_probs_i)
        L = mean_g (1/K_g) Σ_{i∈g} (a_i − ā_g)²
        at θ = θ_ref: ∇L = −(2τ/K) Σ_i (r_i − r̄)·∇ log π_θ(y_i) per group (group-relative REINFORCE,
        derived without assuming y ~ π_θ)

    Args:
        seq_log_probs: ``[n] float`` Σ_t log π_θ(y_t) per sequence (requires grad).
        ref_seq_log_probs: ``[n] float`` the same under π_ref (constant).
        scores: ``[n] float``; group_ids: ``[n] int``; tau: τ > 0.

    Returns:
        0-d tensor.
    """
    check_ndim(seq_log_probs, 1, "seq_log_probs", "[n]")
    n = seq_log_probs.shape[0]
    check_shape(ref_seq_log_probs, (n,), "ref_seq_log_probs")
    check_shape(scores, (n,), "scores")
    ids = as_group_ids(group_ids, n)
    if tau <= 0:
        raise ValueError(f"tau: expected a value > 0, got {tau}")
    dtype = compute_dtype(seq_log_probs)
    a = scores.detach().to(dtype) - tau * (seq_log_probs.to(dtype) - ref_seq_log_probs.detach().to(dtype))
    inverse, num = group_inverse(ids)
    count = group_sum(torch.ones_like(a.detach()), inverse, num)
    a_bar = group_sum(a, inverse, num) / count  # ā_g
    per_group = group_sum((a - a_bar[inverse]) ** 2, inverse, num) / count
    return per_group.mean()
