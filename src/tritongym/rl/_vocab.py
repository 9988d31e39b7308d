"""Private engine for full-vocabulary reductions that never hold a float32 ``[B, T, V]`` tensor.

Used by ``otb.sum_pi_squared``, ``diagnostics`` (entropy, collision probability, logit-update
norm), ``trm.trm_exact_mask`` (exact token KL) and, for its chunk loops, ``dvp``.

The logits are flattened to ``[N, V]`` (a view for contiguous input) and visited in row chunks of
``chunk_size`` positions; inside a row chunk the vocabulary is visited in slices of
``vocab_chunk_size`` columns (``None`` = the whole vocabulary) with an *online* (running-max)
accumulation, the same rescaling trick as online softmax (Milakov & Gimelshein 2018):

    m' = max(m, max_chunk z);  a = e^(m − m')
    s1' = a·s1 + Σ_chunk e^(z − m')                       (→ logsumexp = m + log s1)
    s2' = a²·s2 + Σ_chunk e^(2(z − m'))                   (→ Σπ² = s2 / s1²)
    t'  = a·(t + (m − m')·s1) + Σ_chunk e^(z − m')(z − m')  (→ entropy = log s1 − t / s1)
    u'  = a·u + Σ_chunk e^(z − m')(z − zq)               (→ KL(p‖q) = u/s1 − lse_p + lse_q)

Only one chunk is upcast at a time, so peak extra memory is a few ``chunk_size × vocab_chunk``
float32 buffers. Maths run in float32 (float64 for float64 logits).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor

from ._checks import check_floating, check_positive, check_tensor, compute_dtype

DEFAULT_CHUNK_SIZE = 1024  # positions per row chunk: 1024 × 152k vocab × 4 B ≈ 0.6 GB per fp32 buffer


def check_chunks(chunk_size: int, vocab_chunk_size: int | None) -> None:
    """Validate chunk arguments."""
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size: expected a positive int, got {chunk_size!r}")
    if vocab_chunk_size is not None and (not isinstance(vocab_chunk_size, int) or vocab_chunk_size < 1):
        raise ValueError(f"vocab_chunk_size: expected a positive int or None, got {vocab_chunk_size!r}")


def flatten_logits(logits: Tensor, name: str = "logits") -> tuple[Tensor, tuple[int, ...]]:
    """Return ``(logits viewed as [N, V], leading shape)``; raises on non-float or 0-d input."""
    check_tensor(logits, name)
    check_floating(logits, name)
    if logits.dim() < 1 or logits.shape[-1] == 0:
        raise ValueError(f"{name}: expected shape [..., V] with V > 0, got {tuple(logits.shape)}")
    lead = tuple(logits.shape[:-1])
    return logits.reshape(-1, logits.shape[-1]), lead


def row_chunks(n_rows: int, chunk_size: int) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` row ranges."""
    for start in range(0, n_rows, chunk_size):
        yield start, min(start + chunk_size, n_rows)


def vocab_slices(vocab: int, vocab_chunk_size: int | None) -> Iterator[tuple[int, int]]:
    """Yield ``(start, stop)`` column ranges covering the vocabulary."""
    step = vocab if vocab_chunk_size is None else vocab_chunk_size
    for start in range(0, vocab, step):
        yield start, min(start + step, vocab)


def upcast(chunk: Tensor, temperature: float, dtype: torch.dtype) -> Tensor:
    """A fresh copy of one chunk in the compute dtype, divided by the sampling temperature."""
    z = chunk.to(dtype, copy=True)
    return z if temperature == 1.0 else z.div_(temperature)


class Workspace:
    """Reusable flat scratch buffers, one per name, viewed as contiguous ``[rows, cols]``.

    Every chunk reuses the same memory instead of allocating (and, on CPU, page-faulting) a fresh
    ``chunk_size × V`` buffer; on CUDA the caching allocator would reuse it anyway.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._buffers: dict[str, Tensor] = {}

    def take(self, name: str, rows: int, cols: int, dtype: torch.dtype) -> Tensor:
        """A contiguous ``[rows, cols]`` view of the buffer ``name`` (contents undefined)."""
        size = rows * cols
        buf = self._buffers.get(name)
        if buf is None or buf.numel() < size or buf.dtype != dtype:
            buf = torch.empty(size, dtype=dtype, device=self.device)
            self._buffers[name] = buf
        return buf[:size].view(rows, cols)

    def upcast(self, name: str, chunk: Tensor, temperature: float, dtype: torch.dtype) -> Tensor:
        """``upcast`` into the buffer ``name``: the chunk in ``dtype``, divided by the temperature."""
        z = self.take(name, chunk.shape[0], chunk.shape[1], dtype)
        z.copy_(chunk)
        return z if temperature == 1.0 else z.div_(temperature)


@torch.no_grad()
def vocab_reductions(
    logits: Tensor,
    *,
    temperature: float = 1.0,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    vocab_chunk_size: int | None = None,
    collision: bool = False,
    entropy: bool = False,
    other_logits: Tensor | None = None,
) -> dict[str, Tensor]:
    """Per-position reductions over the vocabulary, chunked (see the module docstring).

    Args:
        logits: ``[..., V] float``.
        temperature: logits are divided by it first (must match the log-probs' temperature).
        chunk_size / vocab_chunk_size: chunking; ``None`` vocabulary chunk = whole vocabulary.
        collision / entropy: also return ``"sum_pi_squared"`` / ``"entropy"``.
        other_logits: ``[..., V]``; also return ``"kl"`` = KL(softmax(logits) ‖ softmax(other)).

    Returns:
        dict with ``"logsumexp"`` and the requested keys, each ``[...]`` in float32 (float64 for
        float64 logits), no grad.
    """
    check_positive(temperature, "temperature")
    check_chunks(chunk_size, vocab_chunk_size)
    flat, lead = flatten_logits(logits)
    other = None
    if other_logits is not None:
        check_floating(check_tensor(other_logits, "other_logits"), "other_logits")
        if other_logits.shape != logits.shape:
            raise ValueError(
                f"other_logits: expected shape {tuple(logits.shape)}, got {tuple(other_logits.shape)}"
            )
        other = other_logits.reshape(flat.shape)
    dtype = compute_dtype(logits)
    n_rows, vocab = flat.shape
    out = {"logsumexp": torch.empty(n_rows, dtype=dtype, device=flat.device)}
    if collision:
        out["sum_pi_squared"] = torch.empty_like(out["logsumexp"])
    if entropy:
        out["entropy"] = torch.empty_like(out["logsumexp"])
    if other is not None:
        out["kl"] = torch.empty_like(out["logsumexp"])
    ws = Workspace(flat.device)
    for r0, r1 in row_chunks(n_rows, chunk_size):
        m = s1 = s2 = t = u = m_q = s1_q = None
        for v0, v1 in vocab_slices(vocab, vocab_chunk_size):
            z = ws.upcast("z", flat[r0:r1, v0:v1], temperature, dtype)  # [r, v] one chunk
            m_new = z.amax(dim=-1) if m is None else torch.maximum(m, z.amax(dim=-1))
            diff = None
            if other is not None:
                zq = ws.upcast("zq", other[r0:r1, v0:v1], temperature, dtype)
                diff = torch.sub(z, zq, out=ws.take("diff", *z.shape, dtype))  # z − zq (before the shift)
                mq_new = zq.amax(dim=-1) if m_q is None else torch.maximum(m_q, zq.amax(dim=-1))
                eq_sum = zq.sub_(mq_new[:, None]).exp_().sum(-1)  # Σ e^(zq − mq')
                s1_q = eq_sum if m_q is None else (m_q - mq_new).exp() * s1_q + eq_sum
                m_q = mq_new
            shifted = z.sub_(m_new[:, None])  # z − m', in place
            e = (
                torch.exp(shifted, out=ws.take("e", *z.shape, dtype)) if entropy else shifted.exp_()
            )  # e^(z − m')
            e_sum = e.sum(-1)
            if m is None:
                s1 = e_sum
                s2 = torch.linalg.vecdot(e, e) if collision else None
                t = torch.linalg.vecdot(e, shifted) if entropy else None
                u = torch.linalg.vecdot(e, diff) if diff is not None else None
            else:
                a = (m - m_new).exp()  # rescale factor e^(m − m')
                if entropy:
                    t = a * (t + (m - m_new) * s1) + torch.linalg.vecdot(e, shifted)
                s1 = a * s1 + e_sum
                if collision:
                    s2 = a * a * s2 + torch.linalg.vecdot(e, e)
                if diff is not None:
                    u = a * u + torch.linalg.vecdot(e, diff)  # Σ e^(z − m')(z − zq)
            m = m_new
        lse = m + s1.log()  # logsumexp(z)
        out["logsumexp"][r0:r1] = lse
        if collision:
            out["sum_pi_squared"][r0:r1] = s2 / (s1 * s1)  # Σπ² = s2 / s1²
        if entropy:
            out["entropy"][r0:r1] = s1.log() - t / s1  # H = log s1 − t/s1
        if other is not None:
            lse_q = m_q + s1_q.log()
            kl = u / s1 - lse + lse_q  # KL(p‖q) = E_p[z − zq] − lse_p + lse_q
            out["kl"][r0:r1] = kl.clamp_min(0.0)
    return {key: value.reshape(lead) for key, value in out.items()}


def log_alpha(alpha: float) -> float:
    """log α for a min-p threshold α ∈ (0, 1]."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"alpha: expected a value in (0, 1], got {alpha}")
    return math.log(alpha)
