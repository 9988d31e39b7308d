"""Tests for tritongym.rl.policy_loss: PPO dual clip, REINFORCE, aggregation, KL (spec §0, §1.2)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import (
    AGGREGATION_MODES,
    PolicyLossInputs,
    aggregate_loss,
    compute_policy_loss,
    kl_estimate,
    ppo_clip_fractions,
    ppo_clip_token_loss,
    reinforce_token_loss,
)

MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _grad_wrt_logp(loss_fn, logp0):
    logp = logp0.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_fn(logp).sum(), logp)
    return grad


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(MODES),
    clip_high=st.sampled_from([0.2, 0.28]),
    dual=st.sampled_from([None, 3.0, 10.0]),
)
def test_surrogate_gradient_equals_reinforce_at_theta_old_spec_0(seed, mode, clip_high, dual):
    """At θ = θ_old every clip is inactive: ∇ PPO = ∇ REINFORCE = −A·∇log π (also gotcha 12: inert clips)."""
    gen = torch.Generator().manual_seed(seed)
    theta = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, 7, (3, 5), generator=gen)
    adv = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    mask = torch.rand(3, 5, generator=gen) < 0.8
    mask[0] = True

    def logp():
        return theta.log_softmax(-1).gather(-1, tokens[..., None])[..., 0]

    old = logp().detach()
    ppo = aggregate_loss(
        ppo_clip_token_loss(logp(), old, adv, mask, clip_high=clip_high, dual_clip=dual), mask, mode
    )
    reinforce = aggregate_loss(reinforce_token_loss(logp(), adv, mask), mask, mode)
    (g_ppo,) = torch.autograd.grad(ppo, theta)
    (g_rf,) = torch.autograd.grad(reinforce, theta)
    torch.testing.assert_close(g_ppo, g_rf, rtol=1e-10, atol=1e-12)
    # and both equal the hand-written −A ∇log π, aggregated with the same constants
    (g_hand,) = torch.autograd.grad(aggregate_loss(-(adv * logp()), mask, mode), theta)
    torch.testing.assert_close(g_ppo, g_hand, rtol=1e-10, atol=1e-12)


def test_clip_cases_spec_1_2_d2_d3():
    one = torch.ones(1, 1, dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)

    def case(ratio, adv, **kw):
        old = torch.zeros(1, 1, dtype=torch.float64)
        logp = torch.full((1, 1), math.log(ratio), dtype=torch.float64, requires_grad=True)
        loss = ppo_clip_token_loss(logp, old, one * adv, mask, **kw)
        (grad,) = torch.autograd.grad(loss.sum(), logp)
        return loss.item(), grad.item()

    loss, grad = case(1.5, 1.0, clip_high=0.28)
    assert loss == pytest.approx(-1.28) and grad == 0.0  # clipped above
    loss, grad = case(0.5, 1.0, clip_low=0.2)
    assert loss == pytest.approx(-0.5) and grad == pytest.approx(-0.5)  # max keeps the unclipped branch
    loss, grad = case(5.0, -1.0, dual_clip=3.0)
    assert loss == pytest.approx(3.0) and grad == 0.0  # min(5, 3) = 3
    loss, grad = case(5.0, -1.0, dual_clip=None)
    assert loss == pytest.approx(5.0) and grad == pytest.approx(5.0)
    loss, grad = case(0.5, -1.0, clip_low=0.2)
    assert loss == pytest.approx(0.8) and grad == 0.0  # clipped below


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_clip_fractions_mutually_exclusive_and_match_zero_gradient_spec_1_2_d4(seed):
    gen = torch.Generator().manual_seed(seed)
    logp = (torch.randn(4, 8, generator=gen, dtype=torch.float64) * 1.5).requires_grad_(True)
    old = torch.zeros(4, 8, dtype=torch.float64)
    adv = torch.randn(4, 8, generator=gen, dtype=torch.float64)
    mask = torch.ones(4, 8, dtype=torch.bool)
    fr = ppo_clip_fractions(logp, old, adv, mask, clip_high=0.28)
    total = fr["rl/clipfrac_upper"] + fr["rl/clipfrac_lower"] + fr["rl/clipfrac_dual"]
    (grad,) = torch.autograd.grad(ppo_clip_token_loss(logp, old, adv, mask, clip_high=0.28).sum(), logp)
    assert total.item() == pytest.approx((grad == 0).double().mean().item())
    assert total.item() <= 1.0
    assert fr["rl/ppo_kl"].item() == pytest.approx(-logp.detach().mean().item())


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.integers(1, 6),
    length=st.integers(1, 8),
    max_len=st.integers(1, 64),
)
def test_four_modes_agree_up_to_constants_on_full_masks_spec_0(seed, batch, length, max_len):
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(batch, length, generator=gen, dtype=torch.float64)
    mask = torch.ones(batch, length, dtype=torch.bool)
    total = loss.sum().item()
    got = {m: aggregate_loss(loss, mask, m, max_length=max_len).item() for m in MODES}
    assert got["token-mean"] == pytest.approx(total / (batch * length))
    assert got["seq-mean-token-mean"] == pytest.approx(total / (batch * length))
    assert got["seq-mean-token-sum"] == pytest.approx(total / batch)
    assert got["seq-mean-token-sum-norm"] == pytest.approx(total / (batch * max_len))
    assert aggregate_loss(loss, mask, "seq-mean-token-sum", loss_scale_factor=1000).item() == pytest.approx(
        total / batch / 1000
    )


@pytest.mark.parametrize("mode", MODES)
def test_masked_entries_contribute_exactly_zero_to_loss_and_gradient_spec_0(mode):
    """Garbage (NaN, ±inf, huge) at masked positions and a fully masked row change nothing."""
    torch.manual_seed(1)
    logp = torch.randn(3, 4, dtype=torch.float64) - 1
    old = logp + 0.1 * torch.randn(3, 4, dtype=torch.float64)
    adv = torch.randn(3, 4, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    dirty_logp, dirty_old, dirty_adv = logp.clone(), old.clone(), adv.clone()
    dirty_logp[~mask] = torch.tensor(
        [math.nan, math.inf, -math.inf, 1e30, -1e30, math.nan, 7.0], dtype=torch.float64
    )
    dirty_old[~mask] = math.nan
    dirty_adv[~mask] = math.inf
    for fn in (
        lambda lp, o, a: ppo_clip_token_loss(
            lp, o, a, mask, weights=torch.full_like(lp, math.nan).where(~mask, 1.0)
        ),
        lambda lp, o, a: reinforce_token_loss(lp, a, mask),
    ):
        clean = logp.clone().requires_grad_(True)
        dirty = dirty_logp.clone().requires_grad_(True)
        loss_clean = aggregate_loss(fn(clean, old, adv), mask, mode)
        loss_dirty = aggregate_loss(fn(dirty, dirty_old, dirty_adv), mask, mode)
        assert torch.isfinite(loss_dirty) and loss_dirty.item() == loss_clean.item()
        (g_clean,) = torch.autograd.grad(loss_clean, clean)
        (g_dirty,) = torch.autograd.grad(loss_dirty, dirty)
        assert torch.equal(g_clean, g_dirty)
        assert (g_dirty[~mask] == 0).all()
    # the fully masked row is not counted as a sequence
    two_rows = aggregate_loss(reinforce_token_loss(logp[:2], adv[:2], mask[:2]), mask[:2], mode)
    three_rows = aggregate_loss(reinforce_token_loss(logp, adv, mask), mask, mode)
    if mode != "seq-mean-token-sum-norm":
        assert three_rows.item() == pytest.approx(two_rows.item())


def test_ppo_weights_are_stop_gradient():
    logp = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    w = (logp * 3).exp()  # depends on logp; must be detached inside
    loss = ppo_clip_token_loss(
        logp, torch.zeros(1, 2, dtype=torch.float64), torch.ones(1, 2), torch.ones(1, 2), weights=w
    )
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    torch.testing.assert_close(grad, torch.full((1, 2), -1.0, dtype=torch.float64))


def test_kl_estimators_values_and_sign_gotcha_2():
    logp = torch.tensor([-1.0, -2.0], dtype=torch.float64)
    ref = torch.tensor([-1.5, -1.0], dtype=torch.float64)
    log_r = ref - logp
    torch.testing.assert_close(kl_estimate(logp, ref, "k1"), logp - ref)
    torch.testing.assert_close(kl_estimate(logp, ref, "k2"), 0.5 * log_r**2)
    torch.testing.assert_close(kl_estimate(logp, ref, "k3"), log_r.exp() - 1 - log_r)
    assert (kl_estimate(logp, ref, "k3") >= 0).all()
    assert kl_estimate(torch.tensor([0.0]), torch.tensor([-60.0]), "k3").isfinite().all()
    with pytest.raises(ValueError, match="k1, k2, k3"):
        kl_estimate(logp, ref, "k4")


def test_registry_dispatch_and_required_inputs():
    torch.manual_seed(2)
    logp = torch.randn(2, 3, dtype=torch.float64)
    old = logp + 0.3 * torch.randn(2, 3, dtype=torch.float64)
    adv = torch.randn(2, 3, dtype=torch.float64)
    mask = torch.ones(2, 3, dtype=torch.bool)
    inputs = PolicyLossInputs(logp, adv, mask, log_probs_old=old)
    direct = aggregate_loss(
        ppo_clip_token_loss(logp, old, adv, mask, clip_high=0.28),
        mask,
        "seq-mean-token-sum",
        loss_scale_factor=1000,
    )
    via = compute_policy_loss(
        "ppo_clip", inputs, mode="seq-mean-token-sum", loss_scale_factor=1000, clip_high=0.28
    )
    assert via.item() == direct.item()
    with pytest.raises(ValueError, match="missing \\['log_probs_old'\\]"):
        compute_policy_loss("ppo_clip", PolicyLossInputs(logp, adv, mask))
    with pytest.raises(ValueError, match="ppo_clip, reinforce"):
        compute_policy_loss("grpo_loss", inputs)
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        aggregate_loss(logp, mask, "token-max")
    assert set(MODES) | {"token-sum"} == set(AGGREGATION_MODES.names())  # token-sum: test_verl_names.py


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: ppo_clip_token_loss(
                torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3)
            ),
            "advantages",
        ),
        (
            lambda: ppo_clip_token_loss(
                torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), dual_clip=1.0
            ),
            "dual_clip",
        ),
        (
            lambda: aggregate_loss(torch.zeros(2, 3), torch.ones(2, 3), loss_scale_factor=0),
            "loss_scale_factor",
        ),
        (lambda: aggregate_loss(torch.zeros(3), torch.ones(3)), "loss"),
    ],
)
def test_validation_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
