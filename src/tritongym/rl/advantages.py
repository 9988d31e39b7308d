"""Group-baseline advantages: GRPO, Dr.GRPO, RLOO (one turn) and TRLOO (multi-turn, per turn).

Family: outcome-reward advantage estimators with a group baseline (no critic).

References (formulas as in ``rl-algorithms.md`` §1.1 and §2.1, checked against the public code
cited there):

* GRPO — Shao et al., *DeepSeekMath*, arXiv 2402.03300, §4.1.2 (outcome supervision):
  Â = (r − mean(r)) / std(r); verl ``compute_grpo_outcome_advantage`` adds ε = 1e-6 and uses the
  unbiased std.
* Dr.GRPO — Liu et al., *Understanding R1-Zero-Like Training*, arXiv 2503.20783: drop the std
  division (and use a constant-length loss normaliser, see ``policy_loss.aggregate_loss``).
* RLOO — Kool et al. 2019 (*Buy 4 REINFORCE Samples*), Ahmadian et al., arXiv 2402.14740:
  baseline = mean of the *other* samples' rewards.
* TRLOO — Dr.Kernel, arXiv 2602.05885 ("turn-level REINFORCE leave-one-out"); reference code
  KernelGYM ``compute_multi_turn_rloo_outcome_advantage`` @3a84417: reward-to-go over turns,
  leave-one-out baseline among the trajectories of the same prompt that reached the turn.

Why leave-one-out: if R_i is independent of the other samples, E[∇log π(y_i)·(R_i − mean_g R)]
= (1 − 1/N)·∇J, so a self-included mean shrinks the gradient by (N − 1)/N; in multi-turn RL N
differs per turn, so the shrink also *tilts* the gradient (rl-algorithms.md §2.1(a)5, check 4).
Leave-one-out is exactly unbiased.

Conventions: tensors in, tensors out; masks are bool (or 0/1, non-zero = valid); group ids are
integers, need not be adjacent or contiguous; the result has the rewards' dtype (maths in float64).

Deliberately left out: Dr.Kernel's other multi-turn estimators (``erloo``, ``egae``,
``reinforce``), reward shaping r_k − r_{k−1} (not allowed with TRLOO in KernelGYM), std
normalisation of TRLOO (the recipe has none), and the flat row layout (rows = trajectory·K + k):
reshape it with ``x.view(n_traj, K)`` before calling and ``.reshape(-1)`` after.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import (
    as_bool_mask,
    as_group_ids,
    check_ndim,
    group_inverse,
    group_sum,
    result_dtype,
)

__all__ = [
    "broadcast_to_tokens",
    "dr_grpo_advantages",
    "grpo_advantages",
    "rloo_advantages",
    "trloo_advantages",
    "turn_grpo_advantages",
    "turn_returns",
]


def _check_turn_inputs(rewards: Tensor, turn_mask: Tensor, group_ids: object) -> tuple[Tensor, Tensor]:
    check_ndim(rewards, 2, "rewards", "[n, T]")
    mask = as_bool_mask(turn_mask, "turn_mask", rewards.shape)
    ids = as_group_ids(group_ids, rewards.shape[0])
    return mask, ids


def turn_returns(rewards: Tensor, turn_mask: Tensor, gamma: float = 1.0) -> Tensor:
    """Turn-level reward-to-go G (Dr.Kernel arXiv 2602.05885, TRLOO returns; rl-algorithms.md §2.1(a)2).

    Math:
        G[i,t] = Σ_{k ≥ t, turn_mask[i,k]} gamma^(k − t) · rewards[i,k]
        computed as G[i,t] = r'[i,t] + gamma · G[i,t+1], r' = rewards where turn_mask else 0;
        G[i,t] = 0 where turn_mask[i,t] is False.

    Args:
        rewards: ``[n, T] float`` per-turn rewards; entries where ``turn_mask`` is False are
            ignored (they may hold anything, NaN included).
        turn_mask: ``[n, T] bool`` (or 0/1), True where the turn exists.
        gamma: discount over *turns*, in [0, 1].

    Returns:
        ``[n, T]``, the dtype of ``rewards``.

    Defaults:
        gamma = 1.0 (Dr.Kernel recipe ``algorithm.gamma``; undiscounted reward-to-go).
    """
    check_ndim(rewards, 2, "rewards", "[n, T]")
    mask = as_bool_mask(turn_mask, "turn_mask", rewards.shape)
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma: expected a value in [0, 1], got {gamma}")
    r = torch.where(mask, rewards.to(torch.float64), 0.0)  # r' [n, T]
    returns = torch.zeros_like(r)
    running = torch.zeros_like(r[:, 0])
    for t in range(r.shape[1] - 1, -1, -1):  # loop over turns (T is small), vectorised over n
        running = r[:, t] + gamma * running  # G[:, t] = r'[:, t] + γ G[:, t+1]
        returns[:, t] = running
    returns = torch.where(mask, returns, 0.0)
    return returns.to(result_dtype(rewards))


def trloo_advantages(rewards: Tensor, turn_mask: Tensor, group_ids: object, gamma: float = 1.0) -> Tensor:
    """Turn-level REINFORCE leave-one-out advantages (Dr.Kernel arXiv 2602.05885, TRLOO; spec §2.1(a)4).

    Math:
        G = turn_returns(rewards, turn_mask, gamma)
        S(g,t) = {j : group_ids[j] = g, turn_mask[j,t]}          (trajectories that reached turn t)
        A[i,t] = G[i,t] − (1/(|S|−1)) Σ_{j ∈ S, j ≠ i} G[j,t]     if |S| > 1
               = N/(N−1) · (G[i,t] − mean_{j∈S} G[j,t]),          N = |S|
        A[i,t] = G[i,t]                                           if |S| = 1 (baseline 0)
        A[i,t] = 0                                                where turn_mask[i,t] is False

    Args:
        rewards: ``[n, T] float`` per-turn rewards (entries outside ``turn_mask`` are ignored).
        turn_mask: ``[n, T] bool`` (or 0/1), True where the turn exists. Usually a prefix of each
            row (ragged turn counts); any pattern is accepted and the formula above applied as is
            (e.g. KernelGYM's void-turn masking).
        group_ids: ``[n] int``; trajectories of the same prompt share an id (not necessarily
            adjacent).
        gamma: discount over turns, in [0, 1].

    Returns:
        ``[n, T]`` advantages, the dtype of ``rewards`` (float64 internally).

    Defaults:
        gamma = 1.0 (Dr.Kernel 8B/14B scripts). No std normalisation (KernelGYM ``batch_std=False``).

    Notes:
        Rows later removed by rejection sampling (MRS, PRS) must still be in ``turn_mask`` here:
        KernelGYM groups by ``loss_mask``/``turn_indices``, not by the RS-modified response mask,
        so rejected turns still count in their peers' baselines (spec §12 gotcha 11). Apply the
        rejection to the *loss* mask only.
    """
    mask, ids = _check_turn_inputs(rewards, turn_mask, group_ids)
    returns = turn_returns(rewards, mask, gamma).to(torch.float64)  # G [n, T]
    inverse, num_groups = group_inverse(ids)
    g_sum = group_sum(returns, inverse, num_groups)[inverse]  # Σ_{j∈S} G[j,t], [n, T]
    count = group_sum(mask.to(torch.float64), inverse, num_groups)[inverse]  # |S|, [n, T]
    others = count - 1.0
    loo_baseline = torch.where(others > 0, (g_sum - returns) / others.clamp_min(1.0), 0.0)  # b_{−i}
    advantages = torch.where(mask, returns - loo_baseline, 0.0)  # A = G − b_{−i}
    return advantages.to(result_dtype(rewards))


def turn_grpo_advantages(rewards: Tensor, turn_mask: Tensor, group_ids: object, gamma: float = 1.0) -> Tensor:
    """Dr.Kernel's multi-turn "grpo": self-included turn mean, no std (KernelGYM ``grpo``; spec §2.1(d)1).

    Shipped as the *biased* comparison point for TRLOO (the paper's self-inclusion argument).

    Math:
        A[i,t] = G[i,t] − mean_{j ∈ S(g,t)} G[j,t]   (i itself included; |S| = 1 → A = 0)

    Args:
        rewards, turn_mask, group_ids, gamma: as in ``trloo_advantages``.

    Returns:
        ``[n, T]``, the dtype of ``rewards``; zero where ``turn_mask`` is False.
    """
    mask, ids = _check_turn_inputs(rewards, turn_mask, group_ids)
    returns = turn_returns(rewards, mask, gamma).to(torch.float64)
    inverse, num_groups = group_inverse(ids)
    g_sum = group_sum(returns, inverse, num_groups)[inverse]
    count = group_sum(mask.to(torch.float64), inverse, num_groups)[inverse]
    mean = g_sum / count.clamp_min(1.0)  # mean_{j∈S} G[j,t]
    return torch.where(mask, returns - mean, 0.0).to(result_dtype(rewards))


def rloo_advantages(scores: Tensor, group_ids: object) -> Tensor:
    """REINFORCE leave-one-out advantages (Ahmadian et al. arXiv 2402.14740; spec §1.1(a)).

    The one-turn case of ``trloo_advantages`` (computed by it, so the two cannot drift).

    Math:
        A[i] = scores[i] − (1/(N−1)) Σ_{j ≠ i, same group} scores[j] = N/(N−1)·(scores[i] − mean_g)
        A[i] = scores[i] for a group of size N = 1 (baseline 0)

    Args:
        scores: ``[n] float`` one scalar reward per sequence.
        group_ids: ``[n] int`` prompt-group ids.

    Returns:
        ``[n]``, the dtype of ``scores``.

    Defaults:
        Group of size 1 → A = R, as KernelGYM and verl ``rloo``; verl ``rloo_vectorized`` returns 0
        instead (spec §12 gotcha 1), we follow the former so that RLOO = TRLOO with one turn.
    """
    check_ndim(scores, 1, "scores", "[n]")
    ones = torch.ones((scores.shape[0], 1), dtype=torch.bool, device=scores.device)
    return trloo_advantages(scores[:, None], ones, group_ids)[:, 0]


def grpo_advantages(
    scores: Tensor, group_ids: object, *, eps: float = 1e-6, norm_by_std: bool = True
) -> Tensor:
    """GRPO outcome advantages (Shao et al. arXiv 2402.03300 §4.1.2; verl ``compute_grpo_outcome_advantage``).

    Math:
        norm_by_std:  A[i] = (scores[i] − mean_g) / (std_g + eps)
        otherwise:    A[i] = scores[i] − mean_g                    (Dr.GRPO)
        mean_g, std_g over the rows of i's group; std_g is the unbiased sample std (divisor N − 1);
        a group of size 1 uses mean_g = 0, std_g = 1 (so A = R/(1 + eps), resp. A = R).

    Args:
        scores: ``[n] float`` one scalar reward per sequence.
        group_ids: ``[n] int`` prompt-group ids.
        eps: added to the std.
        norm_by_std: divide by the group std (False gives Dr.GRPO).

    Returns:
        ``[n]``, the dtype of ``scores``.

    Defaults:
        eps = 1e-6 (verl). All-equal rewards give A = 0 (std 0, numerator 0), which is also what
        KernelGYM's "std < ε → 1" rule yields.
    """
    check_ndim(scores, 1, "scores", "[n]")
    ids = as_group_ids(group_ids, scores.shape[0])
    if eps < 0:
        raise ValueError(f"eps: expected a value >= 0, got {eps}")
    r = scores.to(torch.float64)
    inverse, num_groups = group_inverse(ids)
    count = group_sum(torch.ones_like(r), inverse, num_groups)  # N_g [G]
    mean = group_sum(r, inverse, num_groups) / count  # mean_g [G]
    singleton = count < 2
    mean = torch.where(singleton, 0.0, mean)
    centred = r - mean[inverse]  # R − mean_g [n]
    if not norm_by_std:
        return centred.to(result_dtype(scores))
    sq = group_sum(centred**2, inverse, num_groups)
    std = torch.sqrt(sq / (count - 1.0).clamp_min(1.0))  # unbiased std_g [G]
    std = torch.where(singleton, 1.0, std)
    return (centred / (std[inverse] + eps)).to(result_dtype(scores))


def dr_grpo_advantages(scores: Tensor, group_ids: object) -> Tensor:
    """Dr.GRPO advantages: group-mean baseline, no std (Liu et al. arXiv 2503.20783).

    Math:
        A[i] = scores[i] − mean_g   (group of size 1: mean_g = 0, so A = R)

    Pair it with the ``seq-mean-token-sum-norm`` aggregation (``policy_loss.aggregate_loss``).

    Args:
        scores: ``[n] float``; group_ids: ``[n] int``.

    Returns:
        ``[n]``, the dtype of ``scores``.
    """
    return grpo_advantages(scores, group_ids, norm_by_std=False)


def broadcast_to_tokens(values: Tensor, mask: Tensor) -> Tensor:
    """Broadcast one value per row over that row's valid tokens (verl's ``A.unsqueeze(-1) * mask``).

    Math:
        out[b, l] = values[b] if mask[b, l] else 0

    Args:
        values: ``[B] float`` per-row advantages (e.g. a TRLOO ``[n, T]`` result ``.reshape(-1)``).
        mask: ``[B, L] bool`` (or 0/1) response mask.

    Returns:
        ``[B, L]``, the dtype of ``values``.
    """
    check_ndim(values, 1, "values", "[B]")
    check_ndim(mask, 2, "mask", "[B, L]")
    if mask.shape[0] != values.shape[0]:
        raise ValueError(f"mask: expected {values.shape[0]} rows, got {mask.shape[0]}")
    bool_mask = as_bool_mask(mask, "mask")
    return torch.where(bool_mask, values[:, None], torch.zeros((), dtype=values.dtype, device=values.device))
