"""The input families' factors on floating tensors: what each family documents, by value.

Only an end-to-end hack case used to notice a family that shrank instead of enlarging. Here each
family is checked against its documented factor over many seeds: ``negated`` is exactly −x,
``scaled`` is x·2^u with u in [1, 3] (one factor per tensor), ``offset`` is x ± U(1, 3)·std(x) (one
shift per tensor, either sign). Integer tensors are left to tests that own them (their handling may
change); these assert floating tensors only.
"""

from __future__ import annotations

import math

import pytest
import torch

from tritongym.evaluator.common.families import FAMILIES, FAMILY_TASK, PERTURBATION_FAMILIES, all_finite, perturb

SEEDS = range(200)


def base() -> torch.Tensor:
    return torch.linspace(-2.0, 3.0, 24, dtype=torch.float64).reshape(4, 6)


def test_the_family_names():
    assert FAMILY_TASK == "get_inputs"
    assert PERTURBATION_FAMILIES == ("negated", "scaled", "offset")
    assert FAMILIES == ("get_inputs", "negated", "scaled", "offset")


def test_the_task_family_returns_the_inputs_themselves():
    inputs = [base(), 3]
    assert perturb(inputs, FAMILY_TASK, 0) is inputs


def test_negated_is_exactly_minus_x_and_keeps_dtype_and_shape():
    x = base().float()
    (y,) = perturb([x], "negated", 7)
    assert torch.equal(y, -x) and y.dtype == torch.float32 and y.shape == x.shape


def test_scaled_enlarges_by_one_factor_between_2_and_8_per_tensor():
    x = base()
    factors = []
    for seed in SEEDS:
        a, b = perturb([x, x], "scaled", seed)
        factor = (a[0, 0] / x[0, 0]).item()
        assert torch.allclose(a, x * factor, rtol=1e-12, atol=0)  # one factor for the whole tensor
        assert 2.0 <= factor <= 8.0
        factors.append(math.log2(factor))
        assert not torch.equal(a, b)  # each tensor draws its own factor
    # u ~ U(1, 3): spread over the whole range, not a constant or a half of it.
    assert min(factors) < 1.1 and max(factors) > 2.9
    assert 1.8 < sum(factors) / len(factors) < 2.2


def test_offset_shifts_by_one_to_three_standard_deviations_of_either_sign():
    x = base()
    std = float(x.float().std())
    shifts = []
    for seed in SEEDS:
        (y,) = perturb([x], "offset", seed)
        shift = (y - x)[0, 0].item()
        assert torch.allclose(y - x, torch.full_like(x, shift), atol=1e-12, rtol=0)  # one shift per tensor
        assert 1.0 * std - 1e-9 <= abs(shift) <= 3.0 * std + 1e-9
        shifts.append(shift / std)
    assert any(s < 0 for s in shifts) and any(s > 0 for s in shifts)
    assert min(abs(s) for s in shifts) < 1.1 and max(abs(s) for s in shifts) > 2.9
    # Balanced signs (a fair coin over 200 seeds).
    assert 60 < sum(1 for s in shifts if s > 0) < 140


def test_offset_uses_unit_spread_for_a_constant_a_single_element_or_a_nan_std():
    for x in (torch.full((3, 3), 5.0), torch.tensor([4.0]), torch.tensor([1.0, float("nan")])):
        for seed in range(20):
            (y,) = perturb([x], "offset", seed)
            shift = (y - x).flatten()[0].item()
            assert 1.0 - 1e-6 <= abs(shift) <= 3.0 + 1e-6, (x, shift)


def test_the_draw_depends_only_on_the_seed():
    x = base()
    for family in ("scaled", "offset"):
        assert torch.equal(perturb([x], family, 11)[0], perturb([x], family, 11)[0])
        assert not torch.equal(perturb([x], family, 11)[0], perturb([x], family, 12)[0])


def test_nested_structures_are_walked_and_non_tensors_kept():
    x = base()
    out = perturb([x, (x, [x]), 2.5, "s", None], "negated", 0)
    assert isinstance(out, list) and isinstance(out[1], tuple) and isinstance(out[1][1], list)
    assert torch.equal(out[0], -x) and torch.equal(out[1][0], -x) and torch.equal(out[1][1][0], -x)
    assert out[2:] == [2.5, "s", None]


def test_an_unknown_family_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="unknown input family 'flipped'; expected one of get_inputs, negated"):
        perturb([base()], "flipped", 0)


def test_all_finite():
    assert all_finite([base(), (torch.tensor([1, 2]), 3)])
    assert not all_finite([base(), (torch.tensor([1.0, float("inf")]),)])
    assert not all_finite(torch.tensor([float("nan")]))
    assert all_finite("not a tensor")
