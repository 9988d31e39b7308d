"""Tests for tritongym.rl.offpolicy: TOPR, OPMD, AsymRE (rl-algorithms.md §1.4, §1.6, check 7)."""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.rl import (
    aggregate_loss,
    asymre_advantages,
    dr_grpo_advantages,
    opmd_advantages,
    opmd_pairwise_loss,
    reinforce_token_loss,
    topr_token_loss,
    topr_weights,
)


def _seq(log_ratio: float, length: int = 2):
    """One sequence whose total log-ratio log π/μ is ``log_ratio``."""
    lp = torch.full((1, length), log_ratio / length, dtype=torch.float64)
    return lp, torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)


def test_topr_alpha_fixture_spec_1_4_d1():
    for ratio, reward, alpha in ((1.7, -1.0, 1.0), (0.3, -1.0, 0.3), (0.3, 1.0, 1.0), (50.0, 1.0, 1.0)):
        lp, mu, mask = _seq(math.log(ratio))
        got = topr_weights(lp, mu, mask, torch.tensor([reward], dtype=torch.float64))
        assert got.item() == pytest.approx(alpha)


def test_topr_equals_reinforce_on_policy_spec_1_4_d2():
    torch.manual_seed(0)
    logp = (torch.randn(4, 3, dtype=torch.float64) - 1).requires_grad_(True)
    rewards = torch.tensor([1.0, -1.0, -1.0, 1.0], dtype=torch.float64)
    mask = torch.ones(4, 3, dtype=torch.bool)
    topr = aggregate_loss(topr_token_loss(logp, logp.detach(), mask, rewards), mask, "seq-mean-token-sum")
    rf = aggregate_loss(
        reinforce_token_loss(logp, rewards[:, None].expand(4, 3), mask), mask, "seq-mean-token-sum"
    )
    (g1,) = torch.autograd.grad(topr, logp)
    (g2,) = torch.autograd.grad(rf, logp)
    torch.testing.assert_close(g1, g2)


def test_topr_negative_gradient_fades_spec_1_4_d3():
    """Repeated steps on one negative: ‖∇‖ ∝ π(y)/μ(y) → 0 under TOPR (objective bounded above);
    REINFORCE keeps pushing log π(y) down at constant speed."""
    mu = torch.zeros(1, 1, dtype=torch.float64)  # log μ(y) = 0 after shift; only the ratio matters
    mask = torch.ones(1, 1, dtype=torch.bool)
    reward = torch.tensor([-1.0], dtype=torch.float64)
    for loss_name in ("topr", "reinforce"):
        logp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
        norms = []
        for _ in range(400):
            if loss_name == "topr":
                loss = topr_token_loss(logp, mu, mask, reward).sum()
            else:
                loss = reinforce_token_loss(logp, reward[:, None], mask).sum()
            (grad,) = torch.autograd.grad(loss, logp)
            norms.append(grad.abs().item())
            with torch.no_grad():
                logp -= 0.5 * grad
        if loss_name == "topr":
            assert norms[-1] < 1e-2 * norms[0]
            assert all(b < a for a, b in zip(norms, norms[1:], strict=False))
            assert norms[-1] == pytest.approx(math.exp(logp.item() + 0.5 * norms[-1]), rel=1e-6)
        else:
            assert norms[-1] == norms[0] == 1.0 and logp.item() == pytest.approx(-200.0)


def test_topr_effective_positive_fraction_check_7():
    """p = 0.3 positives, baseline c = 0.2 with ±1 rewards → p̃ = p(1−c)/(1+(1−2p)c) = 0.2222."""
    p, c = 0.3, 0.2
    pos, neg = p * (1 - c), (1 - p) * (1 + c)
    assert pos / (pos + neg) == pytest.approx(p * (1 - c) / (1 + (1 - 2 * p) * c))
    assert pos / (pos + neg) == pytest.approx(0.222222, abs=1e-6)


def test_opmd_and_asymre_fixtures_spec_1_6_d2_d3():
    r = torch.tensor([1.0, 0.0], dtype=torch.float64)
    adv = opmd_advantages(r, [0, 0], baseline="logavgexp")
    assert (r - adv)[0].item() == pytest.approx(math.log((math.e + 1) / 2), abs=1e-12)
    assert (r - adv)[0].item() == pytest.approx(0.62011, abs=1e-5)
    torch.testing.assert_close(opmd_advantages(r, [0, 0]), torch.tensor([0.5, -0.5], dtype=torch.float64))
    torch.manual_seed(1)
    scores = torch.randn(9, dtype=torch.float64)
    ids = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3, 3])
    torch.testing.assert_close(asymre_advantages(scores, ids, delta=0.0), dr_grpo_advantages(scores, ids))
    shifted = asymre_advantages(scores, ids)
    multi = torch.bincount(ids)[ids] > 1
    torch.testing.assert_close(shifted[multi], dr_grpo_advantages(scores, ids)[multi] + 0.1)
    assert shifted[5].item() == scores[5].item()  # singleton: baseline 0
    with pytest.raises(ValueError, match="baseline"):
        opmd_advantages(r, [0, 0], baseline="median")


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_pairwise_consistency_gradient_is_group_reinforce_spec_1_6_d1(tau):
    """At θ = θ_ref: ∇(1/K)Σ(a_i − ā)² = −(2τ/K)Σ(r_i − r̄)∇log π_i; fixture r = [1,0,0,1], τ = 1 →
    coefficients −0.5·[0.5, −0.5, −0.5, 0.5]."""
    torch.manual_seed(2)
    theta = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    tokens = torch.tensor([0, 3, 1, 4])
    seq_lp = theta.log_softmax(-1)[torch.arange(4), tokens]
    r = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    loss = opmd_pairwise_loss(seq_lp, seq_lp.detach(), r, [7, 7, 7, 7], tau=tau)
    (grad,) = torch.autograd.grad(loss, theta)
    coef = -(2 * tau / 4) * (r - r.mean())
    if tau == 1.0:
        torch.testing.assert_close(coef, -0.5 * torch.tensor([0.5, -0.5, -0.5, 0.5], dtype=torch.float64))
    (expected,) = torch.autograd.grad((coef * theta.log_softmax(-1)[torch.arange(4), tokens]).sum(), theta)
    torch.testing.assert_close(grad, expected)
