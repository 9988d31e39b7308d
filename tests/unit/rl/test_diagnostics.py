"""Tests for tritongym.rl.diagnostics (rl-algorithms.md §8.1, §1.3 diagnostics, check 1)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import collision_probability, logit_update_norm, mismatch_metrics, token_entropy, token_kl

from .references import log_softmax_rows


def test_logit_update_norm_fixture_spec_8_1_d():
    """p = [0.7, 0.2, 0.1]: ‖e_c − p‖² = 0.14 for c = 0, 1.34 for c = 2."""
    logits = torch.tensor([0.7, 0.2, 0.1], dtype=torch.float64).log().expand(2, 3).contiguous()
    out = logit_update_norm(
        logits, torch.tensor([0, 2]), torch.tensor([1.0, -2.0], dtype=torch.float64), lr=0.5
    )
    assert out[0].item() == pytest.approx(0.5 * math.sqrt(0.14))
    assert out[1].item() == pytest.approx(0.5 * 2.0 * math.sqrt(1.34))
    assert collision_probability(logits)[0].item() == pytest.approx(0.54)


def test_logit_update_norm_equals_autograd_norm_spec_8_1_d():
    torch.manual_seed(0)
    z = torch.randn(40, dtype=torch.float64, requires_grad=True)
    for c, adv in ((3, 1.7), (11, -0.4)):
        (grad,) = torch.autograd.grad(adv * torch.log_softmax(z, -1)[c], z)
        out = logit_update_norm(z.detach()[None], torch.tensor([c]), torch.tensor([adv], dtype=torch.float64))
        assert out.item() == pytest.approx(grad.norm().item(), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    vocab=st.integers(1, 50),
    chunk=st.integers(1, 6),
    vchunk=st.one_of(st.none(), st.integers(1, 13)),
)
def test_chunked_entropy_and_kl_match_reference(seed, vocab, chunk, vchunk):
    gen = torch.Generator().manual_seed(seed)
    p_logits = torch.randn(4, 3, vocab, generator=gen, dtype=torch.float64) * 3
    q_logits = torch.randn(4, 3, vocab, generator=gen, dtype=torch.float64) * 3
    lp, lq = log_softmax_rows(p_logits), log_softmax_rows(q_logits)
    entropy = -(lp.exp() * lp).sum(-1)
    kl = (lp.exp() * (lp - lq)).sum(-1)
    torch.testing.assert_close(
        token_entropy(p_logits, chunk_size=chunk, vocab_chunk_size=vchunk), entropy, atol=1e-11, rtol=0
    )
    torch.testing.assert_close(
        token_kl(p_logits, q_logits, chunk_size=chunk, vocab_chunk_size=vchunk), kl, atol=1e-11, rtol=0
    )
    torch.testing.assert_close(
        collision_probability(p_logits, chunk_size=chunk, vocab_chunk_size=vchunk), (2 * lp).exp().sum(-1)
    )


def test_entropy_edge_cases():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [1e4, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(token_entropy(logits), torch.tensor([math.log(4), 0.0]))
    same = torch.randn(2, 5, 7)
    assert token_kl(same, same).abs().max() < 1e-6


def test_mismatch_metrics_match_loop_reference():
    torch.manual_seed(1)
    lp = -torch.rand(3, 6, dtype=torch.float64) * 2
    roll = lp + torch.randn(3, 6, dtype=torch.float64) * 0.1
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[1, 4:] = False
    mask[2, :] = False
    lp_dirty = lp.clone()
    lp_dirty[~mask] = math.nan  # garbage in the padding must not leak
    out = mismatch_metrics(lp_dirty, roll, mask, quantiles=(0.0, 0.5, 1.0))
    deltas = [(lp[i, t] - roll[i, t]).item() for i in range(3) for t in range(6) if mask[i, t]]
    rows = [[(lp[i, t], roll[i, t]) for t in range(6) if mask[i, t]] for i in range(2)]
    n = len(deltas)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    assert out["mismatch/kl_k1"].item() == pytest.approx(mean([-d for d in deltas]))
    assert out["mismatch/kl_k2"].item() == pytest.approx(mean([0.5 * d * d for d in deltas]))
    assert out["mismatch/kl_k3"].item() == pytest.approx(mean([math.exp(d) - 1 - d for d in deltas]))
    assert out["mismatch/chi2_token"].item() == pytest.approx(mean([math.exp(2 * d) for d in deltas]) - 1)
    seq_sums = [sum((a - b).item() for a, b in r) for r in rows]
    assert out["mismatch/chi2_seq"].item() == pytest.approx(mean([math.exp(2 * s) for s in seq_sums]) - 1)
    gaps = [mean([b.item() for _, b in r]) - mean([a.item() for a, _ in r]) for r in rows]
    assert out["mismatch/ppl_ratio"].item() == pytest.approx(math.exp(mean(gaps)))
    assert out["mismatch/log_ppl_abs_gap"].item() == pytest.approx(mean([abs(g) for g in gaps]))
    ratios = sorted(math.exp(d) for d in deltas)
    w_mean = mean(ratios)
    assert out["mismatch/ess"].item() == pytest.approx(1 / mean([(r / w_mean) ** 2 for r in ratios]))
    assert out["mismatch/ratio_q00"].item() == pytest.approx(ratios[0])
    assert out["mismatch/ratio_q100"].item() == pytest.approx(ratios[-1])
    assert out["mismatch/ratio_q50"].item() == pytest.approx((ratios[(n - 1) // 2] + ratios[n // 2]) / 2)
    assert all(torch.isfinite(v) for v in out.values())


def test_mismatch_metrics_identical_policies_and_empty_mask():
    lp = -torch.rand(2, 4)
    out = mismatch_metrics(lp, lp, torch.ones(2, 4))
    assert out["mismatch/kl_k3"].item() == 0 and out["mismatch/ess"].item() == pytest.approx(1.0)
    assert out["mismatch/ppl_ratio"].item() == pytest.approx(1.0)
    empty = mismatch_metrics(lp, lp, torch.zeros(2, 4))
    assert math.isnan(empty["mismatch/ratio_q50"].item()) and empty["mismatch/kl_k1"].item() == 0
    with pytest.raises(ValueError, match="quantiles"):
        mismatch_metrics(lp, lp, torch.ones(2, 4), quantiles=(1.5,))
