"""Tests for tritongym.rl.otb: Σπ², the logit-gradient proxy and OTB (rl-algorithms.md §3, checks 1 and 8)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import dr_grpo_advantages, logit_gradient_proxy, otb_advantages, sum_pi_squared

from .references import otb_loop, sum_pi_squared_loop


def _fixture_inputs():
    """§3.3(d)1: traj1 length 3, R = 1, w = [.5, .2, .1]; traj2 length 2, R = 0, w = [.4, .3].

    w is injected through log_probs_old = 0 (π = 1) and Σπ² = w + 1, so that 1 − 2π + Σπ² = w.
    """
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    w = torch.tensor([[0.5, 0.2, 0.1], [0.4, 0.3, 0.0]])
    return rewards, mask, torch.tensor([0, 0]), torch.zeros(2, 3), w + 1.0


def test_otb_hand_fixture_spec_3_3_d1():
    rewards, mask, ids, lp, spi = _fixture_inputs()
    out = otb_advantages(rewards, mask, ids, lp, spi, handle_zero_tail=False, eps=0.0)
    expected = torch.tensor([[1 - 0.5 / 0.9, 0.5, 0.0], [-0.5 / 0.9, -0.5, 0.0]])
    torch.testing.assert_close(out, expected)
    assert out[0, 0].item() == pytest.approx(0.44444, abs=1e-5)


def test_otb_zero_tail_gotcha_4():
    """With handle_zero_tail the unique longest trajectory's tail baseline is 0: A1[2] = 1.0 (not 0)."""
    rewards, mask, ids, lp, spi = _fixture_inputs()
    out = otb_advantages(rewards, mask, ids, lp, spi, handle_zero_tail=True)
    assert out[0, 2].item() == pytest.approx(1.0)
    assert out[0, 1].item() == pytest.approx(0.5)
    # the default is True (verl-project@1dda039)
    torch.testing.assert_close(otb_advantages(rewards, mask, ids, lp, spi), out)


def test_otb_group_of_size_one_has_zero_baseline_gotcha_1():
    rewards = torch.tensor([[0.0, 2.0]])
    out = otb_advantages(rewards, torch.ones(1, 2), [5], torch.full((1, 2), -1.0), torch.full((1, 2), 0.3))
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0]]))


def test_otb_reduces_to_group_mean_with_equal_lengths_and_weights_spec_3_3_d4():
    torch.manual_seed(0)
    scores = torch.randn(6, dtype=torch.float64)
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    rewards = torch.zeros(6, 4, dtype=torch.float64)
    rewards[:, -1] = scores
    lp = torch.zeros(6, 4, dtype=torch.float64)
    spi = torch.full((6, 4), 1.5, dtype=torch.float64)  # w ≡ 0.5 everywhere
    out = otb_advantages(rewards, torch.ones(6, 4), ids, lp, spi, eps=0.0)
    torch.testing.assert_close(out, dr_grpo_advantages(scores, ids)[:, None].expand(6, 4))


def test_otb_uniform_weight_baseline_is_mean_over_alive_spec_3_3_d4():
    """w ≡ 1 → W = t: at each position the baseline is Σ_alive t·R / Σ_alive t = mean R over alive rows."""
    lengths = torch.tensor([2, 4, 3])
    mask = torch.arange(4)[None, :] < lengths[:, None]
    scores = torch.tensor([1.0, 0.0, 3.0], dtype=torch.float64)
    rewards = torch.zeros(3, 4, dtype=torch.float64)
    rewards[torch.arange(3), lengths - 1] = scores
    out = otb_advantages(rewards, mask, [0, 0, 0], torch.zeros(3, 4), torch.full((3, 4), 2.0), eps=0.0)
    for t in range(4):
        alive = mask[:, t]
        baseline = scores[alive].mean() if alive.sum() > 1 else torch.tensor(0.0)
        torch.testing.assert_close(out[alive, t], scores[alive] - baseline)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 7),
    length=st.integers(1, 6),
    zero_tail=st.booleans(),
    loo=st.booleans(),
    with_is=st.booleans(),
)
def test_otb_matches_float64_loop_reference(seed, n, length, zero_tail, loo, with_is):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (n,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    rewards = torch.randn(n, length, generator=gen, dtype=torch.float64)
    lp = -torch.rand(n, length, generator=gen, dtype=torch.float64) * 3
    spi = torch.rand(n, length, generator=gen, dtype=torch.float64)
    ids = torch.randint(0, 3, (n,), generator=gen)
    weights = torch.rand(n, length, generator=gen, dtype=torch.float64) * 2 if with_is else None
    w = logit_gradient_proxy(lp, spi) * (1.0 if weights is None else weights**2)
    out = otb_advantages(
        rewards, mask, ids, lp, spi, rollout_is_weights=weights, handle_zero_tail=zero_tail, leave_one_out=loo
    )
    ref = otb_loop(rewards, mask, ids, w, handle_zero_tail=zero_tail, leave_one_out=loo)
    torch.testing.assert_close(out, ref)


def test_otb_optimality_check_8():
    """With W fixed, B* = ΣGW/ΣW minimises Σ W (G − b)² (dense grid)."""
    torch.manual_seed(8)
    g = torch.randn(8, dtype=torch.float64)
    w = 0.1 + torch.rand(8, dtype=torch.float64)
    b_star = (g * w).sum() / w.sum()
    grid = torch.linspace(-3, 3, 60_001, dtype=torch.float64)
    risk = (w[None, :] * (g[None, :] - grid[:, None]) ** 2).sum(1)
    assert abs(grid[risk.argmin()].item() - b_star.item()) <= 1e-4


def test_otb_loo_unbiased_self_included_biased():
    """One-step categorical bandit, N = 3: E[(e_a − π)(R − b)] must equal ∇J = Σ_a π_a r_a (e_a − π).

    The leave-one-out OTB baseline is independent of sample i, hence unbiased; the self-included
    one is O(1/N) biased (spec §3.3(a) [R]). Exact expectation by enumerating all 3³ groups.
    """
    logits = torch.tensor([1.0, -0.5, 0.2], dtype=torch.float64)
    reward = torch.tensor([1.0, 0.0, 3.0], dtype=torch.float64)
    pi = logits.softmax(0)
    true_grad = (pi * reward)[:, None] * (torch.eye(3, dtype=torch.float64) - pi)
    true_grad = true_grad.sum(0)
    spi = (pi**2).sum()
    group = 3
    combos = torch.cartesian_prod(*[torch.arange(3)] * group)  # [27, 3] actions
    prob = pi[combos].prod(1)
    actions = combos.reshape(-1)
    rewards = reward[actions][:, None]
    ids = torch.arange(combos.shape[0]).repeat_interleave(group)
    lp = pi[actions].log()[:, None]
    spi_t = torch.full_like(lp, spi.item())
    scores = torch.eye(3, dtype=torch.float64)[actions] - pi  # ∇_z log π(a)
    for loo, unbiased in ((True, True), (False, False)):
        adv = otb_advantages(rewards, torch.ones_like(lp), ids, lp, spi_t, leave_one_out=loo, eps=0.0)
        per_group = (adv * scores).view(-1, group, 3).mean(1)  # (1/N) Σ_i A_i ∇log π(a_i)
        expectation = (prob[:, None] * per_group).sum(0)
        gap = (expectation - true_grad).abs().max().item()
        assert gap < 1e-12 if unbiased else gap > 0.05, (loo, gap)


# ---- Σπ² -----------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 9),
    vocab=st.integers(1, 40),
    chunk=st.integers(1, 10),
    vchunk=st.one_of(st.none(), st.integers(1, 16)),
    temperature=st.sampled_from([1.0, 0.7, 1.3]),
    scale=st.sampled_from([1.0, 10.0, 50.0]),
)
def test_chunked_sum_pi_squared_equals_unchunked_and_reference(
    seed, rows, vocab, chunk, vchunk, temperature, scale
):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, 2, vocab, generator=gen, dtype=torch.float64) * scale
    chunked = sum_pi_squared(logits, temperature=temperature, chunk_size=chunk, vocab_chunk_size=vchunk)
    whole = sum_pi_squared(logits, temperature=temperature, chunk_size=10_000)
    torch.testing.assert_close(chunked, whole, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(chunked, sum_pi_squared_loop(logits, temperature), rtol=1e-10, atol=1e-15)
    assert (chunked <= 1 + 1e-12).all() and (chunked >= 1.0 / vocab - 1e-12).all()


def test_sum_pi_squared_logsumexp_form_and_low_precision_inputs_check_1():
    torch.manual_seed(1)
    logits = torch.randn(3, 50, dtype=torch.float64) * 2
    lse_form = torch.exp(torch.logsumexp(2 * logits, -1) - 2 * torch.logsumexp(logits, -1))
    torch.testing.assert_close(sum_pi_squared(logits), lse_form)
    direct = logits.softmax(-1).pow(2).sum(-1)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        out = sum_pi_squared(logits.to(dtype), chunk_size=2, vocab_chunk_size=7)
        assert out.dtype == torch.float32
        ref = sum_pi_squared_loop(logits.to(dtype).double())  # same rounded inputs, float64 maths
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(direct, sum_pi_squared(logits, temperature=2.0))  # temperature matters


def test_sum_pi_squared_extreme_logits_are_finite():
    logits = torch.tensor([[1e4, 0.0, -1e4], [-1e30, -1e30, -1e30]])
    out = sum_pi_squared(logits)
    torch.testing.assert_close(out, torch.tensor([1.0, 1.0 / 3.0]))


def test_logit_gradient_proxy_identity_spec_3_2():
    """‖∇_z log softmax(z)[y]‖² = 1 − 2p_y + Σp² (autograd, random logits)."""
    torch.manual_seed(2)
    z = torch.randn(50, dtype=torch.float64, requires_grad=True)
    for y in (0, 7, 49):
        (grad,) = torch.autograd.grad(torch.log_softmax(z, -1)[y], z)
        p = z.detach().softmax(-1)
        proxy = logit_gradient_proxy(p[y].log().reshape(1, 1), sum_pi_squared(z.detach()).reshape(1, 1))
        assert grad.pow(2).sum().item() == pytest.approx(proxy.item(), abs=1e-12)
    # E_{y~p}[w] = 1 − Σp²
    p = z.detach().softmax(-1)
    w = logit_gradient_proxy(p.log()[None, :], sum_pi_squared(z.detach()).expand(1, 50))
    assert (p * w[0]).sum().item() == pytest.approx(1 - p.pow(2).sum().item(), abs=1e-12)


def test_otb_validation_errors():
    rewards, mask, ids, lp, spi = _fixture_inputs()
    with pytest.raises(ValueError, match="sum_pi_sq"):
        otb_advantages(rewards, mask, ids, lp, spi[:, :2])
    with pytest.raises(ValueError, match="group_ids"):
        otb_advantages(rewards, mask, [0], lp, spi)
    with pytest.raises(ValueError, match="chunk_size"):
        sum_pi_squared(torch.zeros(2, 3), chunk_size=0)
    assert math.isfinite(otb_advantages(rewards, mask, ids, lp, spi).sum().item())
