"""Dr.Kernel's released advantage and filter rules, written as plain float64 loops from KernelGYM's code
(hkust-nlp/KernelGYM @3a84417), for the trainer-integration tests to compare against.

Independent of ``tritongym.rl`` on purpose: the trainers' outputs are checked against these loops, not
against the functions they call. Sources: ``MultiTurnRequest.finalize`` (``mask_void_turn``: the per-turn
``loss_mask``), ``MultiTurnAsyncvLLMEngine._postprocess`` (T rows per trajectory, left-padded with turn
index −1), ``RayKernelTrainer.fit`` (MRS/PRS edit ``response_mask`` only; ``apply_loss_mask_to_rewards``
zeroes rewards where ``loss_mask`` is 0), ``compute_multi_turn_rloo_outcome_advantage`` (returns over the
reshaped rows, groups by (uid, turn index) among ``loss_mask`` 1) and ``PPOBatchFilter`` (``torch.std`` of
the last-turn rewards of groups of two or more, < 1e-3 → dropped).
"""

from __future__ import annotations

import math


def loss_mask(rewards: list[float], mask_void_turn: bool = True, failed: bool = False) -> list[int]:
    """``finalize``: 1 keeps a turn; after a positive turn, a turn scoring <= 0 is not meaningful."""
    out, best = [], None
    for t, r in enumerate(rewards):
        meaningful = t == 0 or not best > 0.0 or r > 0.0
        out.append(0 if failed or (mask_void_turn and not meaningful) else 1)
        best = r if best is None else max(best, r)
    return out


def turn_advantages(trajectories: list[tuple[str, list[float]]], drop: set[tuple[int, int]] = frozenset(),
                    mask_void_turn: bool = True, gamma: float = 1.0) -> dict[tuple[int, int], float]:
    """``{(trajectory, turn): advantage}`` on the turn's tokens; 0 for masked and dropped turns.

    Args:
        trajectories: ``(uid, per-turn rewards)`` per trajectory.
        drop: (trajectory, turn) pairs rejected by MRS or PRS (``response_mask`` 0, reward kept).
    """
    width = max(len(r) for _, r in trajectories)
    rows = []  # (trajectory, turn index or -1, uid, reward, loss_mask, response_mask)
    for i, (uid, rewards) in enumerate(trajectories):
        rows += [(i, -1, uid, 0.0, 0, 0)] * (width - len(rewards))
        for t, (r, loss) in enumerate(zip(rewards, loss_mask(rewards, mask_void_turn), strict=True)):
            rows.append((i, t, uid, float(r), loss, 0 if (loss == 0 or (i, t) in drop) else 1))
    scores = [r * loss for (_, _, _, r, loss, _) in rows]
    returns = [0.0] * len(rows)
    for start in range(0, len(rows), width):
        for k in reversed(range(width)):
            later = returns[start + k + 1] if k < width - 1 else 0.0
            returns[start + k] = scores[start + k] + gamma * later
    groups: dict[tuple[str, int], list[float]] = {}
    for j, (_, t, uid, _, loss, _) in enumerate(rows):
        if t != -1 and loss:
            groups.setdefault((uid, t), []).append(returns[j])
    out = {}
    for j, (i, t, uid, _, loss, response) in enumerate(rows):
        if t == -1:
            continue
        advantage = 0.0
        if loss:
            members = groups[(uid, t)]
            n = len(members)
            advantage = returns[j] if n == 1 else returns[j] * n / (n - 1) - (sum(members) / n) * n / (n - 1)
        out[(i, t)] = advantage * response
    return out


def filtered_groups(trajectories: list[tuple[str, list[float]]], min_std: float = 1e-3,
                    mask_void_turn: bool = True) -> set[str]:
    """Prompt groups ``PPOBatchFilter`` drops: unbiased std of the last-turn rewards after ``loss_mask``."""
    last: dict[str, list[float]] = {}
    for uid, rewards in trajectories:
        last.setdefault(uid, []).append(rewards[-1] * loss_mask(rewards, mask_void_turn)[-1])
    out = set()
    for uid, values in last.items():
        if len(values) > 1:
            mean = sum(values) / len(values)
            if math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) < min_std:
                out.add(uid)
    return out
