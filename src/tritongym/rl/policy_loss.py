"""Policy losses: PPO clip with dual clip, REINFORCE with stop-gradient weights, loss aggregation, KL.

Family: token-level surrogate losses and their reduction to a scalar.

References (formulas as in ``rl-algorithms.md`` §0 and §1.2):

* PPO clip — Schulman et al., arXiv 1707.06347, eq. (7) (L^CLIP); asymmetric "clip-higher" bounds
  — DAPO, arXiv 2503.14476; dual clip — Ye et al., arXiv 1912.09729 (*Mastering Complex Control
  in MOBA Games*), §3.3. Code: verl ``compute_policy_loss_vanilla`` (core_algos.py L1286),
  KernelGYM ``compute_policy_loss``.
* Aggregation modes — verl ``agg_loss`` (core_algos.py L1140); Dr.GRPO's constant normaliser —
  arXiv 2503.20783.
* KL estimators k1/k2/k3 — J. Schulman, *Approximating KL Divergence* (blog, 2020).

Surrogate identity (spec §0): ∇_θ[−sg(w)·A·log π_θ] = −w·A·∇log π_θ, and at θ = θ_old the PPO
ratio form −A·π_θ/sg(π_old) has the same gradient, so both losses here reduce to REINFORCE there.

Masks: every token loss takes the mask and uses ``torch.where``, so a masked position contributes
exactly 0 to the loss and to the gradient even if it holds NaN or ±inf.

Deliberately left out: data-parallel scaling (pass global ``num_sequences``/``num_tokens``
instead), the value loss, entropy bonus, GSPO, and the extreme-risk token mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from ._checks import SAFETY_BOUND, as_bool_mask, check_floating, check_ndim, check_shape, compute_dtype
from .registry import AGGREGATION_MODES, POLICY_LOSSES, AggregationMode, KLEstimator, PolicyLoss

__all__ = [
    "PolicyLossInputs",
    "aggregate_loss",
    "compute_policy_loss",
    "kl_estimate",
    "ppo_clip_fractions",
    "ppo_clip_token_loss",
    "reinforce_token_loss",
]


def _prepare(log_probs: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, torch.dtype]:
    check_ndim(log_probs, 2, "log_probs", "[B, L]")
    check_floating(log_probs, "log_probs")
    check_shape(advantages, log_probs.shape, "advantages")
    return as_bool_mask(mask, "mask", log_probs.shape), compute_dtype(log_probs)


def _zero(dtype: torch.dtype, device: torch.device) -> Tensor:
    return torch.zeros((), dtype=dtype, device=device)


def ppo_clip_token_loss(
    log_probs: Tensor,
    log_probs_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    weights: Tensor | None = None,
) -> Tensor:
    """Per-token PPO clipped surrogate with dual clip (arXiv 1707.06347 eq. 7; arXiv 1912.09729; §1.2).

    Math:
        r = exp(clamp(log_probs − log_probs_old, −20, 20))
        ℓ¹ = −A·r;  ℓ² = −A·clip(r, 1 − clip_low, 1 + clip_high);  ℓ = max(ℓ¹, ℓ²)
        A < 0 and dual_clip = c:  ℓ = min(ℓ, −A·c)
        ℓ ← sg(weights)·ℓ  (rollout-IS weights, if given);  ℓ = 0 where mask is False

    Args:
        log_probs: ``[B, L] float`` log π_θ (requires grad).
        log_probs_old: ``[B, L] float`` log π_old (treated as a constant).
        advantages: ``[B, L] float`` (treated as a constant).
        mask: ``[B, L] bool`` (or 0/1).
        clip_low, clip_high: ε_low, ε_high. dual_clip: c > 1, or None to disable.
        weights: optional ``[B, L]`` rollout-correction weights (detached here).

    Returns:
        ``[B, L]`` token loss in float32 (float64 for float64 log-probs); reduce with
        ``aggregate_loss``.

    Defaults:
        ε_low = ε_high = 0.2, c = 3.0 (verl). Dr.Kernel uses 0.2 / 0.28 / 3.0; DAPO clip-higher 0.28.
    """
    bool_mask, dtype = _prepare(log_probs, advantages, mask)
    check_shape(log_probs_old, log_probs.shape, "log_probs_old")
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low, clip_high: expected values >= 0, got {clip_low}, {clip_high}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip: expected a value > 1 or None, got {dual_clip}")
    zero = _zero(dtype, log_probs.device)
    adv = torch.where(bool_mask, advantages.detach().to(dtype), zero)  # A, 0 on pads
    log_ratio = torch.where(bool_mask, log_probs.to(dtype) - log_probs_old.detach().to(dtype), zero)
    ratio = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND).exp()  # r = π_θ/π_old
    pg_loss1 = -adv * ratio  # ℓ¹
    pg_loss2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # ℓ²
    loss = torch.maximum(pg_loss1, pg_loss2)  # ℓ^clip
    if dual_clip is not None:
        pg_loss3 = -adv * dual_clip  # −A·c
        loss = torch.where(adv < 0, torch.minimum(loss, pg_loss3), loss)  # dual clip
    if weights is not None:
        check_shape(weights, log_probs.shape, "weights")
        loss = loss * torch.where(bool_mask, weights.detach().to(dtype), zero)  # sg(w)·ℓ
    return torch.where(bool_mask, loss, zero)


@torch.no_grad()
def ppo_clip_fractions(
    log_probs: Tensor,
    log_probs_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
) -> dict[str, Tensor]:
    """Which clip is active, as mutually exclusive token fractions (KernelGYM convention; §1.2(d)4).

    Math (valid tokens only, r as in ``ppo_clip_token_loss``):
        upper: A > 0 ∧ r > 1 + clip_high      (gradient 0: ratio clipped above)
        lower: A < 0 ∧ r < 1 − clip_low       (gradient 0: ratio clipped below)
        dual:  A < 0 ∧ r > dual_clip          (gradient 0: loss capped at −A·c)
        ppo_kl: mean(log_probs_old − log_probs)  (k1 estimate of KL(π_old ‖ π_θ))

    Returns:
        ``{"rl/clipfrac_upper", "rl/clipfrac_lower", "rl/clipfrac_dual", "rl/ppo_kl"}``: 0-d float32.
    """
    bool_mask, dtype = _prepare(log_probs, advantages, mask)
    check_shape(log_probs_old, log_probs.shape, "log_probs_old")
    log_ratio = (log_probs.to(dtype) - log_probs_old.to(dtype)).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    ratio = log_ratio.exp()
    adv = advantages.to(dtype)
    count = bool_mask.sum().clamp_min(1).to(dtype)

    def frac(selected: Tensor) -> Tensor:
        return (selected & bool_mask).sum().to(dtype) / count

    dual = (adv < 0) & (ratio > dual_clip) if dual_clip is not None else torch.zeros_like(bool_mask)
    return {
        "rl/clipfrac_upper": frac((adv > 0) & (ratio > 1.0 + clip_high)),
        "rl/clipfrac_lower": frac((adv < 0) & (ratio < 1.0 - clip_low)),
        "rl/clipfrac_dual": frac(dual),
        "rl/ppo_kl": torch.where(bool_mask, -log_ratio, 0.0).sum() / count,
    }


def reinforce_token_loss(
    log_probs: Tensor, advantages: Tensor, mask: Tensor, *, weights: Tensor | None = None
) -> Tensor:
    """Per-token REINFORCE loss −sg(w)·A·log π_θ (verl ``compute_policy_loss_reinforce``; spec §1.3 bypass).

    Math:
        ℓ = −sg(weights)·sg(A)·log_probs on valid tokens, 0 elsewhere (w = 1 if not given)

    The stop-gradient on w is essential: with w = f(π_θ/μ) autograd would otherwise add a
    log π·∇w term (spec §1.3(d)3).

    Returns:
        ``[B, L]`` float32 (float64 for float64 input).
    """
    bool_mask, dtype = _prepare(log_probs, advantages, mask)
    zero = _zero(dtype, log_probs.device)
    coef = torch.where(bool_mask, advantages.detach().to(dtype), zero)
    if weights is not None:
        check_shape(weights, log_probs.shape, "weights")
        coef = coef * torch.where(bool_mask, weights.detach().to(dtype), zero)  # sg(w)·A
    safe_log_probs = torch.where(bool_mask, log_probs.to(dtype), zero)
    return torch.where(bool_mask, -coef * safe_log_probs, zero)


def kl_estimate(log_probs: Tensor, ref_log_probs: Tensor, kind: str | KLEstimator = "k3") -> Tensor:
    """Per-token KL(π ‖ π_ref) estimators for samples y ~ π (Schulman 2020 "Approximating KL").

    Math (log r = ref_log_probs − log_probs, samples drawn from π = exp(log_probs)):
        k1 = kl = −log r = log_probs − ref_log_probs   unbiased, can be negative
        k2 = mse = ½ (log r)²                          biased (not the KL; spec check 5)
        k3 = r − 1 − log r  (log r clamped to ±20)     unbiased and ≥ 0
        abs = |log r|                                  (verl)
        low_var_kl = clamp(k3, −10, 10)                (verl's k3, which also clamps the estimate)
        <name>+ = sg(<name>) + ½(log r)² − sg(½(log r)²): the value of <name>, the gradient of k2
                  (verl's straight-through ``k1+``/``k3+``: k1 and k3 estimate the KL's value without
                  bias but not its gradient; k2's gradient is the right one)

    verl names k3 and low_var_kl the same clamped function; here ``k3`` stays unclamped (they agree
    whenever k3 ≤ 10, i.e. |log r| below ≈ 2.4 on the negative side, ≈ 12 on the positive).

    Sign gotcha (spec §12 gotcha 2): k1 here is log π − log π_ref; verl's rollout-correction
    ``*_k1`` statistic is the negative of our Δ. Gradients flow through both inputs.

    Args:
        log_probs: ``[...] float`` log-probs of the *sampling* distribution.
        ref_log_probs: ``[...] float`` log-probs of the reference distribution, same shape.
        kind: a ``KLEstimator`` name (ours or verl's), optionally with verl's ``+`` suffix.

    Returns:
        ``[...]`` elementwise estimates, float32 (float64 for float64 input).
    """
    check_floating(log_probs, "log_probs")
    check_shape(ref_log_probs, log_probs.shape, "ref_log_probs")
    name = str(kind)
    straight_through = name.endswith("+")
    try:
        estimator = KLEstimator(name[:-1] if straight_through else name)
    except ValueError:
        choices = ", ".join(e.value for e in KLEstimator)
        raise ValueError(f"kind: expected one of {choices} (or a base name with '+'), got {kind!r}") from None
    dtype = compute_dtype(log_probs)
    log_r = ref_log_probs.to(dtype) - log_probs.to(dtype)  # log r = log(π_ref/π)
    if estimator in (KLEstimator.K1, KLEstimator.KL):
        value = -log_r
    elif estimator in (KLEstimator.K2, KLEstimator.MSE):
        value = 0.5 * log_r * log_r
    elif estimator is KLEstimator.ABS:
        value = log_r.abs()
    else:  # k3, low_var_kl
        clamped = log_r.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        value = clamped.exp() - 1.0 - clamped
        if estimator is KLEstimator.LOW_VAR_KL:
            value = value.clamp(-10.0, 10.0)
    if not straight_through:
        return value
    surrogate = 0.5 * log_r * log_r  # k2: its gradient is ∇KL's unbiased estimate
    return surrogate - surrogate.detach() + value.detach()


# ---- aggregation ---------------------------------------------------------------------------------


def _seq_count(mask: Tensor, num_sequences: int | float | Tensor | None) -> Tensor | float:
    if num_sequences is not None:
        return num_sequences
    return mask.any(dim=-1).sum().clamp_min(1)  # rows with any valid token (verl)


@AGGREGATION_MODES.register(AggregationMode.TOKEN_MEAN)
def _token_mean(loss: Tensor, mask: Tensor, *, num_sequences, num_tokens, max_length) -> Tensor:
    denom = num_tokens if num_tokens is not None else mask.sum().clamp_min(1)
    return loss.sum() / denom  # Σ m ℓ / Σ m


@AGGREGATION_MODES.register(AggregationMode.TOKEN_SUM)
def _token_sum(loss: Tensor, mask: Tensor, *, num_sequences, num_tokens, max_length) -> Tensor:
    return loss.sum()  # Σ m ℓ; the normalisers do not apply


@AGGREGATION_MODES.register(AggregationMode.SEQ_MEAN_TOKEN_SUM)
def _seq_mean_token_sum(loss: Tensor, mask: Tensor, *, num_sequences, num_tokens, max_length) -> Tensor:
    return loss.sum() / _seq_count(mask, num_sequences)  # (1/B) Σ_b Σ_t m ℓ


@AGGREGATION_MODES.register(AggregationMode.SEQ_MEAN_TOKEN_MEAN)
def _seq_mean_token_mean(loss: Tensor, mask: Tensor, *, num_sequences, num_tokens, max_length) -> Tensor:
    per_seq = loss.sum(-1) / mask.sum(-1).clamp_min(1)  # Σ_t m ℓ / Σ_t m, 0 for empty rows
    return per_seq.sum() / _seq_count(mask, num_sequences)


@AGGREGATION_MODES.register(AggregationMode.SEQ_MEAN_TOKEN_SUM_NORM)
def _seq_mean_token_sum_norm(loss: Tensor, mask: Tensor, *, num_sequences, num_tokens, max_length) -> Tensor:
    horizon = mask.shape[-1] if max_length is None else max_length  # L_const
    return loss.sum() / _seq_count(mask, num_sequences) / horizon  # Σ m ℓ / (B · L_const)


def aggregate_loss(
    loss: Tensor,
    mask: Tensor,
    mode: str | AggregationMode = "token-mean",
    *,
    num_sequences: int | float | Tensor | None = None,
    num_tokens: int | float | Tensor | None = None,
    max_length: int | None = None,
    loss_scale_factor: float = 1.0,
) -> Tensor:
    """Reduce a ``[B, L]`` token loss to a scalar (verl ``agg_loss``; spec §0 aggregation modes).

    Math (ℓ masked to 0 on invalid tokens):
        token-mean:              Σ_{b,t} m ℓ / num_tokens            (default Σ m)
        token-sum:               Σ_{b,t} m ℓ                         (normalisers ignored)
        seq-mean-token-sum:      Σ_b Σ_t m ℓ / num_sequences          (default #rows with a valid token)
        seq-mean-token-mean:     Σ_b (Σ_t m ℓ / Σ_t m) / num_sequences
        seq-mean-token-sum-norm: Σ_b Σ_t m ℓ / (num_sequences · max_length)   (default L)
        then ÷ loss_scale_factor.
        With full masks: token-mean = seq-mean-token-mean = Σℓ/(BL), seq-mean-token-sum = Σℓ/B,
        seq-mean-token-sum-norm = Σℓ/(B·max_length).

    Args:
        loss: ``[B, L] float`` token loss.
        mask: ``[B, L] bool`` (or 0/1).
        mode: one of ``AGGREGATION_MODES`` (verl's strings).
        num_sequences / num_tokens: global normalisers (data parallel, or TRM's total-batch rule).
        max_length: L_const of Dr.GRPO (verl's ``loss_scale_factor`` in that mode).
        loss_scale_factor: KernelGYM's extra pure divisor (1000 in the Dr.Kernel scripts).

    Returns:
        0-d tensor, the loss's dtype.

    Defaults:
        mode = token-mean (verl default); KernelGYM/Dr.Kernel use seq-mean-token-sum ÷ 1000.
    """
    check_ndim(loss, 2, "loss", "[B, L]")
    bool_mask = as_bool_mask(mask, "mask", loss.shape)
    if loss_scale_factor <= 0:
        raise ValueError(f"loss_scale_factor: expected a value > 0, got {loss_scale_factor}")
    if max_length is not None and max_length <= 0:
        raise ValueError(f"max_length: expected a positive int, got {max_length}")
    fn = AGGREGATION_MODES.get(mode)
    masked = torch.where(bool_mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    out = fn(masked, bool_mask, num_sequences=num_sequences, num_tokens=num_tokens, max_length=max_length)
    return out / loss_scale_factor


# ---- registry of token losses (one call shape) -----------------------------------------------------


@dataclass(frozen=True)
class PolicyLossInputs:
    """Inputs of every registered policy loss; each loss declares which optional fields it needs.

    Attributes:
        log_probs: ``[B, L] float`` log π_θ (requires grad).
        advantages: ``[B, L] float``.
        mask: ``[B, L] bool`` (or 0/1) loss mask.
        log_probs_old: ``[B, L] float`` log π_old (PPO ratio), optional.
        weights: ``[B, L] float`` rollout-correction weights (stop-gradient), optional.
    """

    log_probs: Tensor
    advantages: Tensor
    mask: Tensor
    log_probs_old: Tensor | None = None
    weights: Tensor | None = None


@POLICY_LOSSES.register(PolicyLoss.PPO_CLIP, requires=("log_probs", "advantages", "mask", "log_probs_old"))
def _ppo_clip(inputs: PolicyLossInputs, **options: float | None) -> Tensor:
    assert inputs.log_probs_old is not None  # guaranteed by compute_policy_loss's requires check
    return ppo_clip_token_loss(
        inputs.log_probs,
        inputs.log_probs_old,
        inputs.advantages,
        inputs.mask,
        weights=inputs.weights,
        **options,
    )


@POLICY_LOSSES.register(PolicyLoss.REINFORCE, requires=("log_probs", "advantages", "mask"))
def _reinforce(inputs: PolicyLossInputs, **options: object) -> Tensor:
    if options:
        raise ValueError(f"reinforce: expected no options, got {sorted(options)}")
    return reinforce_token_loss(inputs.log_probs, inputs.advantages, inputs.mask, weights=inputs.weights)


def compute_policy_loss(
    name: str | PolicyLoss,
    inputs: PolicyLossInputs,
    *,
    mode: str | AggregationMode = "token-mean",
    num_sequences: int | float | Tensor | None = None,
    num_tokens: int | float | Tensor | None = None,
    max_length: int | None = None,
    loss_scale_factor: float = 1.0,
    **options: object,
) -> Tensor:
    """Look up a registered token loss by name, check its required inputs, and aggregate it.

    Args:
        name: a ``POLICY_LOSSES`` name (``"ppo_clip"``, ``"reinforce"``, or a plug-in's).
        inputs: ``PolicyLossInputs``.
        mode, num_sequences, num_tokens, max_length, loss_scale_factor: see ``aggregate_loss``.
        options: loss-specific keywords (e.g. ``clip_high=0.28`` for ``ppo_clip``).

    Returns:
        0-d loss tensor.
    """
    entry = POLICY_LOSSES.entry(name)
    missing = sorted(field for field in entry.requires if getattr(inputs, field, None) is None)
    if missing:
        raise ValueError(
            f"policy loss {entry.name!r}: expected inputs {sorted(entry.requires)}, missing {missing}"
        )
    token_loss = entry.fn(inputs, **options)
    return aggregate_loss(
        token_loss,
        inputs.mask,
        mode,
        num_sequences=num_sequences,
        num_tokens=num_tokens,
        max_length=max_length,
        loss_scale_factor=loss_scale_factor,
    )
