"""Float64 loop reference implementations, written from the spec sheet independently of the library.

Each one is a literal transcription of the formula in ``rl-algorithms.md`` with plain Python loops
over rows, groups and positions, so that the vectorised library code is checked against code that
shares none of its tricks (group scatter, cumsum, masks-as-where, online logsumexp).
"""

from __future__ import annotations

import math

import torch


def trloo_loop(rewards, turn_mask, group_ids, gamma=1.0, leave_one_out=True):
    """TRLOO (spec §2.1) or, with leave_one_out=False, Dr.Kernel's self-included turn mean."""
    r = rewards.tolist()
    m = turn_mask.bool().tolist()
    g = group_ids.tolist()
    n, turns = len(r), len(r[0]) if r else 0
    returns = [[0.0] * turns for _ in range(n)]
    for i in range(n):
        for t in range(turns):
            if m[i][t]:
                returns[i][t] = sum(gamma ** (k - t) * r[i][k] for k in range(t, turns) if m[i][k])
    adv = [[0.0] * turns for _ in range(n)]
    for i in range(n):
        for t in range(turns):
            if not m[i][t]:
                continue
            others = [returns[j][t] for j in range(n) if j != i and g[j] == g[i] and m[j][t]]
            if leave_one_out:
                baseline = sum(others) / len(others) if others else 0.0
            else:
                members = others + [returns[i][t]]
                baseline = sum(members) / len(members)
            adv[i][t] = returns[i][t] - baseline
    return torch.tensor(adv, dtype=torch.float64).reshape(n, turns)


def otb_loop(token_rewards, mask, group_ids, w, eps=1e-8, handle_zero_tail=True, leave_one_out=False):
    """OTB (spec §3.3) from per-token weights w, with verl's zero-tail rule written as verl states it."""
    r = token_rewards.double().tolist()
    m = mask.bool().tolist()
    w = w.double().tolist()
    g = group_ids.tolist()
    n, length = len(r), len(r[0])
    big_w = [[sum(w[i][j] for j in range(t + 1) if m[i][j]) for t in range(length)] for i in range(n)]
    big_g = [[sum(r[i][j] for j in range(t, length) if m[i][j]) for t in range(length)] for i in range(n)]
    lengths = [sum(row) for row in m]
    adv = [[0.0] * length for _ in range(n)]
    for i in range(n):
        group = [j for j in range(n) if g[j] == g[i]]
        for t in range(length):
            if not m[i][t]:
                continue
            if len(group) == 1:
                baseline = 0.0
            else:
                members = [j for j in group if (j != i or not leave_one_out) and m[j][t]]
                if leave_one_out and not members:
                    baseline = 0.0
                else:
                    num = sum(big_g[j][t] * big_w[j][t] for j in members)
                    den = sum(big_w[j][t] for j in members) + eps
                    baseline = num / den
                if handle_zero_tail and not leave_one_out:
                    group_lengths = sorted(lengths[j] for j in group)
                    longest = [j for j in group if lengths[j] == group_lengths[-1]]
                    if longest == [i] and group_lengths[-1] > group_lengths[-2] and t >= group_lengths[-2]:
                        baseline = 0.0
            adv[i][t] = big_g[i][t] - baseline
    return torch.tensor(adv, dtype=torch.float64)


def log_softmax_rows(logits):
    """float64 log-softmax along the last axis, one row at a time with math.fsum."""
    flat = logits.double().reshape(-1, logits.shape[-1]).tolist()
    out = []
    for row in flat:
        mx = max(row)
        lse = mx + math.log(math.fsum(math.exp(z - mx) for z in row))
        out.append([z - lse for z in row])
    return torch.tensor(out, dtype=torch.float64).reshape(logits.shape)


def dvp_loop(logits, tokens, alpha, temperature=1.0):
    """log π_S(y), y ∈ V_S and log S per position (spec §5(a)2–3), float64 loops."""
    flat = (logits.double() / temperature).reshape(-1, logits.shape[-1]).tolist()
    toks = tokens.reshape(-1).tolist()
    log_probs, in_safe, log_mass = [], [], []
    for row, y in zip(flat, toks, strict=True):
        mx = max(row)
        thr = mx + math.log(alpha)
        safe = [z for z in row if z >= thr]
        lse_s = mx + math.log(math.fsum(math.exp(z - mx) for z in safe))
        lse = mx + math.log(math.fsum(math.exp(z - mx) for z in row))
        in_safe.append(row[y] >= thr)
        log_probs.append(row[y] - lse_s if row[y] >= thr else float("nan"))
        log_mass.append(lse_s - lse)
    shape = tokens.shape
    return (
        torch.tensor(log_probs, dtype=torch.float64).reshape(shape),
        torch.tensor(in_safe).reshape(shape),
        torch.tensor(log_mass, dtype=torch.float64).reshape(shape),
    )


def sum_pi_squared_loop(logits, temperature=1.0):
    """Σπ² per position, float64, direct Σ p² with fsum."""
    lp = log_softmax_rows(logits.double() / temperature)
    flat = lp.reshape(-1, lp.shape[-1]).tolist()
    vals = [math.fsum(math.exp(2 * v) for v in row) for row in flat]
    return torch.tensor(vals, dtype=torch.float64).reshape(logits.shape[:-1])
