"""Dynamic Vocabulary Pruning (DVP): log-probs renormalised over a "safe" vocabulary.

Family: training–inference mismatch correction at the distribution level.

References: *Dynamic Vocabulary Pruning: Stable LLM-RL by Taming the Tail* (v1 *Taming the Tail*),
arXiv 2512.23087 — abstract and secondary summaries only; the safe-set rule and the pruned policy
below are the spec sheet's reconstruction (``rl-algorithms.md`` §5(a)2–3, tagged [R]); check them
against the paper's §3 ("DVP Algorithm") before relying on exact equivalence. vLLM ``min_p`` with
``logprobs_mode="processed_logprobs"`` implements the same relative rule on the rollout side.

Math:

    V_S(c) = {v : π(v|c) ≥ α·max_u π(u|c)}  ⇔  z_v ≥ max_u z_u + log α        (min-p rule)
    π_S(v|c) = π(v|c)·1[v ∈ V_S] / S(c),   S(c) = Σ_{u∈V_S} π(u|c)
    log π_S(y) = z_y − logsumexp_{v∈V_S} z_v = log π(y) − log S
    ∂ log π_S(y) / ∂z_v = 1[v = y] − π_S(v)  on V_S,   0 outside V_S

Why: an engine-vs-trainer logit perturbation e moves log p_v by ≈ Σ_u p_u(e_v − e_u), i.e. by
O(κ(1 − p_v)): negligible on the head, O(κ) on the tail; sampled tail tokens then carry biased
ratios. Using π_S on *both* sides removes the tail, and the relative rule depends only on logit
differences to the argmax, so both engines pick the same set except at the boundary.

Memory: the trainer path is an ``autograd.Function`` that visits the logits in row chunks (and
optional vocabulary slices), and recomputes the chunk in backward, so no float32 ``[B, T, V]``
tensor exists beyond one chunk; the gradient is written straight into a tensor of the logits'
dtype.

Deliberately left out: top-p or absolute-threshold rules as built-ins (pass a precomputed
``safe_mask`` instead), and the paper's bias-bound constants.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ._checks import check_floating, check_ndim, check_positive, check_shape, check_tensor, compute_dtype
from ._vocab import (
    DEFAULT_CHUNK_SIZE,
    Workspace,
    check_chunks,
    flatten_logits,
    log_alpha,
    row_chunks,
    upcast,
    vocab_slices,
)

__all__ = [
    "DVPLogProbs",
    "OUT_OF_SET_LOG_PROB",
    "dvp_log_probs",
    "dvp_log_probs_from_topk",
    "min_p_safe_mask",
]

#: Log-prob reported for a sampled token outside the safe set. Finite on purpose: differences of
#: two fills are 0 and differences with real log-probs are clamped to ±20 downstream, so a masked
#: position can never turn a loss or a metric into NaN. Always AND ``in_safe`` into the loss mask.
OUT_OF_SET_LOG_PROB = -1.0e4


class DVPLogProbs(NamedTuple):
    """Result of ``dvp_log_probs`` / ``dvp_log_probs_from_topk`` (all tensors of the tokens' shape)."""

    log_probs: Tensor  #: log π_S(y); OUT_OF_SET_LOG_PROB where y ∉ V_S; differentiable (trainer path)
    in_safe: Tensor  #: bool, y ∈ V_S; AND it into the loss mask
    log_safe_mass: Tensor  #: log S(c) ≤ 0; pruned mass ω = 1 − exp(log S); no grad


def min_p_safe_mask(logits: Tensor, alpha: float, *, temperature: float = 1.0) -> Tensor:
    """The min-p safe set V_S as a bool mask (arXiv 2512.23087 [R]; spec §5(a)2).

    Math:
        safe[..., v] = z_v ≥ max_u z_u + log alpha,  z = logits / temperature

    Materialises ``[..., V]`` bool and one float32 copy: for tests and small inputs; the chunked
    path is ``dvp_log_probs``.

    Args:
        logits: ``[..., V] float``.
        alpha: relative threshold in (0, 1]; 1 keeps only the argmax (and ties).

    Returns:
        ``[..., V] bool``.
    """
    check_floating(check_tensor(logits, "logits"), "logits")
    check_positive(temperature, "temperature")
    z = upcast(logits.detach(), temperature, compute_dtype(logits))
    return z >= z.amax(dim=-1, keepdim=True) + log_alpha(alpha)


def _chunk_stats(
    ws: Workspace,
    flat: Tensor,
    rows: tuple[int, int],
    log_a: float | None,
    safe: Tensor | None,
    temperature: float,
    vocab_chunk_size: int | None,
    dtype: torch.dtype,
) -> tuple[Tensor, Tensor, Tensor]:
    """(threshold [r], logsumexp over V_S [r], logsumexp over V [r]) for one row chunk."""
    r0, r1 = rows
    vocab = flat.shape[1]
    # pass 1: the exact max on the native dtype (upcast and ÷T are monotone, so this is max z)
    m = None
    for v0, v1 in vocab_slices(vocab, vocab_chunk_size):
        chunk_max = flat[r0:r1, v0:v1].amax(dim=-1)
        m = chunk_max if m is None else torch.maximum(m, chunk_max)
    m = upcast(m, temperature, dtype)
    threshold = m + log_a if log_a is not None else torch.full_like(m, -math.inf)
    s_safe = torch.zeros_like(m)
    s_all = torch.zeros_like(m)
    for v0, v1 in vocab_slices(vocab, vocab_chunk_size):  # pass 2: full and masked sums, in place
        z = ws.upcast("z", flat[r0:r1, v0:v1], temperature, dtype)
        drop = _drop_mask(ws, z, threshold, safe, (r0, r1, v0, v1))
        e = z.sub_(m[:, None]).exp_()  # e^(z − max z)
        s_all += e.sum(-1)
        s_safe += e.masked_fill_(drop, 0.0).sum(-1)
    return threshold, m + s_safe.log(), m + s_all.log()  # (thr, lse_S, lse)


def _drop_mask(
    ws: Workspace, z: Tensor, threshold: Tensor, safe: Tensor | None, box: tuple[int, int, int, int]
) -> Tensor:
    """Bool ``[r, v]`` mask of pruned tokens (z < threshold [r], or not in ``safe``), in a workspace."""
    r0, r1, v0, v1 = box
    out = ws.take("drop", *z.shape, torch.bool)
    if safe is None:
        return torch.lt(z, threshold[:, None], out=out)
    return torch.logical_not(safe[r0:r1, v0:v1], out=out)


class _DVPLogProbFn(torch.autograd.Function):
    """Chunked log π_S(y) with a recomputing backward (never stores a float32 [N, V] tensor)."""

    @staticmethod
    def forward(ctx, flat, tokens, log_a, safe, temperature, chunk_size, vocab_chunk_size):  # type: ignore[override]
        dtype = compute_dtype(flat)
        n_rows = flat.shape[0]
        log_probs = torch.empty(n_rows, dtype=dtype, device=flat.device)
        in_safe = torch.empty(n_rows, dtype=torch.bool, device=flat.device)
        log_mass = torch.empty(n_rows, dtype=dtype, device=flat.device)
        lse_safe = torch.empty(n_rows, dtype=dtype, device=flat.device)
        thresholds = torch.empty(n_rows, dtype=dtype, device=flat.device)
        ws = Workspace(flat.device)
        for r0, r1 in row_chunks(n_rows, chunk_size):
            thr, lse_s, lse = _chunk_stats(
                ws, flat, (r0, r1), log_a, safe, temperature, vocab_chunk_size, dtype
            )
            tok = tokens[r0:r1]
            z_y = upcast(flat[r0:r1].gather(1, tok[:, None])[:, 0], temperature, dtype)  # z_y
            ok = z_y >= thr if safe is None else safe[r0:r1].gather(1, tok[:, None])[:, 0]
            log_probs[r0:r1] = torch.where(ok, z_y - lse_s, OUT_OF_SET_LOG_PROB)  # log π_S(y)
            in_safe[r0:r1] = ok
            log_mass[r0:r1] = (lse_s - lse).clamp_max(0.0)  # log S
            lse_safe[r0:r1] = lse_s
            thresholds[r0:r1] = thr
        ctx.save_for_backward(flat, tokens, lse_safe, thresholds, in_safe, *(() if safe is None else (safe,)))
        ctx.has_safe = safe is not None
        ctx.temperature = temperature
        ctx.chunk_size = chunk_size
        ctx.vocab_chunk_size = vocab_chunk_size
        ctx.mark_non_differentiable(in_safe, log_mass)
        return log_probs, in_safe, log_mass

    @staticmethod
    def backward(ctx, grad_log_probs, _grad_in_safe, _grad_log_mass):  # type: ignore[override]
        saved = ctx.saved_tensors
        flat, tokens, lse_safe, thresholds, in_safe = saved[:5]
        safe = saved[5] if ctx.has_safe else None
        temperature = ctx.temperature
        dtype = lse_safe.dtype
        grad = torch.empty_like(flat)  # logits dtype, the only [N, V] buffer; every chunk is written
        g_all = torch.where(in_safe, grad_log_probs.to(dtype), 0.0) / temperature  # d/dz of z/T
        n_rows, vocab = flat.shape
        ws = Workspace(flat.device)
        for r0, r1 in row_chunks(n_rows, ctx.chunk_size):
            g = g_all[r0:r1, None]
            tok = tokens[r0:r1, None]
            for v0, v1 in vocab_slices(vocab, ctx.vocab_chunk_size):
                z = ws.upcast("z", flat[r0:r1, v0:v1], temperature, dtype)
                drop = _drop_mask(ws, z, thresholds[r0:r1], safe, (r0, r1, v0, v1))
                pi_s = z.sub_(lse_safe[r0:r1, None]).exp_().masked_fill_(drop, 0.0)  # π_S(v)
                local = pi_s.mul_(-g)  # −g·π_S(v)
                hit = (tok >= v0) & (tok < v1)
                idx = (tok - v0).clamp(0, v1 - v0 - 1)
                local.scatter_add_(1, idx, torch.where(hit, g, 0.0))  # + g·1[v = y]
                grad[r0:r1, v0:v1] = local
        return grad, None, None, None, None, None, None


def dvp_log_probs(
    logits: Tensor,
    tokens: Tensor,
    alpha: float = 1e-3,
    *,
    safe_mask: Tensor | None = None,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
) -> DVPLogProbs:
    """Log-probs of the sampled tokens under the pruned policy π_S (arXiv 2512.23087 [R]; spec §5(a)3).

    Use it on the trainer logits for every log-prob the loss sees (ratios, IS/RS, KL); use it on
    the rollout engine's logits too when you have them (or ``dvp_log_probs_from_topk`` with the
    engine's top-k log-probs; or vLLM ``min_p=alpha`` + processed log-probs, which is already
    π_S), so that both sides prune with the same rule.

    Math:
        z = logits / temperature;  V_S = {v : z_v ≥ max z + log alpha}  (or ``safe_mask``)
        log_probs = z_y − logsumexp_{V_S} z          if y ∈ V_S, else OUT_OF_SET_LOG_PROB
        log_safe_mass = logsumexp_{V_S} z − logsumexp_V z = log S
        gradient w.r.t. logits: (1[v=y] − π_S(v))/temperature on V_S; 0 elsewhere and for y ∉ V_S

    Args:
        logits: ``[..., V] float`` (e.g. ``[B, T, V]`` bf16 from the trainer's forward).
        tokens: ``[...] int`` sampled token ids, the logits' leading shape.
        alpha: min-p threshold in (0, 1]; ignored when ``safe_mask`` is given.
        safe_mask: optional ``[..., V] bool`` safe set (sampling-mask replay, or another rule
            such as top-p). Must mark at least one token per position.
        temperature: sampling temperature (the rollout's).
        chunk_size: positions per chunk; vocab_chunk_size: vocabulary slice (None = whole).

    Returns:
        ``DVPLogProbs(log_probs, in_safe, log_safe_mass)``, each of ``tokens``' shape;
        ``log_probs`` is float32 (float64 for float64 logits) and differentiable w.r.t. ``logits``.
        Log-probs are not rounded back to bf16: exp(Δ) ratios are sensitive to 1e-3 errors.

    Defaults:
        alpha = 1e-3: the spec sheet's suggested sweep is {1e-4, 1e-3, 1e-2} (min-p); the paper's
        value was not accessible. chunk_size = 1024.
    """
    flat, lead = flatten_logits(logits)
    check_tensor(tokens, "tokens")
    if tokens.is_floating_point() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens: expected an integer dtype, got {tokens.dtype}")
    check_shape(tokens, lead, "tokens")
    check_positive(temperature, "temperature")
    check_chunks(chunk_size, vocab_chunk_size)
    vocab = flat.shape[1]
    flat_tokens = tokens.reshape(-1).to(torch.int64)
    if flat_tokens.numel() and (int(flat_tokens.min()) < 0 or int(flat_tokens.max()) >= vocab):
        raise ValueError(f"tokens: expected ids in [0, {vocab}), got a value outside it")
    safe = None
    log_a = None
    if safe_mask is not None:
        check_shape(safe_mask, logits.shape, "safe_mask")
        if safe_mask.dtype != torch.bool:
            raise ValueError(f"safe_mask: expected dtype torch.bool, got {safe_mask.dtype}")
        safe = safe_mask.reshape(flat.shape)
        if safe.shape[0] and not bool(safe.any(dim=-1).all()):
            raise ValueError("safe_mask: expected at least one safe token per position, got an empty row")
    else:
        log_a = log_alpha(alpha)
    log_probs, in_safe, log_mass = _DVPLogProbFn.apply(
        flat, flat_tokens, log_a, safe, temperature, chunk_size, vocab_chunk_size
    )
    return DVPLogProbs(log_probs.reshape(lead), in_safe.reshape(lead), log_mass.reshape(lead))


@torch.no_grad()
def dvp_log_probs_from_topk(
    token_log_probs: Tensor, topk_log_probs: Tensor, alpha: float = 1e-3
) -> tuple[DVPLogProbs, Tensor]:
    """Rollout side: renormalise an engine's raw log-probs over the min-p safe set (spec §5(a)3 [R]).

    For engines that return the sampled token's *raw* (full-softmax) log-prob plus the top-k
    log-probs per position (vLLM ``logprobs=k``). Because min-p keeps every token within a factor
    α of the argmax, the safe set is inside the top-k whenever the k-th log-prob is already below
    the threshold; ``complete`` reports where that holds.

    Math:
        thr = max_k topk_log_probs + log alpha
        log S = logsumexp_{k : topk_log_probs[k] ≥ thr} topk_log_probs[k]
        log π_S(y) = token_log_probs − log S     if token_log_probs ≥ thr
        complete = min_k topk_log_probs < thr    (else V_S may extend beyond the top-k)

    Args:
        token_log_probs: ``[...] float`` raw log π_roll(y).
        topk_log_probs: ``[..., k] float`` raw top-k log-probs at the same positions (any order).
        alpha: min-p threshold, the same as the trainer's.

    Returns:
        ``(DVPLogProbs(log_probs, in_safe, log_safe_mass), complete [...] bool)``; float32 (float64
        for float64 inputs). Where ``complete`` is False the result is a lower bound on S; mask
        those positions or ask the engine for more log-probs.
    """
    check_floating(check_tensor(token_log_probs, "token_log_probs"), "token_log_probs")
    check_ndim(topk_log_probs, token_log_probs.dim() + 1, "topk_log_probs", "[..., k]")
    check_shape(topk_log_probs[..., 0], token_log_probs.shape, "topk_log_probs[..., 0]")
    dtype = torch.promote_types(compute_dtype(token_log_probs), compute_dtype(topk_log_probs))
    top = topk_log_probs.to(dtype)
    tok = token_log_probs.to(dtype)
    threshold = top.amax(dim=-1) + log_alpha(alpha)  # log(α·π_max)
    keep = top >= threshold[..., None]
    log_mass = torch.logsumexp(torch.where(keep, top, -math.inf), dim=-1).clamp_max(0.0)  # log S
    in_safe = tok >= threshold
    log_probs = torch.where(in_safe, tok - log_mass, OUT_OF_SET_LOG_PROB)  # log π_S(y)
    complete = top.amin(dim=-1) < threshold
    return DVPLogProbs(log_probs, in_safe, log_mass), complete
