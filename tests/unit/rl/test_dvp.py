"""Tests for tritongym.rl.dvp: log-probs over the min-p safe set (rl-algorithms.md §5, §12 gotcha 6)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from tritongym.rl import (
    OUT_OF_SET_LOG_PROB,
    dvp_log_probs,
    dvp_log_probs_from_topk,
    min_p_safe_mask,
    sum_pi_squared,
)

from .references import dvp_loop


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    batch=st.integers(1, 4),
    time=st.integers(1, 5),
    vocab=st.integers(1, 30),
    alpha=st.sampled_from([1.0, 0.5, 0.1, 1e-2, 1e-3, 1e-6]),
    chunk=st.integers(1, 8),
    vchunk=st.one_of(st.none(), st.integers(1, 9)),
    temperature=st.sampled_from([1.0, 0.6]),
)
def test_dvp_matches_float64_reference(seed, batch, time, vocab, alpha, chunk, vchunk, temperature):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, time, vocab, generator=gen, dtype=torch.float64) * 3
    tokens = torch.randint(0, vocab, (batch, time), generator=gen)
    out = dvp_log_probs(
        logits, tokens, alpha, temperature=temperature, chunk_size=chunk, vocab_chunk_size=vchunk
    )
    ref_lp, ref_in, ref_mass = dvp_loop(logits, tokens, alpha, temperature)
    assert torch.equal(out.in_safe, ref_in)
    torch.testing.assert_close(out.log_probs[ref_in], ref_lp[ref_in], rtol=0, atol=1e-12)
    assert (out.log_probs[~ref_in] == OUT_OF_SET_LOG_PROB).all()
    torch.testing.assert_close(out.log_safe_mass, ref_mass, rtol=0, atol=1e-12)
    assert out.log_probs.dtype == torch.float64


def test_dvp_float32_and_bf16_match_reference_on_rounded_inputs():
    torch.manual_seed(3)
    logits = torch.randn(4, 6, 200) * 4
    tokens = logits.argmax(-1)  # always safe
    for dtype, atol in ((torch.float32, 2e-5), (torch.bfloat16, 2e-5)):
        x = logits.to(dtype)
        out = dvp_log_probs(x, tokens, 1e-3, chunk_size=5, vocab_chunk_size=64)
        ref_lp, ref_in, _ = dvp_loop(x.double(), tokens, 1e-3)
        assert out.log_probs.dtype == torch.float32
        assert out.in_safe.all() and ref_in.all()
        torch.testing.assert_close(out.log_probs.double(), ref_lp, rtol=0, atol=atol)


def test_pruned_policy_normalises_and_shifts_by_log_mass_spec_5_d1():
    torch.manual_seed(4)
    vocab = 64
    row = torch.randn(vocab, dtype=torch.float64) * 3
    logits = row.expand(vocab, vocab).contiguous()  # one context, every token as "sampled"
    out = dvp_log_probs(logits, torch.arange(vocab), 0.05)
    safe = out.in_safe
    assert 1 < safe.sum() < vocab
    assert out.log_probs[safe].exp().sum().item() == pytest.approx(1.0, abs=1e-12)
    full = torch.log_softmax(row, -1)
    torch.testing.assert_close(out.log_probs[safe] - full[safe], -out.log_safe_mass[safe])
    torch.testing.assert_close(safe, min_p_safe_mask(row, 0.05))


def test_same_pruning_both_sides_gives_unit_ratio_one_sided_gives_one_over_s_gotcha_6():
    """§5(d)2 / §12 gotcha 6: both engines renormalise → ratio ≡ 1; only the trainer → log-ratio ≡ −log S."""
    torch.manual_seed(5)
    logits = torch.randn(3, 7, 100, dtype=torch.float64) * 3
    tokens = logits.argmax(-1)
    trainer = dvp_log_probs(logits, tokens, 1e-2)
    rollout = dvp_log_probs(logits.clone(), tokens, 1e-2)
    assert (trainer.log_probs - rollout.log_probs).abs().max() == 0
    rollout_full = torch.log_softmax(logits, -1).gather(-1, tokens[..., None])[..., 0]
    log_ratio = trainer.log_probs - rollout_full
    torch.testing.assert_close(log_ratio, -trainer.log_safe_mass)
    assert (log_ratio > 1e-3).all()  # the silent bias on every token


def test_kept_token_error_scales_with_one_minus_p_spec_5_d3():
    """Logit noise e ~ U(−κ, κ): |Δ log π_S(v)| ≤ 2κ(1 − π_S(v)) (+O(κ²)) on kept tokens; tail tokens
    of the unpruned policy carry O(κ) errors."""
    torch.manual_seed(6)
    kappa, vocab = 1e-3, 2000
    z = torch.randn(vocab, dtype=torch.float64) * 0.5
    z[0] = 9.0  # a confident head token
    e = (torch.rand(vocab, dtype=torch.float64) * 2 - 1) * kappa
    every = torch.arange(vocab)
    train = dvp_log_probs(z.expand(vocab, vocab).contiguous(), every, 1e-4)
    roll = dvp_log_probs((z + e).expand(vocab, vocab).contiguous(), every, 1e-4)
    both = train.in_safe & roll.in_safe
    assert both.sum() >= 1
    p_s = train.log_probs[both].exp()
    err = (roll.log_probs[both] - train.log_probs[both]).abs()
    assert (err <= 2 * kappa * (1 - p_s) + 4 * kappa**2).all()
    full_err = (torch.log_softmax(z + e, -1) - torch.log_softmax(z, -1)).abs()
    assert full_err[~train.in_safe].max() > 0.9 * kappa
    head = both.nonzero()[:, 0] == 0
    assert p_s[head].item() > 0.7
    assert err[head].item() < 0.5 * err.max().item()  # the (1 − p) scaling: the head moves least


def test_bandit_bias_identity_spec_5_d4():
    """3-token bandit: J − J_S = ω·(r_tail − E_{π_S}[r]) exactly."""
    logits = torch.tensor([2.0, 1.5, -6.0], dtype=torch.float64)
    reward = torch.tensor([1.0, 0.0, 5.0], dtype=torch.float64)
    out = dvp_log_probs(logits.expand(3, 3).contiguous(), torch.arange(3), 1e-2)
    assert out.in_safe.tolist() == [True, True, False]
    pi = logits.softmax(0)
    pi_s = torch.where(out.in_safe, out.log_probs.exp(), 0.0)
    omega = 1 - out.log_safe_mass[0].exp()
    assert omega.item() == pytest.approx(pi[2].item(), abs=1e-15)
    j, j_s = (pi * reward).sum(), (pi_s * reward).sum()
    assert (j - j_s).item() == pytest.approx((omega * (reward[2] - j_s)).item(), abs=1e-14)


@pytest.mark.parametrize("vchunk", [None, 3])
@pytest.mark.parametrize("temperature", [1.0, 0.8])
def test_gradient_is_onehot_minus_pruned_policy_and_zero_outside_spec_5_d5(vchunk, temperature):
    torch.manual_seed(7)
    vocab = 12
    logits = (torch.randn(2, 3, vocab, dtype=torch.float64) * 3).requires_grad_(True)
    tokens = logits.detach().argmax(-1)
    tokens[0, 1] = logits.detach()[0, 1].argmin()  # surely outside the safe set
    out = dvp_log_probs(logits, tokens, 0.05, temperature=temperature, chunk_size=2, vocab_chunk_size=vchunk)
    assert not out.in_safe[0, 1] and out.log_probs[0, 1] == OUT_OF_SET_LOG_PROB
    weights = torch.randn(2, 3, dtype=torch.float64)
    (grad,) = torch.autograd.grad((out.log_probs * weights).sum(), logits)
    z = logits.detach() / temperature
    safe = min_p_safe_mask(logits.detach(), 0.05, temperature=temperature)
    pi_s = torch.where(safe, z, -math.inf).softmax(-1)
    onehot = torch.nn.functional.one_hot(tokens, vocab).double()
    expected = weights[..., None] * (onehot - pi_s) / temperature * out.in_safe[..., None]
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-12)
    assert (grad[~safe] == 0).all()
    assert (grad[0, 1] == 0).all()
    # autograd through a masked log-softmax gives the same gradient
    ref = (
        torch.where(safe, logits / temperature, -math.inf)
        .log_softmax(-1)
        .gather(-1, tokens[..., None])[..., 0]
    )
    (ref_grad,) = torch.autograd.grad((torch.where(out.in_safe, ref, 0.0) * weights).sum(), logits)
    torch.testing.assert_close(grad, ref_grad, rtol=0, atol=1e-12)


def test_gradcheck_and_bf16_gradient_dtype():
    torch.manual_seed(8)
    logits = (torch.randn(3, 9, dtype=torch.float64) * 2).requires_grad_(True)
    tokens = logits.detach().argmax(-1)
    assert torch.autograd.gradcheck(
        lambda x: dvp_log_probs(x, tokens, 0.1, chunk_size=2).log_probs, (logits,)
    )
    bf = logits.detach().to(torch.bfloat16).requires_grad_(True)
    dvp_log_probs(bf, tokens, 0.1).log_probs.sum().backward()
    assert bf.grad is not None and bf.grad.dtype == torch.bfloat16


class _LargestFloat32(TorchDispatchMode):
    """Records the largest float32/float64 tensor produced by any aten op."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64):
                self.largest = max(self.largest, t.numel())
        return out


@pytest.mark.parametrize("vchunk", [None, 128])
def test_no_float32_tensor_beyond_one_chunk(vchunk):
    """Issue requirement: never materialise a float32 [B, T, V] tensor beyond one chunk (fwd + bwd)."""
    batch, time, vocab, chunk = 4, 16, 512, 8
    logits = torch.randn(batch, time, vocab).to(torch.bfloat16).requires_grad_(True)
    tokens = torch.randint(0, vocab, (batch, time))
    limit = chunk * (vocab if vchunk is None else vchunk)
    with _LargestFloat32() as probe:
        out = dvp_log_probs(logits, tokens, 1e-3, chunk_size=chunk, vocab_chunk_size=vchunk)
        out.log_probs.sum().backward()
        sum_pi_squared(logits.detach(), chunk_size=chunk, vocab_chunk_size=vchunk)
    assert 0 < probe.largest <= limit < batch * time * vocab
    assert logits.grad is not None and logits.grad.shape == logits.shape


def test_topk_rollout_path_matches_full_logits_and_flags_incomplete():
    torch.manual_seed(9)
    logits = torch.randn(2, 5, 50, dtype=torch.float64) * 3
    tokens = logits.argmax(-1)
    full = torch.log_softmax(logits, -1)
    token_lp = full.gather(-1, tokens[..., None])[..., 0]
    exact = dvp_log_probs(logits, tokens, 1e-2)
    top = full.topk(50, dim=-1).values[..., torch.randperm(50)]  # any order
    out, complete = dvp_log_probs_from_topk(token_lp, top, 1e-2)
    assert complete.all()
    torch.testing.assert_close(out.log_probs, exact.log_probs)
    torch.testing.assert_close(out.log_safe_mass, exact.log_safe_mass)
    # k = 1: the argmax alone can never prove that no other token is within a factor α of it
    _, complete1 = dvp_log_probs_from_topk(token_lp, full.topk(1, dim=-1).values, 1e-2)
    assert not complete1.any()
    # k just below the safe-set size of some position → flagged there
    k = int(min_p_safe_mask(logits, 1e-2).sum(-1).max())
    _, complete_k = dvp_log_probs_from_topk(token_lp, full.topk(k, dim=-1).values, 1e-2)
    assert not complete_k.all()


def test_safe_mask_replay_equals_alpha_rule_and_custom_rule():
    torch.manual_seed(10)
    logits = torch.randn(3, 4, 30, dtype=torch.float64)
    tokens = torch.randint(0, 30, (3, 4))
    rule = dvp_log_probs(logits, tokens, 0.2)
    replay = dvp_log_probs(logits, tokens, safe_mask=min_p_safe_mask(logits, 0.2), vocab_chunk_size=7)
    for a, b in zip(rule, replay, strict=True):
        torch.testing.assert_close(a, b)
    greedy = torch.nn.functional.one_hot(logits.argmax(-1), 30).bool()
    out = dvp_log_probs(logits, logits.argmax(-1), safe_mask=greedy)
    assert (out.log_probs == 0).all()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": torch.full((2, 3), 9)}, "tokens"),
        ({"tokens": torch.zeros(2, 2, dtype=torch.long)}, "tokens"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.5}, "alpha"),
        ({"safe_mask": torch.zeros(2, 3, 9, dtype=torch.bool)}, "safe_mask"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"temperature": 0.0}, "temperature"),
    ],
)
def test_dvp_validation(kwargs, message):
    args = {"tokens": torch.zeros(2, 3, dtype=torch.long), "alpha": 0.1}
    args.update(kwargs)
    tokens = args.pop("tokens")
    alpha = args.pop("alpha")
    with pytest.raises(ValueError, match=message):
        dvp_log_probs(torch.randn(2, 3, 9), tokens, alpha, **args)


# -- the min-p threshold's edge, and padded positions (issue 14) -------------------------------------
# V_S = {v : z_v ≥ max z + log α}: a token a hair above the threshold is in, a hair below is out
# (log-prob OUT_OF_SET_LOG_PROB, no gradient); a padded position (garbage logits, a pad token) changes
# nothing at the valid positions whatever the chunking.


def _edge_logits(alpha: float, temperature: float = 1.0) -> torch.Tensor:
    """Row 0: token 1 a hair inside the safe set; row 1: a hair outside (logits in float64)."""
    edge = math.log(alpha) * temperature
    return torch.tensor([[0.0, edge + 1e-9, -30.0, edge - 5.0],
                         [0.0, edge - 1e-9, -30.0, edge - 5.0]], dtype=torch.float64)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_a_token_a_hair_inside_the_min_p_threshold_is_safe_and_a_hair_outside_is_not(temperature):
    alpha = 1e-3
    logits = _edge_logits(alpha, temperature).requires_grad_()
    tokens = torch.tensor([1, 1])
    out = dvp_log_probs(logits, tokens, alpha, temperature=temperature)
    assert out.in_safe.tolist() == [True, False]
    torch.testing.assert_close(min_p_safe_mask(logits.detach(), alpha, temperature=temperature)[:, 1],
                               torch.tensor([True, False]))
    z = logits.detach()[0] / temperature
    inside = z[1] - torch.logsumexp(z[:2], -1)  # V_S = {0, 1}
    assert out.log_probs[0].item() == pytest.approx(inside.item(), abs=1e-12)
    assert out.log_probs[1].item() == OUT_OF_SET_LOG_PROB
    assert out.log_safe_mass[1].item() == pytest.approx(
        (torch.logsumexp(z[:1], -1) - torch.logsumexp(logits.detach()[1] / temperature, -1)).item(), abs=1e-12)
    out.log_probs.sum().backward()
    assert (logits.grad[1] == 0).all()  # out of the safe set: no gradient
    assert logits.grad[0, 1] > 0 and logits.grad[0, 2] == 0 and logits.grad[0, 3] == 0


def test_topk_rollout_path_has_the_same_threshold_edge():
    alpha = 1e-2
    raw = torch.log_softmax(_edge_logits(alpha), -1)
    out, complete = dvp_log_probs_from_topk(raw[:, 1], raw, alpha)
    assert out.in_safe.tolist() == [True, False]
    assert complete.all()  # the -30 and edge-5 tokens lie below the threshold: the top-k proves V_S
    _, complete_top2 = dvp_log_probs_from_topk(raw[:, 1], raw[:, :2], alpha)
    assert complete_top2.tolist() == [False, True]  # row 0: both top-2 are in V_S, more may be


@pytest.mark.parametrize(("chunk", "vchunk"), [(1, None), (2, 3), (1024, 1)])
def test_padded_positions_change_nothing_at_the_valid_positions(chunk, vchunk):
    torch.manual_seed(11)
    alpha = 0.05
    valid = torch.randn(2, 3, 6, dtype=torch.float64) * 2
    tokens = valid.argmax(-1)
    reference = dvp_log_probs(valid, tokens, alpha)
    garbage = torch.full((2, 4, 6), -1e4, dtype=torch.float64)
    garbage[..., 5] = 1e4  # a single huge pad logit
    padded = torch.cat([valid, garbage], 1)
    padded_tokens = torch.cat([tokens, torch.zeros(2, 4, dtype=torch.long)], 1)  # pad token id 0
    out = dvp_log_probs(padded, padded_tokens, alpha, chunk_size=chunk, vocab_chunk_size=vchunk)
    for a, b in zip(out, reference, strict=True):
        torch.testing.assert_close(a[:, :3], b, rtol=0, atol=1e-12)
    assert not out.in_safe[:, 3:].any()  # the pad token 0 is far below the pad position's max
    assert torch.isfinite(out.log_probs).all()
