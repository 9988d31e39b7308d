"""EMPG: Entropy-Modulated Policy Gradients for multi-step agents.

Family: step-level advantage modulation by policy uncertainty.

References: Wang, Liu, Fu, Li et al., *EMPG*, arXiv 2509.09265 (ICLR 2026) — abstract, project page
and secondary summaries only. The functional forms below are the spec sheet's reconstruction
(``rl-algorithms.md`` §8.2, tagged [R]); check them against the paper's §3 equations for g and f
before relying on exact equivalence. Motivation (paper Prop. 1, consistent with Li arXiv
2506.12912): E‖∇_z log π‖² = 1 − e^{−H₂}, so plain PG makes small updates on confident steps and
large ones on uncertain steps; EMPG re-weights towards confident steps.

Math (step k of trajectory i; H̃ normalised over all valid steps of the batch):

    H_k  = mean token entropy over the step's tokens
    H̃_k = (H_k − min H) / (max H − min H + ε)
    g_k  = exp(−κ H̃_k) / mean_batch exp(−κ H̃)                (self-calibrating, mean 1)
    f_k  = exp(−κ' H̃_{k+1})  (0 for the last step)            (future-clarity bonus)
    A_mod[i,k] = g_k·A_i + ζ·f_k;  optionally A_mod −= mean_batch A_mod

All statistics are computed without gradient (g, f are stop-gradient coefficients).
Deliberately left out: per-token modulation inside a step, and any paper-specific clipping.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import as_bool_mask, check_floating, check_ndim, check_shape, result_dtype

__all__ = ["empg_advantages", "step_mean_entropy"]


@torch.no_grad()
def step_mean_entropy(token_entropy: Tensor, step_ids: Tensor, num_steps: int) -> tuple[Tensor, Tensor]:
    """Mean token entropy per agent step (EMPG arXiv 2509.09265 step uncertainty H_k [R]; spec §8.2).

    Math:
        H[i,k] = Σ_t 1[step_ids[i,t] = k]·token_entropy[i,t] / Σ_t 1[step_ids[i,t] = k]

    Args:
        token_entropy: ``[n, L] float`` per-token entropies (``diagnostics.token_entropy``).
        step_ids: ``[n, L] int``, the step index of each token, −1 for tokens in no step
            (prompt, tool output, padding).
        num_steps: K, the number of step slots.

    Returns:
        ``(H [n, K], step_mask [n, K] bool)``; H = 0 where a step has no token.
    """
    check_ndim(token_entropy, 2, "token_entropy", "[n, L]")
    check_floating(token_entropy, "token_entropy")
    check_shape(step_ids, token_entropy.shape, "step_ids")
    if step_ids.is_floating_point():
        raise ValueError(f"step_ids: expected an integer dtype, got {step_ids.dtype}")
    if num_steps < 1:
        raise ValueError(f"num_steps: expected a positive int, got {num_steps}")
    ids = step_ids.to(torch.int64)
    if bool((ids >= num_steps).any()) or bool((ids < -1).any()):
        raise ValueError(f"step_ids: expected values in [-1, {num_steps}), got a value outside it")
    n = token_entropy.shape[0]
    f64 = torch.float64
    in_step = ids >= 0
    slot = torch.where(in_step, ids, 0)
    ent = torch.where(in_step, token_entropy.to(f64), 0.0)
    sums = torch.zeros(n, num_steps, dtype=f64, device=ent.device).scatter_add_(1, slot, ent)
    counts = torch.zeros_like(sums).scatter_add_(1, slot, in_step.to(f64))
    mean = torch.where(counts > 0, sums / counts.clamp_min(1.0), 0.0)  # H[i,k]
    return mean.to(result_dtype(token_entropy)), counts > 0


@torch.no_grad()
def empg_advantages(
    step_entropy: Tensor,
    step_mask: Tensor,
    advantages: Tensor,
    *,
    kappa: float = 1.0,
    kappa_next: float = 1.0,
    zeta: float = 0.05,
    eps: float = 1e-8,
    zero_mean: bool = True,
) -> Tensor:
    """Entropy-modulated step advantages (EMPG arXiv 2509.09265 [R]; spec §8.2(a)).

    Math:
        H̃ = (H − min_valid H)/(max_valid H − min_valid H + eps)
        g = exp(−kappa·H̃) / mean_valid exp(−kappa·H̃)
        f[i,k] = exp(−kappa_next·H̃[i,k+1]) if step k+1 of i is valid, else 0
        A_mod[i,k] = g[i,k]·advantages[i] + zeta·f[i,k]    (valid steps; 0 elsewhere)
        zero_mean: A_mod −= mean_valid A_mod

    Args:
        step_entropy: ``[n, K] float`` mean token entropy per step (``step_mean_entropy``).
        step_mask: ``[n, K] bool`` (or 0/1), valid steps (a prefix of each row).
        advantages: ``[n] float`` trajectory-level outcome advantages (GRPO/RLOO/...).
        kappa, kappa_next, zeta: κ, κ', ζ. eps: guards all-equal entropies (then g ≡ 1).
        zero_mean: final batch-level centring.

    Returns:
        ``[n, K]`` modulated advantages, the dtype of ``step_entropy``; broadcast each over its
        step's tokens.

    Defaults:
        κ = κ' = 1, ζ = 0.05: the spec sheet's fixture values; the paper's appendix values were not
        accessible. Before centring, sign(g·A) = sign(A) since g > 0.
    """
    check_ndim(step_entropy, 2, "step_entropy", "[n, K]")
    check_floating(step_entropy, "step_entropy")
    mask = as_bool_mask(step_mask, "step_mask", step_entropy.shape)
    check_shape(advantages, (step_entropy.shape[0],), "advantages")
    if eps <= 0:
        raise ValueError(f"eps: expected a value > 0, got {eps}")
    f64 = torch.float64
    h = step_entropy.to(f64)
    if not bool(mask.any()):
        return torch.zeros_like(step_entropy, dtype=result_dtype(step_entropy))
    h_min = torch.where(mask, h, torch.inf).min()
    h_max = torch.where(mask, h, -torch.inf).max()
    h_norm = torch.where(mask, (h - h_min) / (h_max - h_min + eps), 0.0)  # H̃
    raw = torch.exp(-kappa * h_norm)  # exp(−κ H̃)
    g = raw / raw[mask].mean()  # g, batch mean 1 over valid steps
    next_valid = torch.zeros_like(mask)
    next_valid[:, :-1] = mask[:, 1:]
    h_next = torch.zeros_like(h_norm)
    h_next[:, :-1] = h_norm[:, 1:]
    f = torch.where(next_valid, torch.exp(-kappa_next * h_next), 0.0)  # f(H̃_{k+1})
    a_mod = g * advantages.to(f64)[:, None] + zeta * f  # A_mod
    if zero_mean:
        a_mod = a_mod - a_mod[mask].mean()
    return torch.where(mask, a_mod, 0.0).to(result_dtype(step_entropy))
