"""Tests for tritongym.rl.empg (rl-algorithms.md §8.2, tagged [R])."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tritongym.rl import empg_advantages, step_mean_entropy


def test_empg_fixture_spec_8_2_d1():
    """H = [0.2, 1.0, 0.6] → H̃ = [0, 1, 0.5]; κ = 1: g = [1.519441, 0.558971, 0.921588];
    A = +1, ζ = 0.05, κ' = 1: A_mod = [1.537835, 0.589298, 0.921588] before centring."""
    h = torch.tensor([[0.2, 1.0, 0.6]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    g = empg_advantages(h, mask, torch.tensor([1.0], dtype=torch.float64), zeta=0.0, zero_mean=False)
    torch.testing.assert_close(
        g, torch.tensor([[1.519441, 0.558971, 0.921588]], dtype=torch.float64), atol=1e-6, rtol=0
    )
    out = empg_advantages(h, mask, torch.tensor([1.0], dtype=torch.float64), zero_mean=False)
    torch.testing.assert_close(
        out, torch.tensor([[1.537835, 0.589298, 0.921588]], dtype=torch.float64), atol=1e-6, rtol=0
    )
    centred = empg_advantages(h, mask, torch.tensor([1.0], dtype=torch.float64))
    assert centred.sum().item() == pytest.approx(0.0, abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1), n=st.integers(1, 6), steps=st.integers(1, 5), kappa=st.floats(0.1, 3.0)
)
def test_empg_properties_spec_8_2_d2_d3(seed, n, steps, kappa):
    gen = torch.Generator().manual_seed(seed)
    h = torch.rand(n, steps, generator=gen, dtype=torch.float64) * 3
    counts = torch.randint(1, steps + 1, (n,), generator=gen)
    mask = torch.arange(steps)[None, :] < counts[:, None]
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    g = empg_advantages(h, mask, torch.ones(n, dtype=torch.float64), kappa=kappa, zeta=0.0, zero_mean=False)
    assert g[mask].mean().item() == pytest.approx(1.0, abs=1e-10)  # mean(g) = 1 exactly
    order = h[mask].argsort()
    assert (g[mask][order].diff() <= 1e-12).all()  # monotone decreasing in H
    mod = empg_advantages(h, mask, adv, kappa=kappa, zeta=0.0, zero_mean=False)
    signs = torch.sign(mod[mask]) == torch.sign(adv[:, None].expand(n, steps)[mask])
    assert signs.all()  # sign(g·A) = sign(A)
    assert (mod[~mask] == 0).all()


def test_equal_entropies_give_unit_modulation():
    h = torch.full((2, 3), 0.7)
    out = empg_advantages(h, torch.ones(2, 3), torch.tensor([2.0, -1.0]), zeta=0.0, zero_mean=False)
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0, 2.0], [-1.0, -1.0, -1.0]]))
    assert empg_advantages(h, torch.zeros(2, 3), torch.ones(2)).abs().sum() == 0


def test_step_mean_entropy_matches_loop():
    torch.manual_seed(0)
    ent = torch.rand(3, 10, dtype=torch.float64)
    ids = torch.randint(-1, 4, (3, 10))
    mean, valid = step_mean_entropy(ent, ids, 4)
    for i in range(3):
        for k in range(4):
            sel = ids[i] == k
            assert valid[i, k].item() == bool(sel.any())
            expected = ent[i][sel].mean().item() if sel.any() else 0.0
            assert mean[i, k].item() == pytest.approx(expected)
    with pytest.raises(ValueError, match="step_ids"):
        step_mean_entropy(ent, torch.full((3, 10), 4), 4)
