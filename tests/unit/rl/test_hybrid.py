"""Tests for tritongym.rl.hybrid: dense KL gradient and sparse returns (rl-algorithms.md §7, check 10)."""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.rl import dense_kl_loss, reinforce_token_loss, sparse_kl_returns, token_kl


def test_dense_gradient_fixture_spec_7_d1():
    """p = [.5, .5] (z = 0), q = [.8, .2]: KL = 0.223144, ∂KL/∂z = [−0.346574, +0.346574] = ∓ln2/2."""
    z = torch.zeros(1, 2, dtype=torch.float64, requires_grad=True)
    teacher = torch.tensor([[0.8, 0.2]], dtype=torch.float64).log()
    loss = dense_kl_loss(z, teacher, torch.ones(1, dtype=torch.bool))
    assert loss.item() == pytest.approx(0.223144, abs=1e-6)
    (grad,) = torch.autograd.grad(loss, z)
    torch.testing.assert_close(grad, torch.tensor([[-math.log(2) / 2, math.log(2) / 2]], dtype=torch.float64))


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_closed_form_matches_autograd_and_finite_differences_spec_7_d2(temperature):
    torch.manual_seed(0)
    z = (torch.randn(3, 4, 50, dtype=torch.float64) * 2).requires_grad_(True)
    q = torch.randn(3, 4, 50, dtype=torch.float64) * 2
    mask = torch.rand(3, 4) < 0.7
    beta = 0.7
    loss = dense_kl_loss(z, q, mask, beta, temperature=temperature, chunk_size=5)
    (grad,) = torch.autograd.grad(loss, z)
    lp, lq = (z / temperature).log_softmax(-1), (q / temperature).log_softmax(-1)
    ref_loss = beta * torch.where(mask, (lp.exp() * (lp - lq)).sum(-1), 0.0).sum()
    (ref_grad,) = torch.autograd.grad(ref_loss, z)
    assert loss.item() == pytest.approx(ref_loss.item(), abs=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)
    torch.testing.assert_close(grad.sum(-1), torch.zeros(3, 4, dtype=torch.float64), rtol=0, atol=1e-12)
    assert (grad[~mask] == 0).all()
    # central differences on one coordinate
    eps, idx = 1e-6, (1, 2, 7)
    zp, zm = z.detach().clone(), z.detach().clone()
    zp[idx] += eps
    zm[idx] -= eps
    fd = (
        dense_kl_loss(zp, q, mask, beta, temperature=temperature)
        - dense_kl_loss(zm, q, mask, beta, temperature=temperature)
    ) / (2 * eps)
    assert grad[idx].item() == pytest.approx(fd.item(), abs=1e-6)


def test_zero_gradient_cases_spec_7_d4():
    z = torch.randn(2, 6, requires_grad=True)
    (grad,) = torch.autograd.grad(dense_kl_loss(z, z.detach(), torch.ones(2, dtype=torch.bool)), z)
    assert grad.abs().max() < 1e-6  # p = q
    (grad,) = torch.autograd.grad(
        dense_kl_loss(z, torch.randn(2, 6), torch.ones(2, dtype=torch.bool), 0.0), z
    )
    assert (grad == 0).all()  # β = 0
    bf = torch.randn(2, 6).to(torch.bfloat16).requires_grad_(True)
    dense_kl_loss(bf, torch.randn(2, 6), torch.ones(2, dtype=torch.bool)).backward()
    assert bf.grad.dtype == torch.bfloat16


def test_sparse_returns_use_strictly_future_kl():
    k = torch.tensor([[0.1, 0.2, 0.3, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    out = sparse_kl_returns(torch.tensor([1.0], dtype=torch.float64), k, mask, beta=2.0)
    torch.testing.assert_close(out, torch.tensor([[1 - 2 * 0.5, 1 - 2 * 0.3, 1.0, 0.0]], dtype=torch.float64))


def test_sparse_plus_dense_equals_exact_gradient_check_10():
    """Tabular MDP, V = 3, T = 2, β = 0.7: enumerate all 9 sequences; g_sparse (strict future KL) + g_dense
    equals autograd ∇J for J = E_π[R] − β·E_π[Σ_t KL(π(·|c_t) ‖ π_E(·|c_t))] exactly.

    Two controls: dropping g_dense fails. Including k_t itself (t' ≥ t) does *not* change the
    expectation — k_t depends on c_t only, so it acts as a state-dependent baseline with
    E[∇log π(y_t|c_t)]·k_t = 0. (The spec sheet's §7(d)3 claims that variant fails; by exact
    enumeration it does not, and this test pins the correct statement.)"""
    torch.manual_seed(10)
    vocab, beta = 3, 0.7
    theta = torch.randn(1 + vocab, vocab, dtype=torch.float64, requires_grad=True)  # c0, then c1|y1
    teacher = torch.randn(1 + vocab, vocab, dtype=torch.float64)
    reward = torch.randn(vocab * vocab, dtype=torch.float64)
    seqs = torch.cartesian_prod(torch.arange(vocab), torch.arange(vocab))  # [9, 2]
    ctx = torch.stack([torch.zeros(9, dtype=torch.long), 1 + seqs[:, 0]], 1)  # context per position
    logits = theta[ctx]  # [9, 2, V] student logits at each sequence's contexts
    teacher_logits = teacher[ctx]
    logp = logits.log_softmax(-1).gather(-1, seqs[..., None])[..., 0]  # [9, 2]
    prob = logp.sum(1).exp()
    kl = token_kl(logits.detach(), teacher_logits)  # k_t at the visited contexts
    lp_all, lq_all = logits.log_softmax(-1), teacher_logits.log_softmax(-1)
    kl_live = (lp_all.exp() * (lp_all - lq_all)).sum(-1)
    objective = (prob * (reward - beta * kl_live.sum(1))).sum()
    (true_grad,) = torch.autograd.grad(objective, theta, retain_graph=True)
    mask = torch.ones(9, 2, dtype=torch.bool)
    weight = prob.detach()

    def estimator(include_current: bool = False, with_dense: bool = True) -> torch.Tensor:
        returns = sparse_kl_returns(reward, kl, mask, beta)
        if include_current:
            returns = returns - beta * kl
        loss = (weight[:, None] * reinforce_token_loss(logp, returns, mask)).sum()
        if with_dense:
            loss = loss + sum(
                weight[i] * dense_kl_loss(logits[i], teacher_logits[i], mask[i], beta) for i in range(9)
            )
        (grad,) = torch.autograd.grad(loss, theta, retain_graph=True)
        return -grad

    torch.testing.assert_close(estimator(), true_grad, rtol=0, atol=1e-10)
    assert (estimator(with_dense=False) - true_grad).abs().max() > 1e-2
    torch.testing.assert_close(estimator(include_current=True), true_grad, rtol=0, atol=1e-10)
