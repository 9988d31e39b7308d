"""Optimal Token Baseline (OTB) and the logit-gradient proxy.

Family: variance-reducing token-level baselines for outcome-reward policy gradients.

References:

* Li, Xu et al., *Optimal Token Baseline*, arXiv 2602.07078 (abstract: "gradient updates should
  be weighted inversely to their cumulative gradient norm … Logit-Gradient Proxy"); verl
  ``docs/algo/otb.md``; verl ``core_algos.compute_optimal_token_baseline_advantage``
  (verl-project@1dda039b L872) and ``torch_functional.calculate_sum_pi_squared_from_logits``.
  Formulas as in ``rl-algorithms.md`` §3.2–3.3.
* Optimal baseline b* = E[R‖∇log π‖²]/E[‖∇log π‖²]: Greensmith, Bartlett & Baxter, JMLR 2004.

Math (per group g, absolute position t, mask m):

    w[i,t] = 1 − 2·π_old(y_t) + Σ_v π_old(v|c_t)²      (= ‖e_y − π‖², logit-gradient proxy)
    W[i,t] = Σ_{j ≤ t} m[i,j]·w[i,j]                    ("realized energy")
    G[i,t] = Σ_{j ≥ t} m[i,j]·r[i,j]                    (reward-to-go)
    B[t]   = Σ_{i∈g} m G W / (Σ_{i∈g} m W + ε)
    A[i,t] = (G[i,t] − B[t])·m[i,t]

Deliberately left out: the multi-turn variants (verl TIR-OTB, KernelGYM turn/token OTB), the
variance-proxy metrics (spec §3.5), and the paper's possible extra 1/W advantage rescaling (not
visible in any public implementation, spec §3.1).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import (
    as_bool_mask,
    as_group_ids,
    check_floating,
    check_ndim,
    check_shape,
    compute_dtype,
    group_inverse,
    group_sum,
)
from ._vocab import DEFAULT_CHUNK_SIZE, vocab_reductions

__all__ = ["logit_gradient_proxy", "otb_advantages", "sum_pi_squared"]


def sum_pi_squared(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> Tensor:
    """Σ_v π(v|c)² per position, stably and chunked (arXiv 2602.07078 logit-gradient proxy; spec §3.2).

    Math:
        Σπ² = exp(logsumexp(2z) − 2·logsumexp(z)),  z = logits / temperature
        computed online over vocabulary slices as s2 / s1², s1 = Σ e^(z−m), s2 = Σ e^(2(z−m))

    Args:
        logits: ``[..., V] float`` (any float dtype; bf16 is upcast one chunk at a time).
        temperature: must be the temperature used for the log-probs (spec §12 gotcha 5).
        chunk_size: positions per row chunk.
        vocab_chunk_size: vocabulary columns per slice (``None`` = whole vocabulary).

    Returns:
        ``[...]`` float32 (float64 for float64 logits), no grad. Values lie in [1/V, 1].

    Defaults:
        chunk_size = 1024 (peak extra memory ≈ 4 × chunk_size × V × 4 bytes).
    """
    return vocab_reductions(
        logits,
        temperature=temperature,
        chunk_size=chunk_size,
        vocab_chunk_size=vocab_chunk_size,
        collision=True,
    )["sum_pi_squared"]


def logit_gradient_proxy(log_probs: Tensor, sum_pi_sq: Tensor) -> Tensor:
    """Squared logit-gradient norm ‖e_y − π‖² per token (arXiv 2602.07078; spec §3.2; check 1).

    Math:
        w = 1 − 2·exp(log_probs) + sum_pi_sq   (= ‖∇_z log softmax(z)_y‖²)

    Args:
        log_probs: ``[B, L] float`` log π(y_t|c_t) of the sampled tokens.
        sum_pi_sq: ``[B, L] float`` Σπ² at the same positions (``sum_pi_squared``).

    Returns:
        ``[B, L]``, no grad, dtype float32 or wider (the promotion of the inputs and float32).
    """
    check_floating(log_probs, "log_probs")
    check_shape(sum_pi_sq, log_probs.shape, "sum_pi_sq")
    dtype = torch.promote_types(compute_dtype(log_probs), compute_dtype(sum_pi_sq))
    lp = log_probs.detach().to(dtype)
    return 1.0 - 2.0 * lp.exp() + sum_pi_sq.detach().to(dtype)  # w = 1 − 2π_y + Σπ²


@torch.no_grad()
def otb_advantages(
    token_rewards: Tensor,
    response_mask: Tensor,
    group_ids: object,
    log_probs_old: Tensor,
    sum_pi_sq: Tensor,
    *,
    rollout_is_weights: Tensor | None = None,
    eps: float = 1e-8,
    handle_zero_tail: bool = True,
    leave_one_out: bool = False,
) -> Tensor:
    """Optimal Token Baseline advantages (arXiv 2602.07078; verl ``optimal_token_baseline``; spec §3.3).

    Math:
        w = 1 − 2·exp(log_probs_old) + sum_pi_sq            (× rollout_is_weights² if given)
        W[i,t] = Σ_{j≤t} m w;   G[i,t] = Σ_{j≥t} m r
        B[t] = Σ_{i∈g} m G W / (Σ_{i∈g} m W + eps)                    (self-included, verl)
        leave_one_out:  B_{−i}[t] = Σ_{j∈g, j≠i} m G W / (Σ_{j∈g, j≠i} m W + eps),
                        0 if no other trajectory of g is alive at t
        handle_zero_tail: B[t] := 0 where i is the only trajectory of g alive at t
        group of size 1: B = 0
        A[i,t] = (G[i,t] − B[t])·m[i,t]

    Args:
        token_rewards: ``[B, L] float`` (outcome reward on the last valid token, or dense).
        response_mask: ``[B, L] bool`` (or 0/1); right-padded responses.
        group_ids: ``[B] int`` prompt-group ids.
        log_probs_old: ``[B, L] float`` trainer log-probs π_old(y_t) (fp32 recommended).
        sum_pi_sq: ``[B, L] float`` Σπ² from the *same* temperature-scaled trainer logits.
        rollout_is_weights: optional ``[B, L]`` truncated IS weights ρ̄; W uses w·ρ̄² (MSE-optimal
            under truncated IS, verl note).
        eps: added to the denominator.
        handle_zero_tail: zero the baseline on the tail of a group's unique longest response.
        leave_one_out: exclude trajectory i from its own baseline (exactly unbiased).

    Returns:
        ``[B, L]`` advantages, the dtype of ``token_rewards`` (maths in float64), no grad.

    Defaults:
        eps = 1e-8 (verl); handle_zero_tail = True (verl-project@1dda039, Aug 2026; it was False in
        volcengine@b178a3c, Jan 2026 — spec §12 gotcha 4); leave_one_out = False (verl).

    Differs from verl:
        handle_zero_tail is applied per position ("only one trajectory alive at t"), which equals
        verl's "unique longest response beyond the second-longest length" for right-padded masks.
        ``leave_one_out`` is this library's addition (spec §3.3(a) [R]): OTB-as-implemented
        includes i in B[t] and is O(1/N) biased.
    """
    check_ndim(token_rewards, 2, "token_rewards", "[B, L]")
    check_floating(token_rewards, "token_rewards")
    shape = token_rewards.shape
    mask = as_bool_mask(response_mask, "response_mask", shape)
    check_shape(log_probs_old, shape, "log_probs_old")
    check_shape(sum_pi_sq, shape, "sum_pi_sq")
    ids = as_group_ids(group_ids, shape[0])
    if eps < 0:
        raise ValueError(f"eps: expected a value >= 0, got {eps}")
    f64 = torch.float64
    m = mask.to(f64)
    w = logit_gradient_proxy(log_probs_old, sum_pi_sq).to(f64)  # w[i,t]
    if rollout_is_weights is not None:
        check_shape(rollout_is_weights, shape, "rollout_is_weights")
        w = w * rollout_is_weights.detach().to(f64) ** 2  # w·ρ̄²
    w = torch.where(mask, w, 0.0)
    r = torch.where(mask, token_rewards.to(f64), 0.0)
    big_w = w.cumsum(dim=-1)  # W[i,t] = Σ_{j≤t} m w
    big_g = r.flip(-1).cumsum(dim=-1).flip(-1)  # G[i,t] = Σ_{j≥t} m r
    inverse, num_groups = group_inverse(ids)
    gw = m * big_g * big_w
    mw = m * big_w
    sum_gw = group_sum(gw, inverse, num_groups)[inverse]  # Σ_g m G W, [B, L]
    sum_w = group_sum(mw, inverse, num_groups)[inverse]  # Σ_g m W, [B, L]
    alive = group_sum(m, inverse, num_groups)[inverse]  # trajectories of g alive at t, [B, L]
    size = group_sum(torch.ones_like(m[:, 0]), inverse, num_groups)[inverse]  # |g|, [B]
    if leave_one_out:
        baseline = (sum_gw - gw) / (sum_w - mw + eps)  # B_{−i}[t]
        baseline = torch.where(alive - m > 0, baseline, 0.0)
    else:
        baseline = sum_gw / (sum_w + eps)  # B[t]
        if handle_zero_tail:
            baseline = torch.where(alive > 1, baseline, 0.0)
    baseline = torch.where(size[:, None] > 1, baseline, 0.0)
    advantages = torch.where(mask, big_g - baseline, 0.0)  # A = (G − B)·m
    return advantages.to(token_rewards.dtype)
