"""Tests for tritongym.rl.shaping: PR, PRS, zero-variance filtering (rl-algorithms.md §2.3–2.5)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import (
    meaningful_turn_mask,
    profiling_reward,
    prs_keep_probability,
    prs_sample,
    trloo_advantages,
    zero_variance_group_mask,
)


def test_profiling_reward_fixtures_spec_2_3_d1_d2():
    correct = torch.tensor([True, True])
    reward = profiling_reward(correct, torch.tensor([1.8, 4.2]), torch.tensor([0.6, 0.4]))
    assert reward[0].item() == pytest.approx(0.5 + 0.9 + 0.3)  # 1.7
    assert reward[1].item() == pytest.approx(0.5 + 1.5 + 0.5 * 0.4)  # capped at 3 → 2.0 + 0.5·cov


def test_incorrect_failed_or_decoy_get_penalty_regardless_of_speedup_spec_2_3_d3_d4():
    correct = torch.tensor([False, True, True, False])
    speedup = torch.tensor([5.0, 2.0, 2.0, math.nan])
    coverage = torch.tensor([0.9, 0.9, 0.9, 0.9])
    reward = profiling_reward(
        correct,
        speedup,
        coverage,
        failed=torch.tensor([False, True, False, False]),
        decoy=torch.tensor([False, False, True, False]),
    )
    assert reward.tolist() == [0.0, 0.0, 0.0, 0.0]
    penalised = profiling_reward(correct, speedup, coverage, failed=torch.tensor([0, 1, 0, 0]), penalty=-1.0)
    assert penalised[1].item() == -1.0
    assert penalised[0].item() == 0.0  # incorrect: no coverage, no speedup term


def test_speedup_floor_and_recipe_range():
    reward = profiling_reward(
        torch.tensor([True, True]), torch.tensor([0.8, 100.0]), torch.tensor([0.0, 1.0]), speedup_floor=1.0
    )
    assert reward[0].item() == pytest.approx(0.5)  # 0.8 < floor 1.0 → s̃ = 0
    assert reward[1].item() == pytest.approx(2.5)  # recipe maximum 0.5 + 1.5 + 0.5


def test_prs_keep_probability_fixtures_spec_2_4_d1_d3():
    correct = torch.tensor([True, True, True, True, True, False])
    coverage = torch.tensor([0.35, 0.3, 0.2, 0.4, 0.9, 0.0])
    prob = prs_keep_probability(coverage, correct)
    torch.testing.assert_close(prob, torch.tensor([0.5, 0.0, 0.0, 1.0, 1.0, 1.0]), atol=1e-6, rtol=0)
    hard = prs_keep_probability(coverage, correct, factor=0.0)
    assert hard.tolist() == [1.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    with_speedup = prs_keep_probability(
        coverage, correct, speedup=torch.tensor([0.5, 2.0, 1.0, 1.0, 1.0, 1.0]), speedup_threshold=1.5
    )
    assert with_speedup[1].item() == 1.0 and with_speedup[2].item() == 0.0


def test_prs_empirical_keep_rate_spec_2_4_d1():
    """p = 0.5 over 10^5 draws: SE = 0.0016, the spec's ±0.005 is > 3 SE."""
    prob = prs_keep_probability(torch.full((100_000,), 0.35), torch.ones(100_000, dtype=torch.bool))
    keep = prs_sample(prob, generator=torch.Generator().manual_seed(0))
    assert keep.float().mean().item() == pytest.approx(0.5, abs=0.005)


def test_prs_geometric_mode_spec_2_4_d4():
    coverage = torch.tensor([0.5, 0.2, 0.8, 0.9], dtype=torch.float64)
    correct = torch.tensor([True, True, True, False])
    traj = torch.tensor([0, 0, 1, 1])
    prob = prs_keep_probability(coverage, correct, trajectory_ids=traj)
    geo = math.sqrt(0.5 * 0.2)
    assert geo == pytest.approx(0.3162, abs=1e-4)
    assert prob[0].item() == pytest.approx((geo - 0.3) / 0.1) and prob[1].item() == prob[0].item()
    assert prob[0].item() == pytest.approx(0.162, abs=1e-3)
    assert prob[3].item() == 1.0  # incorrect turn always kept
    # valid= excludes padding turns from the geometric mean
    masked = prs_keep_probability(coverage, correct, trajectory_ids=traj, valid=torch.tensor([1, 0, 1, 1]))
    assert masked[0].item() == pytest.approx(1.0)


def test_prs_shared_draw_per_trajectory():
    prob = torch.full((6,), 0.5)
    traj = torch.tensor([0, 0, 0, 1, 1, 1])
    for seed in range(20):
        keep = prs_sample(prob, trajectory_ids=traj, generator=torch.Generator().manual_seed(seed))
        assert keep[:3].unique().numel() == 1 and keep[3:].unique().numel() == 1
    a = prs_sample(prob, generator=torch.Generator().manual_seed(3))
    b = prs_sample(prob, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    assert prs_sample(torch.tensor([0.0, 1.0])).tolist() == [False, True]
    with pytest.raises(ValueError, match="keep_probability"):
        prs_sample(torch.tensor([1.5]))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 16))
def test_zero_variance_filter_matches_loop(seed, n):
    gen = torch.Generator().manual_seed(seed)
    scores = (torch.rand(n, generator=gen) < 0.5).double()
    ids = torch.randint(0, 4, (n,), generator=gen)
    truncated = torch.rand(n, generator=gen) < 0.3
    keep = zero_variance_group_mask(scores, ids, truncated=truncated)
    for i in range(n):
        members = [j for j in range(n) if ids[j] == ids[i]]
        values = [scores[j].item() for j in members]
        mean = sum(values) / len(values)
        # KernelGYM's PPOBatchFilter: torch.std (unbiased) on groups of two or more, singletons unchecked.
        low = len(values) > 1 and math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) < 1e-3
        all_trunc = all(truncated[j] for j in members)
        assert keep[i].item() == (not low and not all_trunc)


def test_zero_variance_filter_drops_all_equal_groups_and_keeps_singletons():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5])
    ids = torch.tensor([0, 0, 1, 1, 2])
    assert zero_variance_group_mask(scores, ids).tolist() == [False, False, True, True, True]


def test_zero_variance_filter_uses_the_unbiased_std():
    # Two rewards 8e-4 apart: population std 4e-4 (< 1e-3), unbiased std 5.66e-4 (< 1e-3) -> dropped;
    # 1.6e-3 apart: population std 8e-4 would drop the group, the unbiased 1.13e-3 keeps it (KernelGYM).
    assert zero_variance_group_mask(torch.tensor([0.0, 8e-4]), torch.tensor([0, 0])).tolist() == [False, False]
    assert zero_variance_group_mask(torch.tensor([0.0, 1.6e-3]), torch.tensor([0, 0])).tolist() == [True, True]


def _meaningful_reference(rewards, lengths, failed):
    """KernelGYM MultiTurnRequest.finalize (mask_void_turn=True), written as its loop over turns."""
    out = []
    for row, n, bad in zip(rewards, lengths, failed, strict=True):
        keep, best = [], None
        for t in range(n):
            meaningful = t == 0 or not best > 0.0 or row[t] > 0.0
            keep.append(meaningful and not bad)
            best = row[t] if best is None else max(best, row[t])
        out.append(keep + [False] * (len(row) - n))
    return out


def test_meaningful_turn_mask_worked_example():
    # A = [1, 0], B = [0, 1]: A's turn 2 follows a scoring turn and scores nothing: masked.
    keep = meaningful_turn_mask(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), torch.ones(2, 2, dtype=torch.bool))
    assert keep.tolist() == [[True, False], [True, True]]
    # An error-ended trajectory loses every turn; a missing turn stays out.
    keep = meaningful_turn_mask(torch.tensor([[0.5, 1.0, 0.0], [0.5, -1.0, 2.0]]),
                                torch.tensor([[1, 1, 0], [1, 1, 1]]), failed=torch.tensor([True, False]))
    assert keep.tolist() == [[False, False, False], [True, False, True]]



def test_a_masked_turn_leaves_its_peers_leave_one_out_baseline_in_a_group_of_three():
    """The composition the TRL trainer applies (`TRLOOGRPOTrainer._apply_turn_advantages`, step 1):
    the mask, the masked turns' rewards zeroed, TRLOO over the mask. With three trajectories of one
    prompt, A = [1, -0.5] has its turn 2 masked (it follows a scoring turn and scores nothing), and
    that changes B's and C's turn-2 baseline: the group of turn 2 is {B, C}, not {A, B, C}. (With
    two trajectories the masked turn's peer is alone either way, so groups of two cannot show it.)"""
    rewards = torch.tensor([[1.0, -0.5], [0.0, 0.5], [0.0, 1.0]], dtype=torch.float64)
    turn_mask = torch.ones(3, 2, dtype=torch.bool)
    groups = torch.zeros(3, dtype=torch.long)
    keep = meaningful_turn_mask(rewards, turn_mask)
    assert keep.tolist() == [[True, False], [True, True], [True, True]]
    zeroed = torch.where(keep, rewards, 0.0)
    advantages = trloo_advantages(zeroed, keep, groups)
    # Returns (gamma 1): A [1, 0] (its -0.5 zeroed), B [0.5, 0.5], C [1, 1].
    # Turn 1, group {A, B, C}: A 1 - (0.5 + 1) / 2, B 0.5 - (1 + 1) / 2, C 1 - (1 + 0.5) / 2.
    # Turn 2, group {B, C}: B 0.5 - 1, C 1 - 0.5; A's masked turn gets nothing.
    assert advantages.flatten().tolist() == pytest.approx([0.25, 0.0, -0.5, -0.5, 0.25, 0.5])
    # The peers' turn 2 as it would be with A's masked turn left in the group (reward zeroed):
    # B 0.5 - (0 + 1) / 2 = 0 and C 1 - (0 + 0.5) / 2 = 0.75: the group, not only the reward, moves them.
    kept_in_group = trloo_advantages(zeroed, turn_mask, groups)
    assert kept_in_group[1:, 1].tolist() == pytest.approx([0.0, 0.75])
    # A turn outside the mask adds nothing to its trajectory's returns, zeroed or not.
    assert torch.equal(trloo_advantages(rewards, keep, groups), advantages)
    # KernelGYM's released loops (loss_mask, zeroed rewards, groups by (uid, turn)) give the same table.
    from tests.integrations import released_drkernel as released

    table = released.turn_advantages([("p", row) for row in rewards.tolist()])
    assert [table[(i, t)] for i in range(3) for t in range(2)] == pytest.approx(advantages.flatten().tolist())


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), turns=st.integers(1, 5))
def test_meaningful_turn_mask_matches_kernelgyms_loop(seed, n, turns):
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(-1, 3, (n, turns), generator=gen).double() * 0.5  # -0.5, 0, 0.5, 1
    lengths = torch.randint(1, turns + 1, (n,), generator=gen)
    failed = torch.rand(n, generator=gen) < 0.2
    turn_mask = torch.arange(turns)[None, :] < lengths[:, None]
    keep = meaningful_turn_mask(rewards, turn_mask, failed=failed)
    assert keep.tolist() == _meaningful_reference(rewards.tolist(), lengths.tolist(), failed.tolist())