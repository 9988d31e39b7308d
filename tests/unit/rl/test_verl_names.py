"""Issue 11 fixes from the cross-check against verl 0.9.1: sequence-level IS clamps only the sum,
the ``token-sum`` aggregation, and verl's KL estimator names with the straight-through ``+`` forms.

Expected values are computed by hand from verl's formulas (``rollout_corr_helper`` and
``core_algos.agg_loss``/``kl_penalty``), not by calling verl (it is not installed in the test venv).
"""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.rl import (
    AGGREGATION_MODES,
    AggregationMode,
    KLEstimator,
    PolicyLossInputs,
    aggregate_loss,
    compute_policy_loss,
    kl_estimate,
    sequence_mis_weights,
    sequence_tis_weights,
)

FULL = torch.ones(1, 2, dtype=torch.bool)


def test_sequence_tis_clamps_only_the_sum():
    # Per-token clamping would give Σ = 20 − 20 = 0 → weight 1.0; ρ(y) = exp(25 − 24.5).
    log_probs = torch.tensor([[25.0, -24.5]])
    weights = sequence_tis_weights(log_probs, torch.zeros_like(log_probs), FULL, cap=2.0)
    torch.testing.assert_close(weights, torch.full((1, 2), math.exp(0.5)))


def test_sequence_tis_caps_a_large_sum_and_clamps_it_before_exp():
    log_probs = torch.tensor([[30.0, 30.0], [-30.0, -30.0]])
    weights = sequence_tis_weights(log_probs, torch.zeros_like(log_probs), torch.ones(2, 2), cap=2.0)
    torch.testing.assert_close(weights[0], torch.full((2,), 2.0))
    torch.testing.assert_close(weights[1], torch.full((2,), math.exp(-20.0)))  # Σ = −60 clamped to −20


def test_sequence_mis_clamps_only_the_sum():
    log_probs = torch.tensor([[25.0, -24.5], [25.0, -24.0]])
    weights = sequence_mis_weights(log_probs, torch.zeros_like(log_probs), torch.ones(2, 2), upper=2.0)
    torch.testing.assert_close(weights[0], torch.full((2,), math.exp(0.5)))  # kept: e^0.5 ≤ 2
    torch.testing.assert_close(weights[1], torch.zeros(2))  # rejected: e^1 > 2


def test_sequence_weights_ignore_masked_tokens_even_when_huge():
    log_probs = torch.tensor([[0.3, 1e6]])
    mask = torch.tensor([[True, False]])
    weights = sequence_tis_weights(log_probs, torch.zeros_like(log_probs), mask, cap=5.0)
    torch.testing.assert_close(weights, torch.tensor([[math.exp(0.3), 0.0]]))


def test_token_sum_aggregation_is_the_masked_sum():
    loss = torch.tensor([[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert AggregationMode.TOKEN_SUM in AGGREGATION_MODES
    out = aggregate_loss(loss, mask, "token-sum")
    assert out.item() == pytest.approx(11.0)
    # The normalisers of the other modes do not apply to a sum.
    assert aggregate_loss(loss, mask, "token-sum", num_sequences=7, num_tokens=3, max_length=9).item() == 11.0
    assert aggregate_loss(loss, mask, "token-sum", loss_scale_factor=2.0).item() == 5.5


def test_token_sum_through_compute_policy_loss_matches_reinforce_sum():
    log_probs = torch.tensor([[-1.0, -2.0], [-0.5, -3.0]], requires_grad=True)
    advantages = torch.tensor([[1.0, 1.0], [-2.0, -2.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    loss = compute_policy_loss("reinforce", PolicyLossInputs(log_probs, advantages, mask), mode="token-sum")
    # −A·log π summed over valid tokens: (1 + 2) + (−1) = 2
    assert loss.item() == pytest.approx(2.0)
    loss.backward()
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.0, -1.0], [2.0, 0.0]]))


LOGP = torch.tensor([-0.2, -1.5, -3.0, -0.01, -9.0], dtype=torch.float64)
REF = torch.tensor([-0.9, -1.0, -0.5, -14.0, -0.1], dtype=torch.float64)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("kl", LOGP - REF),
        ("abs", (LOGP - REF).abs()),
        ("mse", 0.5 * (LOGP - REF) ** 2),
        ("low_var_kl", ((REF - LOGP).exp() - (REF - LOGP) - 1).clamp(-10, 10)),
    ],
)
def test_verl_kl_names_forward_values(name, expected):
    torch.testing.assert_close(kl_estimate(LOGP, REF, name), expected)


def test_low_var_kl_clamps_the_estimate_and_k3_does_not():
    low, k3 = kl_estimate(LOGP, REF, "low_var_kl"), kl_estimate(LOGP, REF, "k3")
    assert k3[3].item() > 10 and k3[4].item() > 10  # log r = −13.99 and +8.9
    assert low[3].item() == 10.0 and low[4].item() == 10.0
    torch.testing.assert_close(low[:3], k3[:3])


@pytest.mark.parametrize("base", ["k1", "k3", "low_var_kl", "kl", "abs"])
def test_straight_through_has_base_value_and_k2_gradient(base):
    logp = LOGP.clone().requires_grad_(True)
    ref = REF.clone().requires_grad_(True)
    value = kl_estimate(logp, ref, base + "+")
    torch.testing.assert_close(value.detach(), kl_estimate(LOGP, REF, base))
    value.sum().backward()
    torch.testing.assert_close(logp.grad, LOGP - REF)  # ∂/∂logp ½(logp − ref)² = logp − ref
    torch.testing.assert_close(ref.grad, REF - LOGP)


def test_plain_k1_gradient_differs_from_straight_through():
    logp = LOGP.clone().requires_grad_(True)
    kl_estimate(logp, REF, "k1").sum().backward()
    torch.testing.assert_close(logp.grad, torch.ones_like(LOGP))


def test_enum_lists_verl_names_and_unknown_names_fail():
    for name in ("kl", "abs", "mse", "low_var_kl", "k1+", "k3+"):
        assert name in {e.value for e in KLEstimator} or KLEstimator(name.rstrip("+"))
    with pytest.raises(ValueError, match="kind: expected one of"):
        kl_estimate(LOGP, REF, "full")
    with pytest.raises(ValueError, match="kind: expected one of"):
        kl_estimate(LOGP, REF, "k4+")
