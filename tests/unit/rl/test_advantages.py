"""Tests for tritongym.rl.advantages: GRPO, Dr.GRPO, RLOO, TRLOO (rl-algorithms.md §1.1, §2.1, §12)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import (
    broadcast_to_tokens,
    dr_grpo_advantages,
    grpo_advantages,
    rloo_advantages,
    trloo_advantages,
    turn_grpo_advantages,
    turn_returns,
)

from .references import trloo_loop


def _random_turn_batch(seed: int, n: int, turns: int, n_groups: int, prefix: bool = True):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randn(n, turns, generator=gen, dtype=torch.float64)
    if prefix:
        counts = torch.randint(0, turns + 1, (n,), generator=gen)
        mask = torch.arange(turns)[None, :] < counts[:, None]
    else:
        mask = torch.rand(n, turns, generator=gen) < 0.7
    group_ids = torch.randint(0, n_groups, (n,), generator=gen) * 7 - 3  # sparse, negative ids too
    return rewards, mask, group_ids


# ---- hand fixtures -------------------------------------------------------------------------------


def test_trloo_hand_fixture_spec_2_1_d1():
    """§2.1(d)1: A r=[.5,1,1.5], B r=[0,.5], C r=[1]; γ = 1."""
    rewards = torch.tensor([[0.5, 1.0, 1.5], [0.0, 0.5, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]], dtype=torch.bool)
    ids = torch.tensor([4, 4, 4])
    expected_returns = torch.tensor([[3.0, 2.5, 1.5], [0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(turn_returns(rewards, mask), expected_returns)
    expected = torch.tensor([[2.25, 2.0, 1.5], [-1.5, -2.0, 0.0], [-0.75, 0.0, 0.0]])
    torch.testing.assert_close(trloo_advantages(rewards, mask, ids), expected)
    expected_grpo = torch.tensor([[1.5, 1.0, 0.0], [-1.0, -1.0, 0.0], [-0.5, 0.0, 0.0]])
    torch.testing.assert_close(turn_grpo_advantages(rewards, mask, ids), expected_grpo)


def test_trloo_fixture_with_interleaved_groups_and_garbage_padding():
    """The §2.1 fixture split across two interleaved prompts; padded rewards hold NaN and are ignored."""
    rewards = torch.tensor(
        [[0.5, 1.0, 1.5], [9.0, 9.0, 9.0], [0.0, 0.5, math.nan], [1.0, 1.0, 1.0], [1.0, math.nan, math.inf]]
    )
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    ids = torch.tensor([10, 3, 10, 3, 10])  # prompt 10 = fixture rows A, B, C
    out = trloo_advantages(rewards, mask, ids)
    torch.testing.assert_close(
        out[[0, 2, 4]], torch.tensor([[2.25, 2.0, 1.5], [-1.5, -2.0, 0.0], [-0.75, 0.0, 0.0]])
    )
    # prompt 3: G = [27, 18, 9] and [3, 2, 1]; with two members the LOO advantage is G_i − G_j.
    torch.testing.assert_close(out[[1, 3]], torch.tensor([[24.0, 16.0, 8.0], [-24.0, -16.0, -8.0]]))
    assert torch.isfinite(out).all()


def test_discounted_returns_spec_2_1_d5():
    rewards = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    gamma = 0.9
    returns = turn_returns(rewards, mask, gamma)
    assert returns[0, 0].item() == pytest.approx(1.0 + gamma * 2.0 + gamma**2 * 4.0, abs=1e-12)
    assert returns[0, 1].item() == pytest.approx(2.0 + gamma * 4.0, abs=1e-12)


def test_grpo_rloo_fixture_spec_1_1_d1():
    """§1.1(d)1: R = [1, 0, 0, 1]."""
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0])
    ids = torch.zeros(4, dtype=torch.long)
    torch.testing.assert_close(dr_grpo_advantages(scores, ids), torch.tensor([0.5, -0.5, -0.5, 0.5]))
    std = math.sqrt(1.0 / 3.0)  # unbiased std 0.57735
    torch.testing.assert_close(
        grpo_advantages(scores, ids), torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-6)
    )
    assert grpo_advantages(scores, ids)[0].item() == pytest.approx(0.86603, abs=1e-5)
    torch.testing.assert_close(rloo_advantages(scores, ids), torch.tensor([2, -2, -2, 2]) / 3.0)


def test_group_of_size_one_gotcha_1():
    """§12 gotcha 1: GRPO mean 0/std 1 → A = R; RLOO and TRLOO baseline 0 → A = R (G); turn-GRPO → 0."""
    scores = torch.tensor([2.0, -1.0, 3.0], dtype=torch.float64)
    ids = torch.tensor([0, 1, 2])
    torch.testing.assert_close(rloo_advantages(scores, ids), scores)
    torch.testing.assert_close(dr_grpo_advantages(scores, ids), scores)
    torch.testing.assert_close(grpo_advantages(scores, ids), scores / (1.0 + 1e-6))
    rewards = torch.tensor([[1.0, 2.0], [3.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True], [True, False]])
    torch.testing.assert_close(
        trloo_advantages(rewards, mask, torch.tensor([0, 1])), turn_returns(rewards, mask)
    )
    assert (turn_grpo_advantages(rewards, mask, torch.tensor([0, 1])) == 0).all()


def test_all_equal_rewards_give_zero_grpo_advantage():
    scores = torch.full((5,), 0.7)
    ids = torch.zeros(5, dtype=torch.long)
    assert (grpo_advantages(scores, ids) == 0).all()
    assert rloo_advantages(scores, ids).abs().max() < 1e-6


def test_rejected_rows_still_count_in_trloo_baselines_gotcha_11():
    """§12 gotcha 11: MRS/PRS act on the loss mask; TRLOO groups by turn existence.

    Computing TRLOO from the RS-modified mask (the bug) changes the surviving rows' advantages.
    """
    rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    turn_mask = torch.ones(3, 2, dtype=torch.bool)
    ids = torch.zeros(3, dtype=torch.long)
    keep = torch.tensor([True, True, False])  # row 2 rejected by PRS
    right = trloo_advantages(rewards, turn_mask, ids) * keep[:, None]
    wrong = trloo_advantages(rewards, turn_mask & keep[:, None], ids)
    # G = [1, 0], [1, 1], [4, 2]: row 0 turn 0 baseline (1 + 4)/2 = 2.5 → −1.5
    assert right[0, 0].item() == pytest.approx(-1.5)
    assert wrong[0, 0].item() == pytest.approx(0.0)
    assert right[2].abs().sum() == 0


def test_dtype_kept_and_integer_rewards_promoted():
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        rewards = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=dtype)
        out = trloo_advantages(rewards, torch.ones(2, 2, dtype=torch.bool), torch.tensor([0, 0]))
        assert out.dtype == dtype
        assert rloo_advantages(rewards[:, 0], torch.tensor([0, 0])).dtype == dtype
    out = rloo_advantages(torch.tensor([1, 0, 0]), torch.tensor([0, 0, 0]))
    assert out.dtype == torch.get_default_dtype()
    torch.testing.assert_close(out, torch.tensor([1.0, -0.5, -0.5]))


def test_numeric_turn_mask_and_list_group_ids_accepted():
    rewards = torch.tensor([[0.5, 1.0, 1.5], [0.0, 0.5, 0.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    out = trloo_advantages(rewards, mask, [1, 1, 1])
    assert out[0, 0].item() == pytest.approx(2.25)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: trloo_advantages(torch.zeros(3), torch.ones(3, dtype=torch.bool), torch.zeros(3)),
            "rewards",
        ),
        (
            lambda: trloo_advantages(torch.zeros(2, 3), torch.ones(2, 2, dtype=torch.bool), [0, 0]),
            "turn_mask",
        ),
        (lambda: trloo_advantages(torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool), [0]), "group_ids"),
        (lambda: trloo_advantages(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)), "integer dtype"),
        (lambda: turn_returns(torch.zeros(2, 3), torch.ones(2, 3), gamma=1.5), "gamma"),
        (lambda: rloo_advantages(torch.zeros(2, 1), [0, 0]), "scores"),
        (lambda: grpo_advantages(torch.zeros(2), [0, 0], eps=-1.0), "eps"),
    ],
)
def test_validation_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_broadcast_to_tokens():
    values = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(
        broadcast_to_tokens(values, mask), torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]])
    )


# ---- properties ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 12),
    turns=st.integers(1, 4),
    n_groups=st.integers(1, 4),
    gamma=st.sampled_from([1.0, 0.9, 0.5, 0.0]),
    prefix=st.booleans(),
)
def test_trloo_matches_float64_loop_reference(seed, n, turns, n_groups, gamma, prefix):
    rewards, mask, ids = _random_turn_batch(seed, n, turns, n_groups, prefix)
    torch.testing.assert_close(
        trloo_advantages(rewards, mask, ids, gamma), trloo_loop(rewards, mask, ids, gamma)
    )
    torch.testing.assert_close(
        turn_grpo_advantages(rewards, mask, ids, gamma),
        trloo_loop(rewards, mask, ids, gamma, leave_one_out=False),
    )


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 10), turns=st.integers(1, 4))
def test_trloo_zero_sum_and_permutation_equivariance_spec_2_1_d4(seed, n, turns):
    rewards, mask, ids = _random_turn_batch(seed, n, turns, 2)
    adv = trloo_advantages(rewards, mask, ids)
    for g in ids.unique():
        rows = ids == g
        count = mask[rows].sum(0).double()  # N_k per turn
        weighted = ((count - 1) / count.clamp_min(1) * adv[rows]).sum(0)
        torch.testing.assert_close(
            weighted[count > 1], torch.zeros_like(weighted[count > 1]), atol=1e-10, rtol=0
        )
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(trloo_advantages(rewards[perm], mask[perm], ids[perm]), adv[perm])
    relabelled = ids * 31 + 5
    torch.testing.assert_close(trloo_advantages(rewards, mask, relabelled), adv)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 10), turns=st.integers(1, 4))
def test_trloo_padding_slot_invariance_spec_2_1_d3(seed, n, turns):
    rewards, mask, ids = _random_turn_batch(seed, n, turns, 3)
    adv = trloo_advantages(rewards, mask, ids)
    garbage = torch.full((n, 1), math.nan, dtype=torch.float64)
    padded = trloo_advantages(
        torch.cat([rewards, garbage], 1), torch.cat([mask, torch.zeros(n, 1, dtype=torch.bool)], 1), ids
    )
    torch.testing.assert_close(padded[:, :turns], adv)
    assert (padded[:, turns] == 0).all()


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 12), shift=st.floats(-5, 5), scale=st.floats(0.1, 10))
def test_single_turn_identities_spec_1_1_d2_d4(seed, n, shift, scale):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, 3, (n,), generator=gen)
    rloo = rloo_advantages(scores, ids)
    mean_adv = dr_grpo_advantages(scores, ids)
    for g in ids.unique():
        rows = (ids == g).nonzero()[:, 0]
        size = rows.numel()
        if size < 2:
            continue
        assert mean_adv[rows].sum().abs() < 1e-10
        # RLOO = N/(N−1) · GRPO-mean, and A_i − A_j = N/(N−1)(R_i − R_j)
        torch.testing.assert_close(rloo[rows], size / (size - 1) * mean_adv[rows])
        i, j = rows[0], rows[1]
        assert (rloo[i] - rloo[j]).item() == pytest.approx(size / (size - 1) * (scores[i] - scores[j]).item())
    # shift invariance (groups of size ≥ 2), scale equivariance / invariance
    multi = torch.bincount(ids, minlength=3)[ids] > 1
    torch.testing.assert_close(rloo_advantages(scores + shift, ids)[multi], rloo[multi])
    torch.testing.assert_close(rloo_advantages(scores * scale, ids), rloo * scale)
    grpo = grpo_advantages(scores, ids, eps=0.0)
    torch.testing.assert_close(grpo_advantages(scores * scale, ids, eps=0.0)[multi], grpo[multi])


# ---- Monte Carlo unbiasedness --------------------------------------------------------------------


def _within(estimate: torch.Tensor, target: float, n_sigma: float = 4.0) -> bool:
    """Mean of per-group estimates within n_sigma standard errors of target."""
    se = estimate.std().item() / math.sqrt(estimate.numel())
    return abs(estimate.mean().item() - target) <= n_sigma * se


def test_bandit_rloo_unbiased_grpo_mean_shrunk_check_9():
    """Check 9: Bernoulli bandit π = sigmoid(θ), R = a, N = 4. E[ĝ] = p(1−p) for RLOO, (N−1)/N·p(1−p) for
    the self-included mean. 400k groups: SE ≈ 4e-4, the GRPO-mean gap 0.061 is > 100 SE."""
    torch.manual_seed(0)
    theta, group, n_groups = 0.3, 4, 400_000
    p = 1.0 / (1.0 + math.exp(-theta))
    actions = (torch.rand(n_groups * group, dtype=torch.float64) < p).double()
    ids = torch.arange(n_groups).repeat_interleave(group)
    score = actions - p  # ∇_θ log π(a)
    rloo = (rloo_advantages(actions, ids) * score).view(n_groups, group).mean(1)
    grpo_mean = (dr_grpo_advantages(actions, ids) * score).view(n_groups, group).mean(1)
    true = p * (1 - p)
    assert _within(rloo, true)
    assert _within(grpo_mean, (group - 1) / group * true)
    assert not _within(grpo_mean, true, n_sigma=20.0)


def test_two_turn_toy_trloo_unbiased_grpo_tilted_check_4():
    """Check 4 / §2.1(d)2: a_t ~ Bernoulli(sigmoid(θ_t)), θ = (−0.5, 0.8), r_t = a_t, turn 2 reached
    w.p. 0.5, N = 4. True gradient [p1(1−p1), q·p2(1−p2)] = [0.235004, 0.106955]. TRLOO within 4 SE
    per component (150k groups, SE ≈ 1e-3); the self-included turn mean is off by > 20 SE and by
    *different* factors per turn (≈ 0.75 and ≈ 0.53)."""
    torch.manual_seed(1)
    theta = torch.tensor([-0.5, 0.8], dtype=torch.float64)
    q, group, n_groups = 0.5, 4, 150_000
    n = group * n_groups
    p = torch.sigmoid(theta)
    actions = (torch.rand(n, 2, dtype=torch.float64) < p).double()
    mask = torch.ones(n, 2, dtype=torch.bool)
    mask[:, 1] = torch.rand(n) < q
    ids = torch.arange(n_groups).repeat_interleave(group)
    score = (actions - p) * mask  # ∂/∂θ_t log π(a_t)
    true = [p[0].item() * (1 - p[0].item()), q * p[1].item() * (1 - p[1].item())]
    assert true == pytest.approx([0.235004, 0.106955], abs=1e-6)
    trloo = (trloo_advantages(actions, mask, ids) * score).view(n_groups, group, 2).mean(1)
    grpo = (turn_grpo_advantages(actions, mask, ids) * score).view(n_groups, group, 2).mean(1)
    ratios = []
    for t in range(2):
        assert _within(trloo[:, t], true[t])
        assert not _within(grpo[:, t], true[t], n_sigma=20.0)
        ratios.append(grpo[:, t].mean().item() / true[t])
    assert ratios[0] == pytest.approx(0.75, abs=0.03)
    assert ratios[1] == pytest.approx(0.53, abs=0.04)
