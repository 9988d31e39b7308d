"""Rollout (training–inference mismatch) correction: TIS, MIS/IcePop, rejection sampling, Dr.Kernel MRS.

Family: importance weights and rejection masks built from two log-probs of the same tokens:
the trainer's (π_old in decoupled mode, π_θ in bypass mode) and the rollout engine's (μ).

References (formulas as in ``rl-algorithms.md`` §1.3 and §2.2):

* Liu, Li et al., *When Speed Kills Stability* (blog series, 2025); verl
  ``docs/algo/rollout_corr_math.md`` and ``rollout_corr_helper.py`` (verl-project@1dda039b):
  token/sequence truncated IS (TIS), masked IS (MIS), geometric and k3 rejection sampling.
* IcePop (token MIS: zero, don't clip, ratios outside [lower, upper]).
* Dr.Kernel, arXiv 2602.05885, and KernelGYM ``mismatch_helper.py`` @3a84417: "MRS" =
  trajectory-level geometric rejection over all turns' tokens + per-row (per-turn) token veto.

Conventions:

* Δ[b,t] = log_probs − rollout_log_probs (log π_train/μ), clamped to ±20 before any exp
  (verl ``SAFETY_BOUND``), and 0 on masked tokens, so padding never changes a weight or a mask.
  Sequence-level IS weights clamp only the sum Σ_t Δ (as verl does), never the tokens first.
* Every weight and mask is computed under ``no_grad`` (stop-gradient): w multiplies the loss as
  sg(w), otherwise autograd would add a log π·∇w term in bypass mode.
* Weights are ``[B, L]`` in the log-probs' dtype (float32 for half inputs), 0 on masked tokens.
  Rejection rules return ``keep [B] bool``; RS never rescales the loss, it only zeroes the mask
  (``apply_row_mask``). Several rules chain with ``&``.
* Sign convention for the geometric rule is KernelGYM's: keep iff lower ≤ exp(mean Δ) ≤ upper.
  verl's ``*_k1`` statistic is −mean Δ compared with [log lower, log upper]; the two keep the same
  sets iff lower·upper = 1 (e.g. 0.5/2.0; 0.999/1.001 to 1e-6), and differ otherwise (§12 gotcha 2).

Deliberately left out: batch normalisation of IS weights, multi-turn *sequence* IS weights
(product over all turns), and the mismatch metrics (see ``diagnostics.mismatch_metrics``).
"""

from __future__ import annotations

import math

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
)

__all__ = [
    "apply_row_mask",
    "geometric_rs_mask",
    "k3_rs_mask",
    "mrs_mask",
    "rollout_log_ratio",
    "sequence_mis_weights",
    "sequence_rs_mask",
    "sequence_tis_weights",
    "token_mis_weights",
    "token_tis_weights",
    "token_veto_mask",
]


def _inputs(log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    check_ndim(log_probs, 2, "log_probs", "[B, L]")
    check_floating(log_probs, "log_probs")
    check_shape(rollout_log_probs, log_probs.shape, "rollout_log_probs")
    return as_bool_mask(mask, "mask", log_probs.shape), log_probs


@torch.no_grad()
def rollout_log_ratio(log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> Tensor:
    """Per-token log-ratio Δ = log π_train − log μ, clamped and masked (verl ``rollout_corr_helper``; §1.3).

    Math:
        Δ[b,t] = clamp(log_probs − rollout_log_probs, −20, 20) if mask[b,t] else 0

    Args:
        log_probs: ``[B, L] float`` trainer log-probs (π_old, or π_θ in bypass mode).
        rollout_log_probs: ``[B, L] float`` rollout-engine log-probs μ of the same tokens.
        mask: ``[B, L] bool`` (or 0/1) response mask.

    Returns:
        ``[B, L]`` float32 (float64 for float64 input), no grad.
    """
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    dtype = compute_dtype(log_probs)
    delta = (log_probs.to(dtype) - rollout_log_probs.to(dtype)).clamp(-SAFETY_BOUND, SAFETY_BOUND)  # Δ
    return torch.where(bool_mask, delta, 0.0)


def _sequence_log_ratio_sum(log_probs: Tensor, rollout_log_probs: Tensor, bool_mask: Tensor) -> Tensor:
    """clamp(Σ_t Δ_raw, ±20) per row, Δ_raw unclamped: only the sum is clamped (verl; ρ(y) = exp Σ Δ)."""
    dtype = compute_dtype(log_probs)
    raw = torch.where(bool_mask, log_probs.to(dtype) - rollout_log_probs.to(dtype), 0.0)
    return raw.sum(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)


def _pool(values: Tensor, trajectory_ids: object | None) -> tuple[Tensor, Tensor | None]:
    """Sum per-row values over trajectories; returns (pooled per row, inverse or None)."""
    if trajectory_ids is None:
        return values, None
    ids = as_group_ids(trajectory_ids, values.shape[0], "trajectory_ids")
    inverse, num = group_inverse(ids)
    return group_sum(values, inverse, num)[inverse], inverse


def _sequence_log_ratio(
    delta: Tensor, bool_mask: Tensor, trajectory_ids: object | None, mean: bool
) -> Tensor:
    """Σ_t Δ (or mean_t Δ) per row, pooled over trajectory rows when ids are given; [B]."""
    total, _ = _pool(delta.sum(-1), trajectory_ids)
    if not mean:
        return total
    count, _ = _pool(bool_mask.sum(-1).to(delta.dtype), trajectory_ids)
    return torch.where(count > 0, total / count.clamp_min(1.0), 0.0)


@torch.no_grad()
def token_tis_weights(
    log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, *, cap: float = 2.0
) -> Tensor:
    """Token-level truncated IS weights (verl ``token`` TIS; spec §1.3 table).

    Math:
        w[b,t] = min(exp(Δ[b,t]), cap) on valid tokens, 0 elsewhere; stop-gradient

    Args:
        log_probs, rollout_log_probs: ``[B, L] float``; mask: ``[B, L] bool``.
        cap: upper truncation C > 0.

    Returns:
        ``[B, L]`` weights, no grad.

    Defaults:
        cap = 2.0 (verl ``rollout_is_threshold``; typical 1.5–5).
    """
    if cap <= 0:
        raise ValueError(f"cap: expected a value > 0, got {cap}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    delta = rollout_log_ratio(log_probs, rollout_log_probs, bool_mask)
    return torch.where(bool_mask, delta.exp().clamp_max(cap), 0.0)  # w = min(e^Δ, C)


@torch.no_grad()
def sequence_tis_weights(
    log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, *, cap: float = 2.0
) -> Tensor:
    """Sequence-level truncated IS weight, broadcast over the row (verl ``sequence`` TIS; §1.3).

    Math:
        w[b,·] = min(exp(clamp(Σ_t Δ_raw[b,t], −20, 20)), cap) on valid tokens; stop-gradient
        (Δ_raw unclamped: ρ(y) is exp of the whole sum, so clamping each token first would change it;
        e.g. Δ = [25, −24.5] gives exp(0.5), not exp(20 − 20) = 1)

    Returns:
        ``[B, L]``, no grad. Defaults: cap = 2.0 (verl preset ``decoupled_seq_is``).
    """
    if cap <= 0:
        raise ValueError(f"cap: expected a value > 0, got {cap}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    seq = _sequence_log_ratio_sum(log_probs, rollout_log_probs, bool_mask).exp().clamp_max(cap)  # min(ρ(y), C)
    return torch.where(bool_mask, seq[:, None], 0.0)


@torch.no_grad()
def token_mis_weights(
    log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    lower: float = 0.5,
    upper: float = 2.0,
) -> Tensor:
    """Token-level masked IS (IcePop): keep the ratio inside [lower, upper], zero it outside (§1.3).

    Math:
        ρ = exp(Δ);  w[b,t] = ρ[b,t]·1[lower ≤ ρ[b,t] ≤ upper] on valid tokens; stop-gradient

    Returns:
        ``[B, L]``, no grad.

    Defaults:
        lower = 0.5, upper = 2.0 (the bounds of verl's ``0.5_2.0`` preset; the spec sheet gives no
        IcePop-specific values).
    """
    if not 0 < lower <= upper:
        raise ValueError(f"lower, upper: expected 0 < lower <= upper, got {lower}, {upper}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    delta = rollout_log_ratio(log_probs, rollout_log_probs, bool_mask)
    inside = (delta >= math.log(lower)) & (delta <= math.log(upper))  # compare in log space
    return torch.where(bool_mask & inside, delta.exp(), 0.0)


@torch.no_grad()
def sequence_mis_weights(
    log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, *, upper: float = 2.0
) -> Tensor:
    """Sequence-level masked IS: reject (weight 0) instead of truncating above ``upper`` (§1.3 Seq-MIS).

    Math:
        ρ(y) = exp(clamp(Σ_t Δ_raw, ±20)) (only the sum clamped);  w[b,·] = ρ(y)·1[ρ(y) ≤ upper]; stop-gradient

    Returns:
        ``[B, L]``, no grad. Defaults: upper = 2.0 (verl ``decoupled_seq_is_rs``).
    """
    if upper <= 0:
        raise ValueError(f"upper: expected a value > 0, got {upper}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    log_seq = _sequence_log_ratio_sum(log_probs, rollout_log_probs, bool_mask)
    seq = torch.where(log_seq <= math.log(upper), log_seq.exp(), 0.0)
    return torch.where(bool_mask, seq[:, None], 0.0)


@torch.no_grad()
def geometric_rs_mask(
    log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    lower: float = 0.999,
    upper: float = 1.001,
    trajectory_ids: object | None = None,
    clamp_tokens: bool = True,
) -> Tensor:
    """Geometric-mean rejection sampling (verl ``geometric``/Geo-RS; KernelGYM multi-turn; §1.3, §2.2).

    Math:
        ρ_geo = exp(Σ m Δ / Σ m), pooled over every row of the same trajectory when
        ``trajectory_ids`` is given (all tokens of all turns), else per row
        keep = lower ≤ ρ_geo ≤ upper   (a row/trajectory without valid tokens has ρ_geo = 1)
        Δ is each token's log-ratio clamped to ±20 (``clamp_tokens``, verl) or raw (KernelGYM
        ``mismatch_helper`` averages the raw log-ratios and clamps only the mean, which cannot move
        it into bounds as tight as these).

    Args:
        log_probs, rollout_log_probs: ``[B, L] float``; mask: ``[B, L] bool``.
        lower, upper: bounds on the geometric-mean ratio.
        trajectory_ids: optional ``[B] int``; rows (turns) of one trajectory share an id.
        clamp_tokens: clamp each token's Δ to ±20 before averaging (True: verl; False: KernelGYM).

    Returns:
        ``keep [B] bool``; a whole trajectory is kept or dropped together.

    Defaults:
        0.999 / 1.001 (Dr.Kernel ``ROLLOUT_RS_KWARGS``; verl ``*_geo_rs`` presets).
    """
    if not 0 < lower <= upper:
        raise ValueError(f"lower, upper: expected 0 < lower <= upper, got {lower}, {upper}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    if clamp_tokens:
        delta = rollout_log_ratio(log_probs, rollout_log_probs, bool_mask)
    else:
        dtype = compute_dtype(log_probs)
        delta = torch.where(bool_mask, log_probs.to(dtype) - rollout_log_probs.to(dtype), 0.0)
    mean_delta = _sequence_log_ratio(delta, bool_mask, trajectory_ids, mean=True)  # log ρ_geo
    return (mean_delta >= math.log(lower)) & (mean_delta <= math.log(upper))


@torch.no_grad()
def sequence_rs_mask(
    log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    lower: float = 0.5,
    upper: float = 2.0,
    trajectory_ids: object | None = None,
) -> Tensor:
    """Sequence-ratio rejection: keep iff lower ≤ exp(Σ_t Δ) ≤ upper (verl ``seq_sum_k1`` bounds; §1.3).

    Math:
        keep = log lower ≤ Σ m Δ ≤ log upper  (summed over trajectory rows when ids are given)

    Returns:
        ``keep [B] bool``. Defaults: 0.5 / 2.0 (verl ``decoupled_seq_is_rs``).
    """
    if not 0 < lower <= upper:
        raise ValueError(f"lower, upper: expected 0 < lower <= upper, got {lower}, {upper}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    delta = rollout_log_ratio(log_probs, rollout_log_probs, bool_mask)
    total = _sequence_log_ratio(delta, bool_mask, trajectory_ids, mean=False)
    return (total >= math.log(lower)) & (total <= math.log(upper))


@torch.no_grad()
def k3_rs_mask(
    log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    threshold: float = 0.01,
    trajectory_ids: object | None = None,
) -> Tensor:
    """K3 rejection sampling: keep iff mean_t (e^Δ − 1 − Δ) ≤ threshold (verl ``seq_mean_k3``; §1.3).

    Math:
        k3[b,t] = exp(Δ) − 1 − Δ  (E_μ[k3] = KL(μ ‖ π_train));  keep = Σ m k3 / Σ m ≤ threshold

    Returns:
        ``keep [B] bool``. Defaults: threshold = 0.01 (verl ``decoupled_k3_rs``; typical 0.001–0.01).
    """
    if threshold < 0:
        raise ValueError(f"threshold: expected a value >= 0, got {threshold}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    delta = rollout_log_ratio(log_probs, rollout_log_probs, bool_mask)
    k3 = torch.where(bool_mask, delta.exp() - 1.0 - delta, 0.0)  # k3 = ρ − 1 − log ρ
    mean_k3 = _sequence_log_ratio(k3, bool_mask, trajectory_ids, mean=True)
    return mean_k3 <= threshold


@torch.no_grad()
def token_veto_mask(
    log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, *, threshold: float = 1e-4
) -> Tensor:
    """Token veto: drop a row if any valid token has ratio π_train/μ < threshold (KernelGYM; §2.2).

    Math:
        keep[b] = not any_t (mask[b,t] and Δ[b,t] < log threshold)

    The granularity is the *row*: in Dr.Kernel's multi-turn layout a row is one turn, so a veto
    drops that turn only, not the trajectory (spec §12 gotcha 3).

    Returns:
        ``keep [B] bool``. Defaults: threshold = 1e-4 (Dr.Kernel ``ROLLOUT_TOKEN_VETO_THRESHOLD``).
    """
    if threshold <= 0:
        raise ValueError(f"threshold: expected a value > 0, got {threshold}")
    bool_mask, _ = _inputs(log_probs, rollout_log_probs, mask)
    delta = rollout_log_ratio(log_probs, rollout_log_probs, bool_mask)
    vetoed = bool_mask & (delta < math.log(threshold))
    return ~vetoed.any(dim=-1)


@torch.no_grad()
def mrs_mask(
    log_probs_old: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    trajectory_ids: object | None = None,
    *,
    lower: float = 0.999,
    upper: float = 1.001,
    veto_threshold: float | None = 1e-4,
) -> Tensor:
    """Dr.Kernel mismatch rejection sampling, "MRS" (arXiv 2602.05885; KernelGYM ``mismatch_helper``; §2.2).

    Math:
        keep_traj = lower ≤ exp(mean Δ over all valid tokens of all rows of the trajectory) ≤ upper
        keep_row  = no valid token of the row has exp(Δ) < veto_threshold
        keep = keep_traj & keep_row,   Δ = log_probs_old − rollout_log_probs, unclamped (KernelGYM
        averages the raw log-ratios; only the mean is clamped to ±20, which cannot change a decision)

    Args:
        log_probs_old: ``[B, L] float`` trainer recompute π_old (decoupled mode).
        rollout_log_probs: ``[B, L] float`` engine log-probs μ.
        mask: ``[B, L] bool`` response mask (already multiplied by the turn ``loss_mask``).
        trajectory_ids: ``[B] int``; the turn rows of one trajectory share an id (Dr.Kernel layout:
            row = traj·K + k → ``torch.arange(B) // K``). None: each row is its own trajectory.
        lower, upper: geometric-mean bounds; veto_threshold: None disables the veto.

    Returns:
        ``keep [B] bool`` per row. Multiply it into the *loss* mask only; keep TRLOO's
        ``turn_mask`` unchanged so rejected turns still count in their peers' baselines.

    Defaults:
        0.999 / 1.001 and veto 1e-4 (Dr.Kernel 8B/14B scripts). No IS weights (``ROLLOUT_IS=null``).
    """
    keep = geometric_rs_mask(
        log_probs_old, rollout_log_probs, mask, lower=lower, upper=upper, trajectory_ids=trajectory_ids,
        clamp_tokens=False,
    )
    if veto_threshold is not None:
        keep = keep & token_veto_mask(log_probs_old, rollout_log_probs, mask, threshold=veto_threshold)
    return keep


def apply_row_mask(mask: Tensor, keep: Tensor) -> Tensor:
    """Zero the rows of a token mask where ``keep`` is False (RS only ever edits the mask).

    Args:
        mask: ``[B, L]`` bool or numeric mask; keep: ``[B] bool`` (or 0/1).

    Returns:
        ``[B, L]`` in ``mask``'s dtype: ``mask & keep[:, None]`` (bool) or ``mask · keep[:, None]``.
    """
    check_ndim(mask, 2, "mask", "[B, L]")
    keep_bool = as_bool_mask(keep, "keep", (mask.shape[0],))
    if mask.dtype == torch.bool:
        return mask & keep_bool[:, None]
    return mask * keep_bool[:, None].to(mask.dtype)
