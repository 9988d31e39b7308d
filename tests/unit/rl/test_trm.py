"""Tests for tritongym.rl.trm: Trust Region Masking (rl-algorithms.md §4, checks 5–6, §12 gotcha 7)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import (
    aggregate_loss,
    kl_estimate,
    ln_trm_mask,
    ln_trm_normaliser,
    ser_mask,
    trm_aggregate_loss,
    trm_bounds,
    trm_exact_mask,
    trm_mask,
)

from .references import log_softmax_rows


def _ell(values):
    lp = torch.tensor([values], dtype=torch.float64)
    return lp, torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)


def test_trm_mask_fixture_spec_4_3_d2():
    """ℓ = [0, 0.3, −0.4]: k2 = [0, .045, .08]; k3 mean 0.040060; SER 0.22651."""
    lp, roll, mask = _ell([0.0, 0.3, -0.4])
    assert not trm_mask(lp, roll, mask, max_k2=0.05, mean_k3=None).item()
    assert trm_mask(lp, roll, mask, max_k2=0.1, mean_k3=None).item()
    assert not trm_mask(lp, roll, mask, max_k2=None, mean_k3=0.001).item()
    assert trm_mask(lp, roll, mask, max_k2=None, mean_k3=0.04007).item()
    assert not trm_mask(lp, roll, mask, max_k2=None, mean_k3=0.04005).item()
    assert not trm_mask(lp, roll, mask).item()  # defaults: both criteria
    ser = (abs(math.exp(0.3) - 1) + abs(math.exp(-0.4) - 1)) / 3
    assert ser == pytest.approx(0.22651, abs=1e-5)
    assert ser_mask(lp, roll, mask, threshold=0.2266).item()
    assert not ser_mask(lp, roll, mask, threshold=0.2264).item()


def test_k2_symmetric_and_k3_asymmetric_spec_4_3_d4():
    """k2(ρ) = k2(1/ρ); k3(0.01) ≈ 3.61 while k2(0.01) ≈ 10.6 (why k2 is used for the max)."""
    for rho in (0.01, 0.5, 3.0):
        up, roll, mask = _ell([math.log(rho)])
        down, _, _ = _ell([-math.log(rho)])
        k2 = 0.5 * math.log(rho) ** 2
        for lp in (up, down):
            assert trm_mask(lp, roll, mask, max_k2=k2 * 1.0001, mean_k3=None).item()
            assert not trm_mask(lp, roll, mask, max_k2=k2 * 0.9999, mean_k3=None).item()
    lp, roll, mask = _ell([math.log(0.01)])
    assert 0.5 * math.log(0.01) ** 2 == pytest.approx(10.6, abs=0.01)
    assert 0.01 - 1 - math.log(0.01) == pytest.approx(3.61, abs=0.01)
    assert trm_mask(lp, roll, mask, max_k2=None, mean_k3=3.62).item()
    assert not trm_mask(lp, roll, mask, max_k2=None, mean_k3=3.60).item()


def test_k3_unbiased_k2_not_by_enumeration_check_5():
    """E_{π_roll}[k3] = E_{π_roll}[k1] = KL(π_roll ‖ π_θ) exactly; E[k2] is not the KL."""
    torch.manual_seed(5)
    roll = torch.randn(30, dtype=torch.float64).log_softmax(0)
    theta = (roll + torch.randn(30, dtype=torch.float64)).log_softmax(0)
    kl = (roll.exp() * (roll - theta)).sum()
    p = roll.exp()
    for kind, unbiased in (("k1", True), ("k3", True), ("k2", False)):
        expectation = (p * kl_estimate(roll, theta, kind)).sum()  # samples from π_roll, ref = π_θ
        assert (abs(expectation.item() - kl.item()) < 1e-12) == unbiased, kind


def test_bounds_table_check_6():
    b = trm_bounds(4096, delta=1e-4, eps=5e-3, kl_seq=0.01, tv_seq=0.05)
    assert b["classical"] == pytest.approx(1677.3, abs=0.1)
    assert b["pm_kl"] == pytest.approx(34.95, abs=0.01)
    assert b["pm_kl"] == pytest.approx(4 / 3 * 4096**1.5 * 1e-4, rel=2e-3)
    assert b["pm_tv"] == pytest.approx(24.71, abs=0.01)
    assert b["mix_kl"] == pytest.approx(8.192, abs=1e-3)
    assert b["mix_tv"] == pytest.approx(4.096, abs=1e-3)
    assert b["coupling"] == pytest.approx(79.9, abs=0.05)
    assert b["unified"] == pytest.approx(4.096, abs=1e-3)


def test_ln_trm_normaliser_fixture_spec_4_3_d1():
    assert ln_trm_normaliser(4096, 1e-4).item() == pytest.approx(1235.53, abs=0.01)
    assert ln_trm_normaliser(4, 0.5).item() == pytest.approx(2.07313, abs=1e-5)
    torch.testing.assert_close(
        ln_trm_normaliser(torch.tensor([4, 2]), 0.5),
        torch.tensor(
            [ln_trm_normaliser(4, 0.5).item(), ln_trm_normaliser(2, 0.5).item()], dtype=torch.float64
        ),
    )


def test_ln_trm_mask_matches_formula():
    lp, roll, mask = _ell([0.1, -0.2, 0.05, 0.3])
    delta = 0.5
    weights = [min(1.0, math.sqrt((4 - t) * delta / 2)) for t in range(1, 5)]
    rho = [math.exp(v) for v in [0.1, -0.2, 0.05, 0.3]]
    score = sum(abs(r - 1) * w for r, w in zip(rho, weights, strict=True)) / sum(weights)
    assert ln_trm_mask(lp, roll, mask, delta=delta, threshold=score + 1e-9).item()
    assert not ln_trm_mask(lp, roll, mask, delta=delta, threshold=score - 1e-9).item()


def test_normalised_by_total_batch_not_kept_count_spec_4_3_d5_gotcha_7():
    """2 of 4 sequences rejected → loss = (1/4)·Σ_accepted ℓ_i, half of the accepted-count normalisation."""
    torch.manual_seed(0)
    loss = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(4, 5, dtype=torch.bool)
    keep = torch.tensor([True, False, True, False])
    seq_sums = loss.detach().sum(-1)
    out = trm_aggregate_loss(loss, mask, keep)
    assert out.item() == pytest.approx((seq_sums[0] + seq_sums[2]).item() / 4)
    naive = aggregate_loss(loss, mask & keep[:, None], "seq-mean-token-sum")
    assert naive.item() == pytest.approx(2 * out.item())
    (grad,) = torch.autograd.grad(out, loss)
    assert (grad[~keep] == 0).all() and (grad[keep] == 0.25).all()
    token_mean = trm_aggregate_loss(loss, mask, keep, "token-mean")
    assert token_mean.item() == pytest.approx((seq_sums[0] + seq_sums[2]).item() / 20)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    chunk=st.integers(1, 7),
    vchunk=st.one_of(st.none(), st.integers(1, 11)),
    scale=st.sampled_from([0.01, 0.1, 1.0]),
)
def test_exact_trm_matches_brute_force_spec_4_3_d6(seed, chunk, vchunk, scale):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 5, 20, generator=gen, dtype=torch.float64) * 2
    rollout_logits = logits + torch.randn(3, 5, 20, generator=gen, dtype=torch.float64) * scale
    mask = torch.rand(3, 5, generator=gen) < 0.8
    lp_roll, lp = log_softmax_rows(rollout_logits), log_softmax_rows(logits)
    kl = (lp_roll.exp() * (lp_roll - lp)).sum(-1)  # KL(π_roll ‖ π_train), brute force
    max_kl = torch.where(mask, kl, 0.0).amax(-1)
    for delta in (max_kl.median().item(), 1e-3, 0.05):
        out = trm_exact_mask(
            logits, rollout_logits, mask, delta=delta, chunk_size=chunk, vocab_chunk_size=vchunk
        )
        boundary = (max_kl - delta).abs() < 1e-10
        assert torch.equal(out[~boundary], (max_kl <= delta)[~boundary])


def test_pad_invariance_and_validation():
    lp = torch.tensor([[0.01, -0.02, 5.0, math.nan]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0, 0]], dtype=torch.bool)
    roll = torch.zeros_like(lp)
    assert trm_mask(lp, roll, mask, max_k2=0.001, mean_k3=0.001).item()
    assert trm_mask(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3)).all()  # empty rows kept
    with pytest.raises(ValueError, match="max_k2"):
        trm_mask(lp, roll, mask, max_k2=-1.0)
    with pytest.raises(ValueError, match="rollout_log_probs"):
        trm_mask(lp, roll[:, :2], mask)
    with pytest.raises(ValueError, match="logits"):
        trm_exact_mask(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3))


# -- padding near the thresholds (issue 14) ----------------------------------------------------------
# Each row below has few valid tokens and many pads, with its statistic a hair inside or outside the
# bound: a mean taken over the padded length instead of the valid tokens (or a max that sees a pad)
# flips the verdict. The MRS/K3/geometric rejection masks of rl.correction share the rule.

from tritongym.rl import (  # noqa: E402
    apply_row_mask,
    geometric_rs_mask,
    k3_rs_mask,
    mrs_mask,
    sequence_mis_weights,
    sequence_rs_mask,
    sequence_tis_weights,
    token_mis_weights,
    token_tis_weights,
    token_veto_mask,
)

VALID, PADS = 3, 9


def _k3_inverse(target: float) -> float:
    """ℓ > 0 with e^ℓ − 1 − ℓ = target (bisection in float64)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if math.expm1(mid) - mid < target else (lo, mid)
    return (lo + hi) / 2


def _padded(ell_values: list[float], garbage: float = 0.0):
    """One row per entry: VALID tokens at ℓ, then PADS pads holding `garbage` log-ratios."""
    rows = len(ell_values)
    lp = torch.full((rows, VALID + PADS), garbage, dtype=torch.float64)
    for i, ell in enumerate(ell_values):
        lp[i, :VALID] = ell
    mask = torch.zeros(rows, VALID + PADS, dtype=torch.bool)
    mask[:, :VALID] = True
    return lp, torch.zeros_like(lp), mask


@pytest.mark.parametrize("garbage", [0.0, 30.0, math.nan])
def test_trm_mean_k3_divides_by_the_valid_token_count(garbage):
    delta = 0.001
    inside, outside = _k3_inverse(0.99 * delta), _k3_inverse(1.01 * delta)
    lp, roll, mask = _padded([inside, outside], garbage)
    assert trm_mask(lp, roll, mask, max_k2=None, mean_k3=delta).tolist() == [True, False]
    # over the padded length the outside row's mean would be 1.01·3/12·δ: kept by mistake
    assert (1.01 * delta * VALID / (VALID + PADS)) < delta


@pytest.mark.parametrize("garbage", [0.0, 30.0, math.nan])
def test_trm_max_k2_looks_at_valid_tokens_only(garbage):
    delta = 0.05
    inside, outside = math.sqrt(2 * delta * 0.999), math.sqrt(2 * delta * 1.001)
    lp, roll, mask = _padded([inside, outside], garbage)
    assert trm_mask(lp, roll, mask, max_k2=delta, mean_k3=None).tolist() == [True, False]
    lp[0, 1] = outside  # one valid token over the bound drops its row
    assert trm_mask(lp, roll, mask, max_k2=delta, mean_k3=None).tolist() == [False, False]


def test_trm_both_criteria_must_hold():
    mean_only = _k3_inverse(0.0011)  # over δ_avg = 0.001, under δ_max = 0.05 (k2 ≈ 0.0011)
    lp, roll, mask = _padded([mean_only])
    assert trm_mask(lp, roll, mask, max_k2=0.05, mean_k3=None).item()
    assert not trm_mask(lp, roll, mask, max_k2=0.05, mean_k3=0.001).item()
    assert trm_mask(lp, roll, mask, max_k2=None, mean_k3=None).item()


def test_ser_mean_divides_by_the_valid_token_count():
    threshold = 0.05
    lp, roll, mask = _padded([math.log1p(0.99 * threshold), math.log1p(1.01 * threshold)], garbage=5.0)
    assert ser_mask(lp, roll, mask, threshold=threshold).tolist() == [True, False]


def test_ln_trm_decision_is_unchanged_by_trailing_pads_at_its_threshold():
    lp = torch.tensor([[0.02, -0.01, 0.03, 0.015]], dtype=torch.float64)
    roll, mask = torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)
    t = torch.arange(1, 5, dtype=torch.float64)  # rank among the valid tokens
    w = ((lp.exp() - 1).abs() * torch.clamp(torch.sqrt((4 - t) * 0.5 / 2), max=1)).sum()
    ratio = float(w / ln_trm_normaliser(4, 0.5))
    padded_lp = torch.cat([lp, torch.full((1, 6), 9.0, dtype=torch.float64)], 1)
    padded_mask = torch.cat([mask, torch.zeros(1, 6, dtype=torch.bool)], 1)
    for threshold, kept in ((ratio * (1 + 1e-9), True), (ratio * (1 - 1e-9), False)):
        assert ln_trm_mask(lp, roll, mask, delta=0.5, threshold=threshold).item() is kept
        assert ln_trm_mask(padded_lp, torch.zeros_like(padded_lp), padded_mask, delta=0.5,
                           threshold=threshold).item() is kept


def test_trm_aggregate_normalises_by_rows_with_valid_tokens_before_rejection():
    loss = torch.tensor([[1.0, 2.0, 9.0], [4.0, 9.0, 9.0], [9.0, 9.0, 9.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.bool)  # row 2: all padding
    keep = torch.tensor([True, False, True])
    # seq-mean-token-sum: (1 + 2) / 2 rows with tokens (not / 1 kept row, not / 3 rows)
    assert trm_aggregate_loss(loss, mask, keep).item() == pytest.approx(1.5)
    # token-mean: 3 / 3 valid tokens before rejection
    assert trm_aggregate_loss(loss, mask, keep, mode="token-mean").item() == pytest.approx(1.0)


def test_mrs_geometric_mean_divides_by_the_valid_token_count():
    # upper bound 1.001: log-ratio mean just under / over log(1.001), padded with garbage
    up = math.log(1.001)
    lp, roll, mask = _padded([0.999 * up, 1.001 * up], garbage=4.0)
    assert geometric_rs_mask(lp, roll, mask).tolist() == [True, False]
    assert mrs_mask(lp, roll, mask).tolist() == [True, False]
    low = math.log(0.999)
    lp, roll, mask = _padded([0.999 * low, 1.001 * low], garbage=-4.0)
    assert mrs_mask(lp, roll, mask).tolist() == [True, False]


def test_mrs_trajectory_pooling_counts_valid_tokens_of_every_turn():
    # Trajectory of two turn rows: 3 valid tokens at 1.2·log(1.001) and 3 at 0.7·log(1.001): the pooled
    # mean 0.95·log(1.001) is kept; rows alone: the first would be dropped.
    up = math.log(1.001)
    lp, roll, mask = _padded([1.2 * up, 0.7 * up], garbage=3.0)
    traj = torch.tensor([5, 5])
    assert mrs_mask(lp, roll, mask, traj).tolist() == [True, True]
    assert mrs_mask(lp, roll, mask).tolist() == [False, True]


def test_mrs_veto_ignores_pads_and_binds_just_below_its_threshold():
    lp, roll, mask = _padded([0.0, 0.0], garbage=math.log(1e-9))  # pads far below the veto
    lp[0, 0] = math.log(1e-4 * 1.01)
    lp[0, 1] = -lp[0, 0]  # keep the row's mean inside the geometric bounds
    lp[1, 0] = math.log(1e-4 * 0.99)
    lp[1, 1] = -lp[1, 0]
    assert mrs_mask(lp, roll, mask, lower=1e-6, upper=1e6).tolist() == [True, False]


def test_k3_rejection_mean_divides_by_the_valid_token_count():
    threshold = 0.01
    lp, roll, mask = _padded([_k3_inverse(0.99 * threshold), _k3_inverse(1.01 * threshold)], garbage=-6.0)
    assert k3_rs_mask(lp, roll, mask, threshold=threshold).tolist() == [True, False]


# -- mutation survivors of trm.py (issue 14; benchmarks/mutation.py) ---------------------------------


def test_the_log_ratio_is_trainer_minus_rollout_with_real_rollout_log_probs():
    # ℓ = +0.3 on every token: k2 = 0.045 (kept under 0.05); log_probs + rollout would be far out.
    roll = torch.full((1, 4), -2.0, dtype=torch.float64)
    lp = roll + 0.3
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert trm_mask(lp, roll, mask, max_k2=0.05, mean_k3=None).item()
    assert not trm_mask(roll, lp, mask, max_k2=0.044, mean_k3=None).item()  # the same |ℓ|, just over
    assert ser_mask(lp, roll, mask, threshold=math.expm1(0.3) * 1.001).item()
    assert not ser_mask(lp, roll, mask, threshold=math.expm1(0.3) * 0.999).item()


def test_the_log_ratio_is_clamped_to_plus_minus_20():
    mask = torch.ones(1, 2, dtype=torch.bool)
    low = torch.tensor([[-50.0, -50.0]], dtype=torch.float64)
    # k3 at ℓ = −20 is e^−20 + 19 ≈ 19; unclamped (ℓ = −50) it would be 49
    assert trm_mask(low, torch.zeros_like(low), mask, max_k2=None, mean_k3=30.0).item()
    assert trm_mask(low, torch.zeros_like(low), mask, max_k2=200.0, mean_k3=None).item()  # k2 = ½·20²
    high = -low
    assert trm_mask(high, torch.zeros_like(high), mask, max_k2=None, mean_k3=math.exp(20) - 20).item()


def test_reduced_precision_log_probs_are_differenced_in_float32():
    lp = torch.tensor([[3.0]], dtype=torch.bfloat16)
    roll = torch.tensor([[0.01]], dtype=torch.bfloat16)
    ell = float(lp.float() - roll.float())  # 2.98999…; bfloat16 arithmetic would round it to 2.984375
    mask = torch.ones(1, 1, dtype=torch.bool)
    k2 = 0.5 * ell * ell
    assert trm_mask(lp, roll, mask, max_k2=k2 * (1 + 1e-6), mean_k3=None).item()
    assert not trm_mask(lp, roll, mask, max_k2=k2 * (1 - 1e-6), mean_k3=None).item()


def test_invalid_trm_inputs_name_the_argument():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^log_probs: expected shape \[B, L\], got \(3,\)"):
        trm_mask(torch.zeros(3), torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="^log_probs: expected a floating dtype"):
        trm_mask(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^rollout_log_probs: expected shape \(2, 3\)"):
        trm_mask(lp, torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="^mask: "):
        trm_mask(lp, lp, torch.ones(1, 3))  # would broadcast over the batch
    with pytest.raises(ValueError, match="^keep: "):
        trm_aggregate_loss(lp, torch.ones(2, 3), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="^mask: "):
        trm_aggregate_loss(lp, [[1, 1, 1], [1, 1, 1]], torch.ones(2, dtype=torch.bool))  # not a tensor
    with pytest.raises(ValueError, match="^length: expected a value >= 1, got 0"):
        trm_bounds(0, delta=0.1, eps=0.1, kl_seq=0.1, tv_seq=0.1)


def test_trm_aggregate_accepts_explicit_normalisers_and_passes_other_options_on():
    loss = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    mask = torch.ones(2, 2, dtype=torch.bool)
    keep = torch.tensor([True, False])
    assert trm_aggregate_loss(loss, mask, keep, num_sequences=10).item() == pytest.approx(0.3)
    assert trm_aggregate_loss(loss, mask, keep, mode="token-mean", num_tokens=6).item() == pytest.approx(0.5)
    normed = trm_aggregate_loss(loss, mask, keep, mode="seq-mean-token-sum-norm", max_length=6)
    assert normed.item() == pytest.approx(3.0 / 2 / 6)


def test_ln_trm_normaliser_clamps_each_weight_at_one_in_float64():
    z = ln_trm_normaliser(4, 2.0)  # weights √3, √2, 1, 0 → clamped to 1, 1, 1, 0
    assert z.dtype == torch.float64 and z.item() == 3.0
    lengths = ln_trm_normaliser(torch.tensor([3, 5]), 1e-3)
    expected = [sum(min(1.0, math.sqrt((n - t) * 1e-3 / 2)) for t in range(1, n + 1)) for n in (3, 5)]
    assert lengths.dtype == torch.float64 and lengths.tolist() == pytest.approx(expected, rel=1e-15)


def _bounds_reference(length, delta, eps, kl_seq, tv_seq):
    ctx_kl = sum(min(1.0, math.sqrt((t - 1) * delta / 2)) for t in range(1, length + 1))
    ctx_tv = sum(min(1.0, (t - 1) * eps) for t in range(1, length + 1))
    return {
        "classical": length * (length - 1) * delta,
        "pm_kl": 4 * min(1.0, math.sqrt(delta / 2)) * ctx_kl,
        "pm_tv": 4 * min(1.0, eps) * ctx_kl,
        "mix_kl": 4 * length * min(1.0, math.sqrt(delta / 2)) * min(1.0, math.sqrt(kl_seq / 2)),
        "mix_tv": 4 * length * min(1.0, eps) * min(1.0, tv_seq),
        "coupling": 4 * min(1.0, eps) * ctx_tv,
    }


@pytest.mark.parametrize("args", [
    (3, 8.0, 1.5, 8.0, 1.5),  # every min(1, ·) saturates
    (4096, 1e-4, 5e-3, 0.01, 0.05),  # the paper's fixture
    (1, 0.1, 0.1, 0.1, 0.1),  # one token
])
def test_trm_bounds_match_a_float64_loop(args):
    got = trm_bounds(args[0], delta=args[1], eps=args[2], kl_seq=args[3], tv_seq=args[4])
    expected = _bounds_reference(*args)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, rel=1e-12, abs=1e-300), name
    assert got["unified"] == min(v for k, v in expected.items() if k != "classical")


# -- mutation survivors of rl/correction.py (issue 14) ------------------------------------------------


def test_geometric_mean_of_a_one_token_row_and_of_an_empty_row():
    lp = torch.zeros(3, 4, dtype=torch.float64)
    mask = torch.zeros(3, 4, dtype=torch.bool)
    lp[0, 0], mask[0, 0] = 0.0015, True  # one valid token over log(1.001): dropped
    lp[1, 0], mask[1, 0] = 0.0009, True  # one valid token under it: kept
    lp[2] = 5.0  # no valid token: ρ_geo = 1, kept
    roll = torch.zeros_like(lp)
    assert geometric_rs_mask(lp, roll, mask).tolist() == [False, True, True]
    assert mrs_mask(lp, roll, mask).tolist() == [False, True, True]
    assert k3_rs_mask(lp, roll, mask, threshold=0.0).tolist() == [False, False, True]


def test_correction_inputs_are_checked_and_named():
    lp = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^log_probs: expected shape \[B, L\], got \(3,\)"):
        geometric_rs_mask(torch.zeros(3), torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="^log_probs: expected a floating dtype"):
        k3_rs_mask(torch.zeros(2, 3, dtype=torch.long), lp, torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^rollout_log_probs: expected shape \(2, 3\)"):
        mrs_mask(lp, torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^mask: expected shape \(2, 3\), got \(1, 3\)"):
        mrs_mask(lp, lp, torch.ones(1, 3))
    with pytest.raises(ValueError, match="^trajectory_ids"):
        mrs_mask(lp, lp, torch.ones(2, 3), torch.tensor([0, 0, 1]))
    with pytest.raises(ValueError, match=r"^mask: expected shape \[B, L\], got \(3,\)"):
        apply_row_mask(torch.ones(3), torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^keep: expected shape \(2,\), got \(1,\)"):
        apply_row_mask(torch.ones(2, 3), torch.ones(1, dtype=torch.bool))  # would broadcast


# -- the @torch.no_grad() masks under mutation (issue 14): defaults, zero bounds, inclusive bounds ----


def test_trm_defaults_are_005_for_max_k2_and_0001_for_mean_k3():
    over_max = _padded([math.sqrt(2 * 0.05 * 1.01)])
    assert not trm_mask(*over_max, mean_k3=None).item()
    assert trm_mask(*_padded([math.sqrt(2 * 0.05 * 0.99)]), mean_k3=None).item()
    assert not trm_mask(*_padded([_k3_inverse(0.00101)]), max_k2=None).item()
    assert trm_mask(*_padded([_k3_inverse(0.00099)]), max_k2=None).item()
    assert not ser_mask(*_padded([math.log1p(0.0505)])).item() and ser_mask(*_padded([math.log1p(0.0495)])).item()
    logits = torch.zeros(1, 1, 2, dtype=torch.float64)
    shifted = torch.tensor([[[0.0, 0.7]]], dtype=torch.float64)  # KL ≈ 0.06 > 0.05
    assert trm_exact_mask(logits, logits.clone(), torch.ones(1, 1, dtype=torch.bool)).item()
    assert not trm_exact_mask(shifted, logits, torch.ones(1, 1, dtype=torch.bool)).item()


def test_zero_bounds_are_allowed_and_keep_exact_rows():
    lp, roll, mask = _padded([0.0, 0.01])
    assert trm_mask(lp, roll, mask, max_k2=0.0, mean_k3=0.0).tolist() == [True, False]
    assert ser_mask(lp, roll, mask, threshold=0.0).tolist() == [True, False]
    assert ln_trm_mask(lp, roll, mask, delta=0.5, threshold=0.0).tolist() == [True, False]
    logits = torch.randn(2, 3, 5, dtype=torch.float64)
    assert trm_exact_mask(logits, logits.clone(), torch.ones(2, 3, dtype=torch.bool), delta=0.0).all()


def test_the_bounds_are_inclusive_at_the_statistic_itself():
    t = torch.full((1, 3), 0.1, dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    roll = torch.zeros_like(t)
    mean_k3 = ((t.exp() - 1.0 - t).sum(-1) / 3).item()
    max_k2 = (0.5 * t * t).amax(-1).item()
    mean_dev = ((t.exp() - 1.0).abs().sum(-1) / 3).item()
    assert trm_mask(t, roll, mask, max_k2=None, mean_k3=mean_k3).item()
    assert trm_mask(t, roll, mask, max_k2=max_k2, mean_k3=None).item()
    assert ser_mask(t, roll, mask, threshold=mean_dev).item()


def test_a_row_over_the_max_is_dropped_even_when_its_mean_is_inside():
    lp = torch.zeros(1, 200, dtype=torch.float64)
    lp[0, 0] = 0.4  # k2 = 0.08 > 0.05; mean k3 = 0.0918 / 200 ≈ 0.00046 < 0.001
    roll, mask = torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)
    assert not trm_mask(lp, roll, mask).item()
    assert trm_mask(lp, roll, mask, max_k2=None).item()


def test_invalid_mask_bounds_name_themselves():
    lp, roll, mask = _padded([0.0])
    with pytest.raises(ValueError, match="^max_k2: expected a value >= 0 or None, got -1"):
        trm_mask(lp, roll, mask, max_k2=-1.0)
    with pytest.raises(ValueError, match="^mean_k3: expected a value >= 0 or None, got -0.5"):
        trm_mask(lp, roll, mask, mean_k3=-0.5)
    with pytest.raises(ValueError, match="^threshold: expected a value >= 0, got -1"):
        ser_mask(lp, roll, mask, threshold=-1.0)
    with pytest.raises(ValueError, match="^delta, threshold: expected delta > 0 and threshold >= 0, got 0, 0.1"):
        ln_trm_mask(lp, roll, mask, delta=0, threshold=0.1)
    with pytest.raises(ValueError, match="^delta, threshold"):
        ln_trm_mask(lp, roll, mask, delta=-1.0, threshold=0.1)
    logits = torch.zeros(1, 2, 3)
    with pytest.raises(ValueError, match="^delta: expected a value >= 0, got -1"):
        trm_exact_mask(logits, logits, torch.ones(1, 2), delta=-1.0)
    with pytest.raises(ValueError, match=r"^logits: expected shape \[B, L, V\], got \(2, 3\)"):
        trm_exact_mask(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^mask: expected shape \(1, 2\), got \(2, 2\)"):
        trm_exact_mask(logits, logits, torch.ones(2, 2))


def test_ln_trm_rows_are_judged_apart_with_clamped_and_small_normalisers():
    # two rows of 4 tokens, δ = 2 (weights clamp at 1): ratios differ, threshold between them
    lp = torch.tensor([[0.01, 0.02, 0.04, 0.0], [0.2, 0.2, 0.2, 0.0]], dtype=torch.float64)
    roll, mask = torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)
    ratio = (math.expm1(0.01) + math.expm1(0.02) + math.expm1(0.04)) / 3  # weights √3, √2, 1, 0 → 1, 1, 1, 0
    assert ln_trm_mask(lp, roll, mask, delta=2.0, threshold=ratio * 1.001).tolist() == [True, False]
    assert not ln_trm_mask(lp[:1], roll[:1], mask[:1], delta=2.0, threshold=ratio * 0.999).item()
    # each row's W is divided by its own Z: a second row (of 2 valid tokens) changes nothing for the first
    mask[1, 2:] = False
    assert ln_trm_mask(lp, roll, mask, delta=2.0, threshold=ratio * 0.999).tolist() == [False, False]
    # Z(2) = √(δ/2) = 0.1 < 1 for δ = 0.02: the ratio is W/Z = |ρ−1| of the first token
    two = torch.tensor([[0.05, 0.0]], dtype=torch.float64)
    ones = torch.ones(1, 2, dtype=torch.bool)
    assert not ln_trm_mask(two, torch.zeros_like(two), ones, delta=0.02, threshold=math.expm1(0.05) * 0.99).item()
    assert ln_trm_mask(two, torch.zeros_like(two), ones, delta=0.02, threshold=math.expm1(0.05) * 1.01).item()
    # one token: Z = 0, no evidence, kept
    one = torch.tensor([[3.0]], dtype=torch.float64)
    assert ln_trm_mask(one, torch.zeros_like(one), torch.ones(1, 1, dtype=torch.bool), delta=0.5, threshold=0.5).item()


def _one_token_rows(deltas):
    lp = torch.tensor([[d] for d in deltas], dtype=torch.float64)
    return lp, torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)


def test_geometric_and_sequence_bounds_are_inclusive_at_both_ends():
    lp, roll, mask = _one_token_rows([math.log(0.999), math.log(1.001)])
    assert geometric_rs_mask(lp, roll, mask).tolist() == [True, True]
    lp, roll, mask = _one_token_rows([math.log(0.5), math.log(2.0), math.log(0.49), math.log(2.01)])
    assert sequence_rs_mask(lp, roll, mask).tolist() == [True, True, False, False]  # defaults 0.5 / 2.0
    assert geometric_rs_mask(*_one_token_rows([0.0]), lower=1.0, upper=1.0).item()  # lower == upper allowed
    assert sequence_rs_mask(*_one_token_rows([0.0]), lower=1.0, upper=1.0).item()
    for fn in (geometric_rs_mask, sequence_rs_mask):
        with pytest.raises(ValueError, match="^lower, upper: expected 0 < lower <= upper, got 0, 1"):
            fn(*_one_token_rows([0.0]), lower=0, upper=1)


def test_sequence_and_k3_rejection_pool_over_the_trajectory():
    lp, roll, mask = _one_token_rows([math.log(1.5), math.log(1.5)])  # each 1.5, together 2.25 > 2
    assert sequence_rs_mask(lp, roll, mask).tolist() == [True, True]
    assert sequence_rs_mask(lp, roll, mask, trajectory_ids=torch.tensor([0, 0])).tolist() == [False, False]
    lp, roll, mask = _one_token_rows([0.3, 0.0])  # k3 0.0499 and 0: pooled mean 0.025
    assert k3_rs_mask(lp, roll, mask, threshold=0.03).tolist() == [False, True]
    assert k3_rs_mask(lp, roll, mask, threshold=0.03, trajectory_ids=torch.tensor([1, 1])).tolist() == [True, True]
    with pytest.raises(ValueError, match="^threshold: expected a value >= 0, got -1"):
        k3_rs_mask(lp, roll, mask, threshold=-1.0)


def test_mrs_passes_its_upper_bound_and_veto_threshold_on():
    lp, roll, mask = _one_token_rows([math.log(1.01)])
    assert not mrs_mask(lp, roll, mask).item()
    assert mrs_mask(lp, roll, mask, upper=1.02).item()
    vetoed = _one_token_rows([math.log(1e-3)])
    assert mrs_mask(*vetoed, lower=1e-6, upper=1e6).item()  # 1e-3 is above the default veto 1e-4
    assert not mrs_mask(*vetoed, lower=1e-6, upper=1e6, veto_threshold=1e-2).item()


def test_sequence_importance_weights_clamp_and_bounds():
    lp, roll, mask = _one_token_rows([math.log(2.0), 30.0, -30.0])
    weights = sequence_mis_weights(lp, roll, mask, upper=2.0)[:, 0]
    assert weights[0].item() == pytest.approx(2.0)  # exactly at the bound: kept
    assert weights[1].item() == 0.0 and weights[2].item() == pytest.approx(math.exp(-20))  # log-ratio clamped ±20
    assert sequence_mis_weights(lp, roll, mask, upper=math.exp(25))[1, 0].item() == pytest.approx(math.exp(20))
    assert sequence_mis_weights(lp, roll, mask, upper=0.5)[2, 0].item() == pytest.approx(math.exp(-20))
    with pytest.raises(ValueError, match="^upper: expected a value > 0, got 0"):
        sequence_mis_weights(lp, roll, mask, upper=0)
    for cap in (0, -1):
        with pytest.raises(ValueError, match="^cap"):
            sequence_tis_weights(lp, roll, mask, cap=cap)


def test_token_weights_bounds_caps_and_veto_edges():
    lp, roll, mask = _one_token_rows([math.log(0.5), math.log(2.0), math.log(0.49), 25.0, -25.0])
    mis = token_mis_weights(lp, roll, mask)[:, 0]  # defaults 0.5 / 2.0, inclusive
    assert mis[:3].tolist() == pytest.approx([0.5, 2.0, 0.0]) and mis[3].item() == 0.0
    assert token_mis_weights(*_one_token_rows([0.0]), lower=1.0, upper=1.0).item() == 1.0
    with pytest.raises(ValueError, match="^lower, upper: expected 0 < lower <= upper, got 0, 2"):
        token_mis_weights(lp, roll, mask, lower=0, upper=2)
    assert token_tis_weights(*_one_token_rows([0.0]), cap=0.5).item() == 0.5  # a cap below 1 is allowed
    seq = sequence_tis_weights(lp, roll, mask, cap=0.5)[:, 0]
    assert seq[3].item() == 0.5 and seq[4].item() == pytest.approx(math.exp(-20))  # Σ Δ clamped at −20
    assert sequence_tis_weights(lp, roll, mask, cap=math.exp(25))[3, 0].item() == pytest.approx(math.exp(20))
    with pytest.raises(ValueError, match="^cap: expected a value > 0, got 0"):
        sequence_tis_weights(lp, roll, mask, cap=0)
    at_threshold = _one_token_rows([math.log(1e-4)])
    assert token_veto_mask(*at_threshold).item()  # vetoed only strictly below the threshold


def test_ser_of_a_one_token_row_is_that_tokens_deviation():
    lp, roll, mask = _one_token_rows([math.log1p(0.06)])
    assert not ser_mask(lp, roll, mask).item()
    assert ser_mask(lp, roll, mask, threshold=0.0601).item()


def test_the_exact_mask_applies_the_sampling_temperature():
    logits = torch.tensor([[[0.0, 0.0, 0.0]]], dtype=torch.float64)
    rollout = torch.tensor([[[1.0, 0.0, 0.0]]], dtype=torch.float64)
    mask = torch.ones(1, 1, dtype=torch.bool)

    def kl(temperature):
        p = torch.softmax(rollout / temperature, -1)
        q = torch.softmax(logits / temperature, -1)
        return float((p * (p.log() - q.log())).sum())

    delta = (kl(1.0) + kl(2.0)) / 2  # between the two: kept only at temperature 2
    assert not trm_exact_mask(logits, rollout, mask, delta=delta).item()
    assert trm_exact_mask(logits, rollout, mask, delta=delta, temperature=2.0).item()


def test_sequence_weights_clamp_the_summed_log_ratio_not_only_each_token():
    # two tokens at ±15 (each inside the per-token ±20): the row's sum ±30 is clamped to ±20
    lp = torch.tensor([[15.0, 15.0], [-15.0, -15.0]], dtype=torch.float64)
    roll, mask = torch.zeros_like(lp), torch.ones_like(lp, dtype=torch.bool)
    assert sequence_mis_weights(lp, roll, mask, upper=math.exp(25))[0, 0].item() == pytest.approx(math.exp(20))
    assert sequence_mis_weights(lp, roll, mask)[1, 0].item() == pytest.approx(math.exp(-20))
    assert sequence_tis_weights(lp, roll, mask, cap=math.exp(25))[0, 0].item() == pytest.approx(math.exp(20))
    assert sequence_tis_weights(lp, roll, mask)[1, 0].item() == pytest.approx(math.exp(-20))
