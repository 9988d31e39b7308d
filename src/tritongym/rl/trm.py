"""Trust Region Masking (TRM): drop whole sequences whose token divergence leaves a trust region.

Family: training–inference mismatch correction by *sequence* masking.

References: Li, Liu, Xu, Tong, Li, (Liu), Wang, *Trust Region Masking*, arXiv 2512.23075 (paper
LaTeX read via the spec sheet; ``rl-algorithms.md`` §4): Algorithm (TRM-Max: M = 1[max_t
D_KL(c_t) ≤ δ]), the sample-based criteria of verl PR #4544 (``seq_max_k2``, ``seq_mean_k3``), the
length-neutral variant LN-TRM and SER (appendix), and the bounds table §4.2.

Math (ℓ_t = log π_train(y_t) − log π_roll(y_t), clamped to ±20; m the mask):

    k2_t = ½ ℓ_t²                       symmetric in ρ ↔ 1/ρ; used for the max criterion
    k3_t = e^{ℓ_t} − 1 − ℓ_t            E_{π_roll}[k3] = KL(π_roll ‖ π_train); used for the mean
    M_max = 1[max_t m k2_t ≤ δ_max],  M_avg = 1[Σ m k3 / Σ m ≤ δ_avg],  M = M_max · M_avg
    exact: M = 1[max_t KL(π_roll(·|c_t) ‖ π_train(·|c_t)) ≤ δ] from full logits
    loss = (1/N) Σ_i M_i ℓ_i  — normalised by the *total* batch N, not by Σ M (spec §12 gotcha 7)

The rigorous guarantee holds only for the exact (full-vocabulary) criterion; k2/k3 are heuristics.
Deliberately left out: the data-dependent adaptive bound B_Adap (needs per-position expectations).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import SAFETY_BOUND, as_bool_mask, check_floating, check_ndim, check_shape, compute_dtype
from ._vocab import DEFAULT_CHUNK_SIZE, vocab_reductions
from .policy_loss import aggregate_loss

__all__ = [
    "ln_trm_mask",
    "ln_trm_normaliser",
    "ser_mask",
    "trm_aggregate_loss",
    "trm_bounds",
    "trm_exact_mask",
    "trm_mask",
]


def _log_ratio(log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    check_ndim(log_probs, 2, "log_probs", "[B, L]")
    check_floating(log_probs, "log_probs")
    check_shape(rollout_log_probs, log_probs.shape, "rollout_log_probs")
    bool_mask = as_bool_mask(mask, "mask", log_probs.shape)
    dtype = compute_dtype(log_probs)
    ell = (log_probs.detach().to(dtype) - rollout_log_probs.detach().to(dtype)).clamp(
        -SAFETY_BOUND, SAFETY_BOUND
    )
    return torch.where(bool_mask, ell, 0.0), bool_mask  # ℓ, 0 on pads


@torch.no_grad()
def trm_mask(
    log_probs: Tensor,
    rollout_log_probs: Tensor,
    mask: Tensor,
    *,
    max_k2: float | None = 0.05,
    mean_k3: float | None = 0.001,
) -> Tensor:
    """Sample-based TRM sequence mask, max-k2 and/or mean-k3 criteria (arXiv 2512.23075 §TRM; spec §4.3).

    Math:
        ℓ = log_probs − rollout_log_probs (clamped ±20)
        keep = [max_t ½ℓ_t² ≤ max_k2] ∧ [mean_t (e^ℓ_t − 1 − ℓ_t) ≤ mean_k3]  (valid tokens only)

    Args:
        log_probs: ``[B, L] float`` training-side log-probs (π_old, or π_θ in bypass mode).
        rollout_log_probs: ``[B, L] float`` rollout-engine log-probs.
        mask: ``[B, L] bool`` (or 0/1).
        max_k2: δ_max for TRM-Max, or None to disable; mean_k3: δ_avg for TRM-Avg, or None.

    Returns:
        ``keep [B] bool``; a row without valid tokens is kept (it contributes nothing).
        Aggregate with ``trm_aggregate_loss`` so that the loss divides by the total batch.

    Defaults:
        δ_max = 0.05, δ_avg = 0.001: the paper's stabilising values for each criterion (Qwen3-8B,
        spec §4.3(c)); both on = verl ``rollout_rs="seq_max_k2,seq_mean_k3"``.
    """
    ell, bool_mask = _log_ratio(log_probs, rollout_log_probs, mask)
    keep = torch.ones(ell.shape[0], dtype=torch.bool, device=ell.device)
    if max_k2 is not None:
        if max_k2 < 0:
            raise ValueError(f"max_k2: expected a value >= 0 or None, got {max_k2}")
        k2 = 0.5 * ell * ell  # k2_t = ½ℓ², 0 on pads
        keep &= k2.amax(dim=-1) <= max_k2
    if mean_k3 is not None:
        if mean_k3 < 0:
            raise ValueError(f"mean_k3: expected a value >= 0 or None, got {mean_k3}")
        k3 = torch.where(bool_mask, ell.exp() - 1.0 - ell, 0.0)  # k3_t = ρ − 1 − log ρ
        count = bool_mask.sum(-1)
        mean = k3.sum(-1) / count.clamp_min(1)
        keep &= mean <= mean_k3
    return keep


@torch.no_grad()
def trm_exact_mask(
    logits: Tensor,
    rollout_logits: Tensor,
    mask: Tensor,
    *,
    delta: float = 0.05,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> Tensor:
    """Exact TRM-Max from full logits: max_t KL(π_roll ‖ π_train) ≤ δ (arXiv 2512.23075; spec §4.3).

    Math:
        KL_t = Σ_v π_roll(v|c_t)·(log π_roll(v|c_t) − log π_train(v|c_t)),  chunked over positions
        and vocabulary (``_vocab`` online reduction); keep = max_{t valid} KL_t ≤ delta

    Args:
        logits: ``[B, L, V] float`` training-side logits; rollout_logits: same shape, the engine's.
        mask: ``[B, L] bool``; delta: δ bound on the per-token KL.
        temperature, chunk_size, vocab_chunk_size: as in ``otb.sum_pi_squared``.

    Returns:
        ``keep [B] bool``.

    Defaults:
        delta = 0.05 (the paper's δ for TRM-Max; the experiments used the k2 estimate of it).
        Precision: float32 cancellation in lse_p − lse_q limits KL to ≈1e-6 absolute.
    """
    check_ndim(logits, 3, "logits", "[B, L, V]")
    bool_mask = as_bool_mask(mask, "mask", logits.shape[:2])
    if delta < 0:
        raise ValueError(f"delta: expected a value >= 0, got {delta}")
    kl = vocab_reductions(
        rollout_logits,
        other_logits=logits,
        temperature=temperature,
        chunk_size=chunk_size,
        vocab_chunk_size=vocab_chunk_size,
    )["kl"]  # KL(π_roll ‖ π_train) per position, [B, L]
    return torch.where(bool_mask, kl, 0.0).amax(dim=-1) <= delta


def ln_trm_normaliser(length: int | Tensor, delta: float) -> Tensor:
    """Z(T) = Σ_{t=1..T} min(1, √((T − t)·δ/2)) of LN-TRM (arXiv 2512.23075 appendix; spec §4.3).

    Args:
        length: sequence length(s) T (int or ``[B] int`` tensor); delta: token KL bound δ > 0.

    Returns:
        float64 tensor of ``length``'s shape. Fixtures: Z(4096, 1e-4) = 1235.53, Z(4, 0.5) = 2.07313.
    """
    lengths = torch.as_tensor(length, dtype=torch.float64)
    t_max = int(lengths.max()) if lengths.numel() else 0
    t = torch.arange(1, t_max + 1, dtype=torch.float64)  # t = 1..T_max
    weights = torch.clamp(torch.sqrt((lengths[..., None] - t).clamp_min(0.0) * delta / 2.0), max=1.0)
    weights = torch.where(t <= lengths[..., None], weights, 0.0)
    return weights.sum(-1)


@torch.no_grad()
def ln_trm_mask(
    log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, *, delta: float, threshold: float
) -> Tensor:
    """Length-neutral TRM: keep iff W(y)/Z(T) ≤ threshold (arXiv 2512.23075 appendix LN-TRM; spec §4.3).

    Math:
        t = rank of the token among the row's valid tokens (1..T), T = Σ_t m
        W(y) = Σ_t |ρ_t − 1|·min(1, √((T − t)·delta/2));  keep = W/Z(T) ≤ threshold

    Returns:
        ``keep [B] bool``. No defaults: the spec sheet gives none for δ or δ_W.
    """
    if delta <= 0 or threshold < 0:
        raise ValueError(f"delta, threshold: expected delta > 0 and threshold >= 0, got {delta}, {threshold}")
    ell, bool_mask = _log_ratio(log_probs, rollout_log_probs, mask)
    f64 = torch.float64
    m = bool_mask.to(f64)
    length = m.sum(-1)  # T per row
    rank = m.cumsum(-1)  # t for valid tokens
    weight = torch.clamp(torch.sqrt((length[:, None] - rank).clamp_min(0.0) * delta / 2.0), max=1.0)
    w = (m * (ell.to(f64).exp() - 1.0).abs() * weight).sum(-1)  # W(y)
    z = (m * weight).sum(-1)  # Z(T)
    ratio = torch.where(z > 0, w / z.clamp_min(1e-300), 0.0)
    return ratio <= threshold


@torch.no_grad()
def ser_mask(
    log_probs: Tensor, rollout_log_probs: Tensor, mask: Tensor, *, threshold: float = 0.05
) -> Tensor:
    """SER, the simplest TRM variant: keep iff mean_t |ρ_t − 1| ≤ threshold (spec §4.3).

    Returns:
        ``keep [B] bool``. Defaults: 0.05, inside the paper's suggested range [0.03, 0.10].
    """
    if threshold < 0:
        raise ValueError(f"threshold: expected a value >= 0, got {threshold}")
    ell, bool_mask = _log_ratio(log_probs, rollout_log_probs, mask)
    dev = torch.where(bool_mask, (ell.exp() - 1.0).abs(), 0.0)  # |ρ − 1|
    return dev.sum(-1) / bool_mask.sum(-1).clamp_min(1) <= threshold


def trm_aggregate_loss(
    loss: Tensor, mask: Tensor, keep: Tensor, mode: str = "seq-mean-token-sum", **kwargs: object
) -> Tensor:
    """Aggregate a token loss with rejected sequences zeroed, normalised by the *total* batch (§4.3).

    Math:
        L = aggregate(loss, mask ∧ keep) with the normalisers of the unmasked batch:
        seq-mean-*: divide by N = #rows with valid tokens *before* rejection (not Σ keep);
        token-mean: divide by the token count before rejection.

    Args:
        loss: ``[B, L]`` token loss; mask: ``[B, L] bool``; keep: ``[B] bool`` (a TRM mask);
        mode: an aggregation mode; kwargs: passed to ``aggregate_loss`` (e.g. ``max_length``).

    Returns:
        0-d tensor.
    """
    bool_mask = as_bool_mask(mask, "mask")
    keep_bool = as_bool_mask(keep, "keep", (bool_mask.shape[0],))
    num_sequences = kwargs.pop("num_sequences", None)
    num_tokens = kwargs.pop("num_tokens", None)
    if num_sequences is None:
        num_sequences = int(bool_mask.any(dim=-1).sum())
    if num_tokens is None:
        num_tokens = int(bool_mask.sum())
    return aggregate_loss(
        loss,
        bool_mask & keep_bool[:, None],
        mode,
        num_sequences=num_sequences,  # type: ignore[arg-type]
        num_tokens=num_tokens,  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def trm_bounds(length: int, *, delta: float, eps: float, kl_seq: float, tv_seq: float) -> dict[str, float]:
    """The surrogate-error bounds of arXiv 2512.23075 §4.2 (spec §4.2 table; check 6).

    Math (T = length, δ = max token KL, ε = max token TV):
        classical = T(T−1)δ  (= the KL form of 2T(T−1)ε²)
        pm_kl  = 4 min(1,√(δ/2)) Σ_t min(1, √((t−1)δ/2))
        pm_tv  = 4 min(1,ε) Σ_t min(1, √((t−1)δ/2))
        mix_kl = 4T min(1,√(δ/2)) min(1,√(kl_seq/2))
        mix_tv = 4T min(1,ε) min(1, tv_seq)
        coupling = 4 min(1,ε) Σ_t min(1, (t−1)ε);   unified = min of the five tightest forms

    Returns:
        dict of floats. Fixture T = 4096, δ = 1e-4, ε = 5e-3, kl_seq = 0.01, tv_seq = 0.05:
        1677.3, 34.95, 24.71, 8.192, 4.096, 79.9.
    """
    if length < 1:
        raise ValueError(f"length: expected a value >= 1, got {length}")
    t = torch.arange(1, length + 1, dtype=torch.float64)
    ctx_kl = torch.clamp(torch.sqrt((t - 1) * delta / 2.0), max=1.0).sum().item()
    ctx_tv = torch.clamp((t - 1) * eps, max=1.0).sum().item()
    bounds = {
        "classical": length * (length - 1) * delta,
        "pm_kl": 4 * min(1.0, math.sqrt(delta / 2)) * ctx_kl,
        "pm_tv": 4 * min(1.0, eps) * ctx_kl,
        "mix_kl": 4 * length * min(1.0, math.sqrt(delta / 2)) * min(1.0, math.sqrt(kl_seq / 2)),
        "mix_tv": 4 * length * min(1.0, eps) * min(1.0, tv_seq),
        "coupling": 4 * min(1.0, eps) * ctx_tv,
    }
    bounds["unified"] = min(v for k, v in bounds.items() if k != "classical")
    return bounds
