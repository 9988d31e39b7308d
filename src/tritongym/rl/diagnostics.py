"""Diagnostics: collision probability, entropy, token KL, logit-update norm, mismatch metrics.

Family: read-only statistics to log (no gradient anywhere).

References:

* Logit dynamics — Li, arXiv 2506.12912 (abstract; derivation in ``rl-algorithms.md`` §8.1,
  verified numerically, check 1): one sampled action c with advantage A and logit step η moves
  the logits by Δz = ηA(e_c − p), so ‖Δz‖₂ = η|A|·√(1 − 2P_c + C(P)), C(P) = Σ_v p_v².
* Mismatch metrics — verl ``rollout_corr_helper.compute_offpolicy_metrics`` and KernelGYM
  ``mismatch_helper`` (spec §1.3 "Diagnostics", §4.3 Δ_PPL).

Metric names (``mismatch/…``) are listed with their formulas in ``docs/rl.md``. Full-vocabulary
statistics use the chunked engine of ``_vocab`` (no float32 ``[B, T, V]`` beyond one chunk).
Deliberately left out: the OTB variance-proxy metrics (they need the trainer's gradient norm).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import SAFETY_BOUND, as_bool_mask, check_ndim, check_shape, compute_dtype
from ._vocab import DEFAULT_CHUNK_SIZE, flatten_logits, vocab_reductions

__all__ = [
    "collision_probability",
    "logit_update_norm",
    "mismatch_metrics",
    "token_entropy",
    "token_kl",
]


def collision_probability(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> Tensor:
    """Collision probability C(P) = Σ_v p_v² = e^{−H₂} per position (Li arXiv 2506.12912; spec §8.1).

    Same quantity as OTB's Σπ² (``otb.sum_pi_squared``); E_{c~p}‖e_c − p‖² = 1 − C(P).

    Returns:
        ``[...]`` float32 (float64 for float64 logits), no grad.
    """
    return vocab_reductions(
        logits,
        temperature=temperature,
        chunk_size=chunk_size,
        vocab_chunk_size=vocab_chunk_size,
        collision=True,
    )["sum_pi_squared"]


def token_entropy(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> Tensor:
    """Shannon entropy H = −Σ_v p_v log p_v per position, chunked (EMPG input; spec §8.2(b)).

    Math:
        H = logsumexp(z) − Σ_v p_v z_v, computed online as log s1 − t/s1 (see ``_vocab``)

    Returns:
        ``[...]`` float32 (float64 for float64 logits), no grad; in [0, log V].
    """
    return vocab_reductions(
        logits,
        temperature=temperature,
        chunk_size=chunk_size,
        vocab_chunk_size=vocab_chunk_size,
        entropy=True,
    )["entropy"]


def token_kl(
    logits_p: Tensor,
    logits_q: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> Tensor:
    """Exact per-position KL(softmax(logits_p) ‖ softmax(logits_q)), chunked (TRM exact; spec §4.3).

    Math:
        KL = Σ_v p_v (z_p,v − z_q,v) − logsumexp(z_p) + logsumexp(z_q), clamped at 0

    Returns:
        ``[...]`` float32 (float64 for float64 logits), no grad.
    """
    return vocab_reductions(
        logits_p,
        other_logits=logits_q,
        temperature=temperature,
        chunk_size=chunk_size,
        vocab_chunk_size=vocab_chunk_size,
    )["kl"]


@torch.no_grad()
def logit_update_norm(
    logits: Tensor,
    tokens: Tensor,
    advantages: Tensor,
    lr: float = 1.0,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> Tensor:
    """Norm of the logit update of one SGD step on A·log p_c (Li arXiv 2506.12912; spec §8.1(a)).

    Math:
        ‖Δz‖₂ = lr·|A|·√(1 − 2·P_c + C(P)),  P_c = softmax(z)[c],  C(P) = Σ_v p_v²

    Args:
        logits: ``[..., V] float``; tokens: ``[...] int`` sampled ids c; advantages: ``[...] float``.
        lr: η, the step size on the logits.

    Returns:
        ``[...]`` float32 (float64 for float64 logits), no grad.
    """
    flat, lead = flatten_logits(logits)
    check_shape(tokens, lead, "tokens")
    check_shape(advantages, lead, "advantages")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens: expected an integer dtype, got {tokens.dtype}")
    stats = vocab_reductions(
        logits,
        temperature=temperature,
        chunk_size=chunk_size,
        vocab_chunk_size=vocab_chunk_size,
        collision=True,
    )
    dtype = compute_dtype(logits)
    z_c = flat.gather(1, tokens.reshape(-1, 1).to(torch.int64))[:, 0].to(dtype).reshape(lead) / temperature
    p_c = (z_c - stats["logsumexp"]).exp()  # P_c
    sq = (1.0 - 2.0 * p_c + stats["sum_pi_squared"]).clamp_min(0.0)  # ‖e_c − p‖²
    return lr * advantages.to(dtype).abs() * sq.sqrt()


def _quantile(sorted_values: Tensor, q: float) -> Tensor:
    """Linear-interpolation quantile of an already sorted 1-D tensor (no torch.quantile size cap)."""
    n = sorted_values.numel()
    if n == 0:
        return torch.full((), math.nan, dtype=sorted_values.dtype, device=sorted_values.device)
    pos = q * (n - 1)
    lo, hi = int(math.floor(pos)), int(math.ceil(pos))
    frac = pos - lo
    return sorted_values[lo] * (1.0 - frac) + sorted_values[hi] * frac


@torch.no_grad()
def mismatch_metrics(
    log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    quantiles: tuple[float, ...] = (0.01, 0.5, 0.99),
) -> dict[str, Tensor]:
    """Training–inference mismatch metrics (verl ``compute_offpolicy_metrics``; spec §1.3, §4.3).

    Math (Δ = log_probs − rollout_log_probs on valid tokens, clamped ±20 before exp; ρ = e^Δ):
        mismatch/kl_k1        = mean(−Δ)                   direct estimate of KL(μ ‖ π_train)
        mismatch/kl_k2        = mean(½Δ²)
        mismatch/kl_k3        = mean(ρ − 1 − Δ)            unbiased estimate of KL(μ ‖ π_train)
        mismatch/chi2_token   = mean(ρ²) − 1
        mismatch/chi2_seq     = mean_seq(exp(2·Σ_t Δ)) − 1 (Σ clamped ±20)
        mismatch/ppl_ratio    = exp(mean_seq(mean_t log μ − mean_t log π_train))   = PPL_train/PPL_roll
        mismatch/log_ppl_abs_gap = mean_seq |mean_t log π_train − mean_t log μ|   (TRM's Δ_PPL)
        mismatch/ess          = 1 / mean((ρ/mean ρ)²)       normalised effective sample size ∈ (0, 1]
        mismatch/ratio_min, ratio_max, ratio_q<100·q>      token ratio extremes and quantiles

    Args:
        log_probs: ``[B, L] float`` trainer log-probs; rollout_log_probs: ``[B, L] float`` engine's.
        mask: ``[B, L] bool`` (or 0/1).
        quantiles: quantile levels in [0, 1] for ``ratio_q…`` (names use round(100·q)).

    Returns:
        dict of 0-d float32 (float64) tensors; quantiles and extremes are NaN without valid tokens.
    """
    check_ndim(log_probs, 2, "log_probs", "[B, L]")
    check_shape(rollout_log_probs, log_probs.shape, "rollout_log_probs")
    bool_mask = as_bool_mask(mask, "mask", log_probs.shape)
    for q in quantiles:
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"quantiles: expected levels in [0, 1], got {q}")
    dtype = compute_dtype(log_probs)
    lp = torch.where(bool_mask, log_probs.to(dtype), 0.0)
    lr = torch.where(bool_mask, rollout_log_probs.to(dtype), 0.0)
    delta = (lp - lr).clamp(-SAFETY_BOUND, SAFETY_BOUND)  # Δ, 0 on pads
    ratio = delta.exp()
    count = bool_mask.sum().clamp_min(1).to(dtype)

    def tmean(x: Tensor) -> Tensor:
        return torch.where(bool_mask, x, 0.0).sum() / count

    rows = bool_mask.any(dim=-1)
    n_rows = rows.sum().clamp_min(1).to(dtype)
    per_row = bool_mask.sum(-1).clamp_min(1).to(dtype)
    mean_lp = lp.sum(-1) / per_row
    mean_lr = lr.sum(-1) / per_row
    seq_log = delta.sum(-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    mean_ratio = tmean(ratio)
    out = {
        "mismatch/kl_k1": tmean(-delta),
        "mismatch/kl_k2": tmean(0.5 * delta * delta),
        "mismatch/kl_k3": tmean(ratio - 1.0 - delta),
        "mismatch/chi2_token": tmean(ratio * ratio) - 1.0,
        "mismatch/chi2_seq": torch.where(rows, (2.0 * seq_log).exp(), 0.0).sum() / n_rows - 1.0,
        "mismatch/ppl_ratio": (torch.where(rows, mean_lr - mean_lp, 0.0).sum() / n_rows).exp(),
        "mismatch/log_ppl_abs_gap": torch.where(rows, (mean_lp - mean_lr).abs(), 0.0).sum() / n_rows,
        "mismatch/ess": 1.0 / tmean((ratio / mean_ratio) ** 2),
    }
    valid_ratios = ratio[bool_mask].sort().values
    nan = torch.full((), math.nan, dtype=dtype, device=ratio.device)
    out["mismatch/ratio_min"] = valid_ratios[0] if valid_ratios.numel() else nan
    out["mismatch/ratio_max"] = valid_ratios[-1] if valid_ratios.numel() else nan
    for q in quantiles:
        out[f"mismatch/ratio_q{round(100 * q):02d}"] = _quantile(valid_ratios, q)
    return out
