"""Hybrid online RL + imitation: the dense (per-token, exact) KL gradient and the sparse returns.

Family: on-policy distillation mixed with task reward (optional item of the issue).

References: Li, Li, Liu, *A Note on Hybrid Online Reinforcement and Imitation Learning for LLMs*,
arXiv 2512.23097 — abstract only; the decomposition below is the spec sheet's derivation
(``rl-algorithms.md`` §7, tagged [R]) verified there against finite differences (check 10).

Objective J(θ) = E_{y~π_θ}[R] − β·KL(P^{π_θ} ‖ P^{π_E}) (trajectory-level reverse KL to a teacher
π_E). With k_t(c) = KL(π_θ(·|c) ‖ π_E(·|c)), ∇J = g_sparse + g_dense:

    g_sparse = E[Σ_t ∇log π_θ(y_t|c_t)·(R − β Σ_{t' > t} k_{t'})]   (strictly later steps)
    g_dense  = −β E[Σ_t ∇_θ k_t(c_t)]   with c_t held fixed; at the logits
    ∂KL(p‖q)/∂z_v = p_v (log p_v − log q_v − KL(p‖q))              (Σ_v = 0, vanishes iff p = q)

Implementation: ``dense_kl_loss`` returns β·Σ_t m_t k_t with a chunked custom backward that
writes exactly that closed form into the logits' gradient (no float32 [B, T, V] tensor beyond one
chunk); ``sparse_kl_returns`` gives the per-token return for the REINFORCE part.
Deliberately left out: top-k teacher logits (an approximation of q).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import as_bool_mask, check_ndim, check_shape, compute_dtype
from ._vocab import DEFAULT_CHUNK_SIZE, check_chunks, flatten_logits, row_chunks, upcast, vocab_reductions

__all__ = ["dense_kl_loss", "sparse_kl_returns"]


class _DenseKL(torch.autograd.Function):
    """β·Σ_t m_t KL(softmax(z_t) ‖ softmax(zq_t)) with the closed-form, chunked logit gradient."""

    @staticmethod
    def forward(ctx, flat, flat_teacher, weights, temperature, chunk_size):  # type: ignore[override]
        kl = vocab_reductions(
            flat, other_logits=flat_teacher, temperature=temperature, chunk_size=chunk_size
        )["kl"]
        ctx.save_for_backward(flat, flat_teacher, weights, kl)
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        return (weights * kl).sum()  # β Σ m KL

    @staticmethod
    def backward(ctx, grad_out):  # type: ignore[override]
        flat, flat_teacher, weights, kl = ctx.saved_tensors
        temperature = ctx.temperature
        dtype = kl.dtype
        grad = torch.empty_like(flat)
        scale = (grad_out.to(dtype) * weights / temperature)[:, None]  # d/dz of z/T
        for r0, r1 in row_chunks(flat.shape[0], ctx.chunk_size):
            log_p = upcast(flat[r0:r1], temperature, dtype).log_softmax(-1)
            log_q = upcast(flat_teacher[r0:r1], temperature, dtype).log_softmax(-1)
            # γ = p ⊙ (log p − log q − KL), then × β m / T
            gamma = log_p.exp().mul_(log_p.sub_(log_q).sub_(kl[r0:r1, None]))
            grad[r0:r1] = gamma.mul_(scale[r0:r1])
        return grad, None, None, None, None


def dense_kl_loss(
    logits: Tensor,
    teacher_logits: Tensor,
    mask: Tensor,
    beta: float = 1.0,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> Tensor:
    """The dense imitation term β·Σ_t m_t KL(π_θ(·|c_t) ‖ π_E(·|c_t)) (arXiv 2512.23097 [R]; spec §7).

    Minimising it applies g_dense: its gradient w.r.t. the student logits is exactly
    β·m_t·p ⊙ (log p − log q − KL) / temperature (closed form; the teacher gets no gradient).

    Args:
        logits: ``[..., V] float`` student logits (requires grad); teacher_logits: same shape.
        mask: ``[...] bool`` positions to include (the policy-generated tokens).
        beta: β ≥ 0, the imitation weight. Add it to the RL loss (divide by your normaliser).

    Returns:
        0-d float32 (float64 for float64 logits) tensor: β Σ_t m_t k_t.

    Defaults:
        β = 1.0 is a placeholder: the spec sheet suggests sweeping β ∈ {0.1, 1}.
    """
    flat, lead = flatten_logits(logits)
    check_shape(teacher_logits, logits.shape, "teacher_logits")
    bool_mask = as_bool_mask(mask, "mask", lead)
    if beta < 0:
        raise ValueError(f"beta: expected a value >= 0, got {beta}")
    check_chunks(chunk_size, None)
    weights = beta * bool_mask.reshape(-1).to(compute_dtype(logits))
    return _DenseKL.apply(flat, teacher_logits.detach().reshape(flat.shape), weights, temperature, chunk_size)


@torch.no_grad()
def sparse_kl_returns(rewards: Tensor, token_kl: Tensor, mask: Tensor, beta: float = 1.0) -> Tensor:
    """Per-token return of the sparse (Monte-Carlo) part: R − β·Σ_{t' > t} k_{t'} (spec §7(a) [R]).

    Use it as the advantage (minus any baseline) of a REINFORCE loss next to ``dense_kl_loss``.
    The sum is over strictly later steps. Adding k_t itself would not bias the estimate (k_t depends
    on c_t only, so it is a state-dependent baseline), only add variance; the spec sheet's §7(d)3
    says that variant fails check 10, which exact enumeration contradicts (see the tests).

    Args:
        rewards: ``[B] float`` sequence rewards; token_kl: ``[B, L] float`` k_t per position
            (``diagnostics.token_kl(student, teacher)``); mask: ``[B, L] bool``; beta: β.

    Returns:
        ``[B, L]`` float32 (float64 for float64 input); 0 on masked positions.
    """
    check_ndim(token_kl, 2, "token_kl", "[B, L]")
    bool_mask = as_bool_mask(mask, "mask", token_kl.shape)
    check_shape(rewards, (token_kl.shape[0],), "rewards")
    dtype = compute_dtype(token_kl)
    k = torch.where(bool_mask, token_kl.to(dtype), 0.0)
    later = k.flip(-1).cumsum(-1).flip(-1) - k  # Σ_{t' > t} k_{t'}
    return torch.where(bool_mask, rewards.to(dtype)[:, None] - beta * later, 0.0)
