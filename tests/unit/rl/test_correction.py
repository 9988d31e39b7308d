"""Tests for tritongym.rl.correction: TIS, MIS, RS, veto, Dr.Kernel MRS (rl-algorithms.md §1.3, §2.2, §12)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import (
    apply_row_mask,
    geometric_rs_mask,
    k3_rs_mask,
    mrs_mask,
    reinforce_token_loss,
    rollout_log_ratio,
    sequence_mis_weights,
    sequence_rs_mask,
    sequence_tis_weights,
    token_mis_weights,
    token_tis_weights,
    token_veto_mask,
)


def _delta_batch(delta, mask=None):
    """log_probs = Δ, rollout_log_probs = 0."""
    delta = torch.as_tensor(delta, dtype=torch.float64)
    if delta.dim() == 1:
        delta = delta[None, :]
    mask = (
        torch.ones_like(delta, dtype=torch.bool) if mask is None else torch.as_tensor(mask, dtype=torch.bool)
    )
    return delta, torch.zeros_like(delta), mask


def test_tis_mis_rs_fixture_spec_1_3_d1():
    """Δ = [0.1, 1.0, −0.2], all-ones mask."""
    lp, roll, mask = _delta_batch([0.1, 1.0, -0.2])
    rho = torch.tensor([[1.10517, 2.71828, 0.81873]], dtype=torch.float64)
    torch.testing.assert_close(token_tis_weights(lp, roll, mask), rho.clamp_max(2.0), atol=1e-5, rtol=0)
    assert math.exp(0.9) == pytest.approx(2.45960, abs=1e-5)
    torch.testing.assert_close(
        sequence_tis_weights(lp, roll, mask), torch.full((1, 3), 2.0, dtype=torch.float64)
    )
    assert (sequence_mis_weights(lp, roll, mask) == 0).all()  # ρ(y) = 2.46 > 2 → rejected
    assert not sequence_rs_mask(lp, roll, mask, lower=0.5, upper=2.0).item()
    assert math.exp(0.3) == pytest.approx(1.34986, abs=1e-5)
    assert not geometric_rs_mask(lp, roll, mask).item()  # ρ_geo = e^0.3 outside [0.999, 1.001]
    k3_mean = (0.00517 + 0.71828 + 0.01873) / 3
    assert k3_mean == pytest.approx(0.24740, abs=1e-5)
    assert not k3_rs_mask(lp, roll, mask).item()
    assert k3_rs_mask(lp, roll, mask, threshold=0.2475).item()
    assert not k3_rs_mask(lp, roll, mask, threshold=0.2473).item()
    # IcePop keeps 1.105 and 0.819, zeroes 2.718
    torch.testing.assert_close(
        token_mis_weights(lp, roll, mask), rho * torch.tensor([1, 0, 1]), atol=1e-5, rtol=0
    )


def test_weights_and_masks_accept_sequences_inside_bounds():
    lp, roll, mask = _delta_batch([0.0004, -0.0002, 0.0001])
    assert geometric_rs_mask(lp, roll, mask).item()
    assert k3_rs_mask(lp, roll, mask).item()
    w = sequence_mis_weights(lp, roll, mask)
    assert w[0, 0].item() == pytest.approx(math.exp(0.0003))


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    pad=st.integers(1, 4),
    garbage=st.sampled_from([math.nan, 50.0, -50.0, 3.0]),
)
def test_pad_invariance_spec_1_3_d4(seed, pad, garbage):
    gen = torch.Generator().manual_seed(seed)
    lp = torch.randn(5, 6, generator=gen, dtype=torch.float64) * 0.01
    roll = torch.randn(5, 6, generator=gen, dtype=torch.float64) * 0.01
    mask = torch.ones(5, 6, dtype=torch.bool)
    lp_p = torch.cat([lp, torch.full((5, pad), garbage, dtype=torch.float64)], 1)
    roll_p = torch.cat([roll, torch.zeros(5, pad, dtype=torch.float64)], 1)
    mask_p = torch.cat([mask, torch.zeros(5, pad, dtype=torch.bool)], 1)
    for fn in (token_tis_weights, sequence_tis_weights, token_mis_weights, sequence_mis_weights):
        padded = fn(lp_p, roll_p, mask_p)
        torch.testing.assert_close(padded[:, :6], fn(lp, roll, mask))
        assert (padded[:, 6:] == 0).all()
    for fn in (geometric_rs_mask, k3_rs_mask, token_veto_mask, sequence_rs_mask, mrs_mask):
        assert torch.equal(fn(lp_p, roll_p, mask_p), fn(lp, roll, mask))


def test_extreme_log_ratios_do_not_overflow_spec_1_3_d6():
    lp, roll, mask = _delta_batch([[50.0, -50.0, 0.0]])
    delta = rollout_log_ratio(lp, roll, mask)
    assert delta.tolist() == [[20.0, -20.0, 0.0]]
    for w in (token_tis_weights(lp, roll, mask), sequence_tis_weights(lp, roll, mask)):
        assert torch.isfinite(w).all()
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        w = token_mis_weights(lp.to(dtype), roll.to(dtype), mask, upper=1e9)
        assert torch.isfinite(w).all() and w.dtype == torch.float32
        assert w[0, 0].item() == pytest.approx(math.exp(20.0), rel=1e-6)


def test_weights_are_stop_gradient_and_matter_spec_1_3_d3():
    """REINFORCE + IS in bypass mode: the gradient equals sg(w)·A·∇log π; without the detach it does not."""
    torch.manual_seed(0)
    logp = (torch.randn(2, 4, dtype=torch.float64) * 0.3 - 1).requires_grad_(True)
    roll = logp.detach() + torch.randn(2, 4, dtype=torch.float64) * 0.3
    adv = torch.randn(2, 4, dtype=torch.float64)
    mask = torch.ones(2, 4, dtype=torch.bool)
    w = token_tis_weights(logp, roll, mask, cap=10.0)
    assert not w.requires_grad
    (grad,) = torch.autograd.grad(reinforce_token_loss(logp, adv, mask, weights=w).sum(), logp)
    torch.testing.assert_close(grad, -(w * adv))
    w_live = (logp - roll).exp()  # the same weights without stop-gradient
    (wrong,) = torch.autograd.grad((-(w_live * adv) * logp).sum(), logp)
    assert (wrong - grad).abs().max() > 1e-3


def _enumerate_two_step(seed: int):
    """Two-token vocabulary, T = 2: all 4 sequences, π_θ and μ = softmax(θ + noise) per context."""
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(3, 2, generator=gen, dtype=torch.float64).requires_grad_(True)  # c0, c1|0, c1|1
    noise = torch.randn(3, 2, generator=gen, dtype=torch.float64) * 0.7
    seqs = torch.tensor([[0, 0], [0, 1], [1, 0], [1, 1]])
    ctx = torch.stack([torch.zeros(4, dtype=torch.long), 1 + seqs[:, 0]], 1)  # context id per position
    logp = theta.log_softmax(-1)[ctx, seqs]  # [4, 2]
    logmu = (theta.detach() + noise).log_softmax(-1)[ctx, seqs]
    reward = torch.tensor([1.0, -0.5, 2.0, 0.3], dtype=torch.float64)
    return theta, logp, logmu, reward


def test_sequence_is_unbiased_token_is_biased_spec_1_3_d2():
    theta, logp, logmu, reward = _enumerate_two_step(1)
    mu_seq = logmu.sum(1).exp()
    mask = torch.ones(4, 2, dtype=torch.bool)
    (true_grad,) = torch.autograd.grad((logp.sum(1).exp() * reward).sum(), theta, retain_graph=True)
    adv = reward[:, None].expand(4, 2)

    def expected_grad(weights):
        loss = (mu_seq[:, None] * reinforce_token_loss(logp, adv, mask, weights=weights)).sum()
        return -torch.autograd.grad(loss, theta, retain_graph=True)[0]

    seq_w = sequence_tis_weights(logp, logmu, mask, cap=1e9)
    torch.testing.assert_close(expected_grad(seq_w), true_grad, rtol=0, atol=1e-12)
    tok_w = token_tis_weights(logp, logmu, mask, cap=1e9)
    assert (expected_grad(tok_w) - true_grad).abs().max() > 1e-3
    # E_μ[ρ(y) f(y)] = E_π[f(y)] for the weights themselves
    assert (mu_seq * seq_w[:, 0] * reward).sum().item() == pytest.approx(
        (logp.detach().sum(1).exp() * reward).sum().item(), abs=1e-12
    )


def test_mrs_pools_all_turn_tokens_per_trajectory_spec_2_2_d1_d3():
    """Two trajectories × 2 turn rows. Trajectory 0: pooled mean Δ = 0.0005 (kept) although the mean of
    its row means is 0.0015; trajectory 1: mean Δ = 0.002 (dropped, both rows)."""
    lp = torch.zeros(4, 6, dtype=torch.float64)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    lp[0, 0], mask[0, :1] = 0.003, True  # traj 0 turn 0: one token
    mask[1, :5] = True  # traj 0 turn 1: five tokens at Δ = 0
    lp[1, 5] = 7.0  # a pad with garbage
    lp[2, :3], mask[2, :3] = 0.002, True
    lp[3, :2], mask[3, :2] = 0.002, True
    roll = torch.zeros_like(lp)
    traj = torch.tensor([0, 0, 1, 1])
    keep = mrs_mask(lp, roll, mask, traj)
    assert keep.tolist() == [True, True, False, False]
    per_row = geometric_rs_mask(lp, roll, mask)
    assert per_row.tolist() == [False, True, False, False]  # row 0 alone: e^0.003 > 1.001
    torch.testing.assert_close(apply_row_mask(mask, keep), mask & keep[:, None])
    torch.testing.assert_close(apply_row_mask(mask.double(), keep), (mask & keep[:, None]).double())


def test_veto_masks_only_its_own_turn_row_gotcha_3_spec_2_2_d2():
    lp = torch.zeros(4, 3, dtype=torch.float64)
    lp[1, 2] = math.log(1e-5)
    roll = torch.zeros_like(lp)
    mask = torch.ones(4, 3, dtype=torch.bool)
    assert token_veto_mask(lp, roll, mask).tolist() == [True, False, True, True]
    mask[1, 2] = False  # the same token as padding is ignored
    assert token_veto_mask(lp, roll, mask).all()
    mask[1, 2] = True
    keep = mrs_mask(lp, roll, mask, torch.tensor([0, 0, 1, 1]), lower=1e-9, upper=1e9)
    assert keep.tolist() == [True, False, True, True]  # the trajectory's other turn survives
    assert mrs_mask(lp, roll, mask, torch.tensor([0, 0, 1, 1]), veto_threshold=None).tolist() == [
        False,
        False,
        True,
        True,
    ]


def test_geometric_sign_convention_gotcha_2():
    """Ours: keep iff lower ≤ exp(+mean Δ) ≤ upper (KernelGYM). verl's k1 statistic −mean Δ in
    [log lower, log upper] keeps a different set for asymmetric bounds."""
    lp, roll, mask = _delta_batch([math.log(1.2)] * 3)
    assert not geometric_rs_mask(lp, roll, mask, lower=0.8, upper=1.1).item()
    verl_k1 = -math.log(1.2)
    assert math.log(0.8) <= verl_k1 <= math.log(1.1)  # verl would keep it
    lp_low, roll_low, _ = _delta_batch([math.log(0.85)] * 3)
    assert geometric_rs_mask(lp_low, roll_low, mask, lower=0.8, upper=1.1).item()


@settings(max_examples=60, deadline=None)
@given(mean_delta=st.floats(-1.0, 1.0), upper=st.floats(1.0001, 3.0))
def test_geometric_symmetric_bounds_agree_with_verl_convention(mean_delta, upper):
    """lower·upper = 1 → both conventions keep the same set."""
    lp, roll, mask = _delta_batch([mean_delta] * 4)
    ours = geometric_rs_mask(lp, roll, mask, lower=1 / upper, upper=upper).item()
    verl = math.log(1 / upper) <= -mean_delta <= math.log(upper)
    if abs(abs(mean_delta) - math.log(upper)) > 1e-9:  # away from the boundary
        assert ours == verl


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: token_tis_weights(torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3)),
            "rollout_log_probs",
        ),
        (lambda: token_tis_weights(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3)), "mask"),
        (lambda: token_tis_weights(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), cap=0), "cap"),
        (
            lambda: geometric_rs_mask(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), lower=2.0),
            "lower",
        ),
        (lambda: mrs_mask(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), [0]), "trajectory_ids"),
        (
            lambda: token_veto_mask(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), threshold=0),
            "threshold",
        ),
    ],
)
def test_validation_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_mrs_averages_raw_log_ratios_as_kernelgym_does():
    # KernelGYM's mismatch_helper averages the raw Δ over the trajectory and clamps only the mean.
    # One token with Δ = +30 among 1000 tokens with Δ = −0.0295: raw mean +5.3e-4, inside
    # [log 0.999, log 1.001]; with each token clamped to ±20 first the mean would be −9.5e-3 (rejected).
    delta = torch.full((1, 1001), -0.0295, dtype=torch.float64)
    delta[0, 0] = 30.0
    rollout = torch.full_like(delta, -1.0)
    mask = torch.ones_like(delta, dtype=torch.bool)
    raw_mean = float(delta.sum() / delta.numel())
    assert math.log(0.999) <= raw_mean <= math.log(1.001)
    assert mrs_mask(rollout + delta, rollout, mask).tolist() == [True]
    clamped_mean = float(delta.clamp(-20, 20).sum() / delta.numel())
    assert not math.log(0.999) <= clamped_mean <= math.log(1.001)
    # verl's geometric RS (the default of geometric_rs_mask) clamps each token first.
    assert geometric_rs_mask(rollout + delta, rollout, mask).tolist() == [False]
