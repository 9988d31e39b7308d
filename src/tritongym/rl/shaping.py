"""Reward shaping and sample selection: Dr.Kernel's PR and PRS, and zero-variance group filtering.

Family: per-turn rewards and keep/drop decisions made before the advantage step.

References (formulas as in ``rl-algorithms.md`` §2.3–2.5 and ``kernelgym-drkernel.md`` §3–4, §6.5):

* PR, the profiling-based reward — Dr.Kernel, arXiv 2602.05885; KernelGYM
  ``reward_client.calculate_reward_speedup`` @3a84417.
* PRS, profiling-based rejection sampling against "lazy optimisation" — Dr.Kernel; KernelGYM
  ``coverage_helper.compute_coverage_rejection_mask``.
* Zero-variance group filtering — DAPO "dynamic sampling", arXiv 2503.14476 §3.2; KernelGYM
  ``PPOBatchFilter`` (drop groups with reward std < 1e-3, and all-over-long groups).
* Meaningful-turn masking — KernelGYM ``MultiTurnRequest.finalize`` with ``mask_void_turn=True``
  (the rollout's per-turn ``loss_mask``; on in the Dr.Kernel recipe).

Deliberately left out: the coverage measurement itself (an evaluator concern; note the biased
time-coverage denominator in kernelgym-drkernel.md §3.1), ``calculate_reward_weighted``, the
legacy tiered reward, and KernelGYM's batch buffering across steps (``MAX_SKIP_STEPS``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._checks import (
    as_bool_mask,
    as_group_ids,
    check_ndim,
    check_shape,
    compute_dtype,
    group_inverse,
    group_sum,
    result_dtype,
)

__all__ = [
    "meaningful_turn_mask",
    "profiling_reward",
    "prs_keep_probability",
    "prs_sample",
    "zero_variance_group_mask",
]


def profiling_reward(
    correct: Tensor,
    speedup: Tensor,
    coverage: Tensor,
    *,
    failed: Tensor | None = None,
    decoy: Tensor | None = None,
    correct_weight: float = 0.5,
    speedup_weight: float = 0.5,
    coverage_weight: float = 0.5,
    speedup_cap: float = 3.0,
    speedup_floor: float = 0.0,
    penalty: float = 0.0,
) -> Tensor:
    """Dr.Kernel's profiling-based reward PR per turn (arXiv 2602.05885; KernelGYM reward_client; §2.3).

    Math:
        s̃ = min(speedup, speedup_cap);  s̃ := 0 if s̃ < speedup_floor
        r = correct_weight·1[correct] + 1[correct]·(speedup_weight·s̃ + coverage_weight·coverage)
        r = penalty where failed (evaluation not completed) or decoy (custom kernel never ran)

    Args:
        correct: ``[n] bool`` (or 0/1) correctness of the turn's kernel.
        speedup: ``[n] float`` speedup over the PyTorch reference (NaN allowed where not correct).
        coverage: ``[n] float`` in [0, 1], profiler time coverage of custom kernels.
        failed, decoy: optional ``[n] bool``.
        correct_weight, speedup_weight, coverage_weight: w_c, w_p, w_cov.
        speedup_cap, speedup_floor: U and L_low. penalty: reward for failed/decoy turns.

    Returns:
        ``[n]`` rewards, the dtype of ``speedup`` (default float if not floating).

    Defaults:
        w_c = w_p = 0.5, U = 3.0, L_low = 0.0, w_cov = 0.5, penalty 0.0 (Dr.Kernel RL scripts and
        ``kernel_trainer.yaml``; recipe range 0–2.5).

    Differs from KernelGYM:
        KernelGYM adds w_p·s̃ whatever the correctness and relies on the server reporting speedup 0
        for a wrong kernel; here the speedup term is gated on ``correct`` explicitly, so a reported
        speedup of a wrong kernel can never earn reward (spec §2.3(d)3: incorrect → r = 0).
    """
    check_ndim(speedup, 1, "speedup", "[n]")
    n = speedup.shape[0]
    ok = as_bool_mask(correct, "correct", (n,))
    check_shape(coverage, (n,), "coverage")
    dtype = result_dtype(speedup)
    f64 = torch.float64
    capped = speedup.to(f64).clamp(max=speedup_cap)  # s̃ = min(speedup, U)
    capped = torch.where(capped < speedup_floor, 0.0, capped)
    gated = speedup_weight * capped + coverage_weight * coverage.to(f64)  # w_p s̃ + w_cov cov
    reward = torch.where(ok, correct_weight + gated, 0.0)  # r
    bad = torch.zeros_like(ok)
    if failed is not None:
        bad = bad | as_bool_mask(failed, "failed", (n,))
    if decoy is not None:
        bad = bad | as_bool_mask(decoy, "decoy", (n,))
    reward = torch.where(bad, penalty, reward)
    return reward.to(dtype)


def prs_keep_probability(
    coverage: Tensor,
    correct: Tensor,
    *,
    threshold: float = 0.3,
    factor: float = 0.1,
    trajectory_ids: object | None = None,
    valid: Tensor | None = None,
    speedup: Tensor | None = None,
    speedup_threshold: float | None = None,
) -> Tensor:
    """PRS keep probability per turn (Dr.Kernel arXiv 2602.05885; KernelGYM coverage_helper; spec §2.4).

    Math:
        c = coverage per turn, or with ``trajectory_ids`` ("geometric" mode) the geometric mean
            exp(mean_{valid turns of the trajectory} log max(coverage, 1e-8))
        p = clip((c − threshold)/factor, 0, 1);  factor = 0 → p = 1[c ≥ threshold]
        p = 1 for incorrect turns (PRS only filters correct kernels)
        p = max(p, 1[speedup ≥ speedup_threshold]) if a speedup threshold is given (OR rule)

    Args:
        coverage: ``[n] float``; correct: ``[n] bool`` (decoys must already be False).
        threshold, factor: τ and f.
        trajectory_ids: optional ``[n] int`` → geometric mode over each trajectory's valid turns.
        valid: optional ``[n] bool`` turns that exist (default all), used by geometric mode.
        speedup, speedup_threshold: optional OR rule.

    Returns:
        ``[n]`` keep probabilities, the dtype of ``coverage``.

    Defaults:
        τ = 0.3, f = 0.1, turn mode, no speedup rule (Dr.Kernel recipe ``COVERAGE_RS=turn``).
    """
    check_ndim(coverage, 1, "coverage", "[n]")
    n = coverage.shape[0]
    ok = as_bool_mask(correct, "correct", (n,))
    if threshold < 0 or factor < 0:
        raise ValueError(f"threshold, factor: expected values >= 0, got {threshold}, {factor}")
    f64 = compute_dtype(coverage)  # coverage's precision, so that c = τ gives p = 0 exactly
    cov = coverage.to(f64)
    if trajectory_ids is not None:
        ids = as_group_ids(trajectory_ids, n, "trajectory_ids")
        exists = torch.ones_like(ok) if valid is None else as_bool_mask(valid, "valid", (n,))
        inverse, num = group_inverse(ids)
        log_cov = torch.where(exists, cov.clamp_min(1e-8).log(), 0.0)
        count = group_sum(exists.to(f64), inverse, num).clamp_min(1.0)
        cov = (group_sum(log_cov, inverse, num) / count).clamp(-20.0, 20.0).exp()[inverse]  # geometric mean
    if factor == 0:
        prob = (cov >= threshold).to(f64)
    else:
        prob = ((cov - threshold) / factor).clamp(0.0, 1.0)  # p = clip((c − τ)/f, 0, 1)
    prob = torch.where(ok, prob, 1.0)
    if speedup is not None and speedup_threshold is not None:
        check_shape(speedup, (n,), "speedup")
        prob = torch.maximum(prob, (speedup.to(f64) >= speedup_threshold).to(f64))
    return prob.to(result_dtype(coverage))


def prs_sample(
    keep_probability: Tensor,
    *,
    trajectory_ids: object | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw the PRS keep mask: keep ~ Bernoulli(p) (spec §2.4).

    Math:
        keep[i] = u < p[i],  u ~ U[0, 1) drawn once per row, or once per trajectory when
        ``trajectory_ids`` is given (then the trajectory's correct turns, which share p in
        geometric mode, are kept or dropped together; incorrect turns have p = 1)

    Args:
        keep_probability: ``[n] float`` from ``prs_keep_probability``.
        trajectory_ids: optional ``[n] int`` for one shared draw per trajectory.
        generator: optional ``torch.Generator`` for reproducibility.

    Returns:
        ``keep [n] bool``. Multiply into the *loss* mask only (TRLOO baselines keep the turn).

    Differs from KernelGYM:
        KernelGYM's geometric mode broadcasts p to the turns but then draws each turn
        independently; the spec (and KernelGYM's own metrics, which read the first turn as the
        trajectory's decision) says the trajectory is accepted or rejected as a whole, which the
        shared draw implements.
    """
    check_ndim(keep_probability, 1, "keep_probability", "[n]")
    n = keep_probability.shape[0]
    prob = keep_probability.detach().to(torch.float64)
    if bool(((prob < 0) | (prob > 1) | prob.isnan()).any()):
        raise ValueError("keep_probability: expected values in [0, 1], got a value outside it")
    if trajectory_ids is None:
        u = torch.rand(n, dtype=torch.float64, generator=generator, device=prob.device)
    else:
        ids = as_group_ids(trajectory_ids, n, "trajectory_ids")
        inverse, num = group_inverse(ids)
        u = torch.rand(num, dtype=torch.float64, generator=generator, device=prob.device)[inverse]
    return u < prob


def zero_variance_group_mask(
    scores: Tensor,
    group_ids: object,
    *,
    min_std: float = 1e-3,
    truncated: Tensor | None = None,
) -> Tensor:
    """Keep rows whose prompt group carries signal (DAPO dynamic sampling §3.2; KernelGYM filter; §2.5).

    Math:
        keep[i] = std_g(scores) ≥ min_std  (unbiased std, divisor N − 1, as ``torch.std``)
                  ∧ not all rows of g are truncated (over-long), when ``truncated`` is given
        a group of one row is not checked for variance (KernelGYM skips groups of size 1)

    Args:
        scores: ``[n] float`` outcome rewards (Dr.Kernel: the last turn's reward).
        group_ids: ``[n] int``; min_std: threshold; truncated: optional ``[n] bool``.

    Returns:
        ``keep [n] bool``.

    Defaults:
        min_std = 1e-3 (KernelGYM ``REJECTION_SAMPLE``). All-0 or all-1 groups give zero advantage
        under every group baseline, so they only dilute the batch.
    """
    check_ndim(scores, 1, "scores", "[n]")
    n = scores.shape[0]
    ids = as_group_ids(group_ids, n)
    if min_std < 0 or math.isnan(min_std):
        raise ValueError(f"min_std: expected a value >= 0, got {min_std}")
    r = scores.to(torch.float64)
    inverse, num = group_inverse(ids)
    count = group_sum(torch.ones_like(r), inverse, num)
    mean = group_sum(r, inverse, num) / count
    var = group_sum((r - mean[inverse]) ** 2, inverse, num) / (count - 1.0).clamp_min(1.0)  # unbiased
    keep = (var.sqrt() >= min_std) | (count < 2)  # KernelGYM checks the variance of groups of 2 or more
    keep = keep[inverse]
    if truncated is not None:
        trunc = as_bool_mask(truncated, "truncated", (n,))
        all_trunc = group_sum(trunc.to(torch.float64), inverse, num) == count
        keep = keep & ~all_trunc[inverse]
    return keep


def meaningful_turn_mask(rewards: Tensor, turn_mask: Tensor, *, failed: Tensor | None = None) -> Tensor:
    """KernelGYM's per-turn ``loss_mask`` with ``mask_void_turn=True`` (``MultiTurnRequest.finalize``).

    Once an earlier turn of the trajectory had a positive reward, a later turn whose reward is not
    positive is not "meaningful": it gets no gradient, its reward is zeroed and it leaves its peers'
    TRLOO baselines (pass ``turn_mask & keep`` to ``trloo_advantages`` and zero the reward).
    A trajectory that ended in an error (KernelGYM: the evaluation call raised or timed out, or the
    generation timed out) loses every turn.

    Math:
        best[i,t] = max{rewards[i,k] : k < t, turn_mask[i,k]}       (−∞ when there is none)
        keep[i,t] = turn_mask[i,t] ∧ ¬failed[i] ∧ ¬(best[i,t] > 0 ∧ rewards[i,t] ≤ 0)

    Args:
        rewards: ``[n, T] float`` per-turn rewards (entries outside ``turn_mask`` are ignored).
        turn_mask: ``[n, T] bool`` (or 0/1), True where the turn exists.
        failed: optional ``[n] bool``, trajectories that ended in an error.

    Returns:
        ``keep [n, T] bool``.

    Example:
        rewards A = [1, 0], B = [0, 1] (one prompt): A's turn 2 is masked (an earlier turn scored),
        B's is kept (nothing scored before it); TRLOO then gives B's turn 2 the advantage +1
        (its group is B alone) instead of +1 for B and −1 for A.
    """
    check_ndim(rewards, 2, "rewards", "[n, T]")
    mask = as_bool_mask(turn_mask, "turn_mask", rewards.shape)
    r = torch.where(mask, rewards.to(torch.float64), -math.inf)
    best = torch.cummax(r, dim=1).values  # max over turns ≤ t
    earlier = torch.cat([torch.full_like(best[:, :1], -math.inf), best[:, :-1]], dim=1)  # max over turns < t
    keep = mask & ~((earlier > 0) & (r <= 0))
    if failed is not None:
        keep = keep & ~as_bool_mask(failed, "failed", (rewards.shape[0],))[:, None]
    return keep
