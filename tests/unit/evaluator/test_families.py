"""Input families keep a problem's semantics (issue 21): what they perturb and what they leave alone.

An honest kernel must get the same verdict on every run, so a family may change the data a layer
computes on, never the tensors that say how: integer tensors, masks, quantisation scales and zero
points, indices. Pure tensor arithmetic, no worker.
"""

from __future__ import annotations

import pytest
import torch

from tritongym.evaluator.common import families


class Int4Linear(torch.nn.Module):
    def forward(self, x, qweight, scales, zeros):  # the names a real layer's arguments carry
        return x


def quantised_inputs():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 32, generator=generator)
    qweight = torch.randint(0, 2**31 - 1, (4, 8), dtype=torch.int32, generator=generator)
    scales = torch.rand(1, 8, generator=generator) * 0.02 + 0.005
    zeros = torch.full((1, 8), 8.0)
    return [x, qweight, scales, zeros]


@pytest.mark.parametrize("family", families.PERTURBATION_FAMILIES)
def test_quantisation_metadata_keeps_its_values_and_activations_are_perturbed(family):
    inputs = quantised_inputs()
    names = families.forward_parameter_names(Int4Linear())
    assert names == ["x", "qweight", "scales", "zeros"]
    out = families.perturb(inputs, family, seed=123, names=names)
    assert not torch.equal(out[0], inputs[0])
    for kept in (1, 2, 3):
        assert out[kept] is inputs[kept]


def test_without_names_the_same_floats_are_perturbed_as_before():
    inputs = quantised_inputs()
    out = families.perturb(inputs, "scaled", seed=5)
    assert out[1] is inputs[1]  # integers never change
    assert not torch.equal(out[2], inputs[2]) and not torch.equal(out[3], inputs[3])


@pytest.mark.parametrize(("name", "kept"), [
    ("scales", True), ("w_scale", True), ("zero_point", True), ("qzeros", True), ("attention_mask", True),
    ("mask", True), ("indices", True), ("g_idx", True), ("offsets", True), ("lengths", True),
    ("x", False), ("weight", False), ("bias", False), ("hidden_states", False), ("reindex", False), (None, False),
])
def test_kept_names(name, kept):
    assert families.kept_by_name(name) is kept


@pytest.mark.parametrize("family", families.PERTURBATION_FAMILIES)
def test_floating_masks_are_left_alone(family):
    binary = (torch.rand(6, 6, generator=torch.Generator().manual_seed(1)) > 0.5).float()
    additive = torch.zeros(6, 6).masked_fill(torch.ones(6, 6).triu(1).bool(), float("-inf"))
    data = torch.randn(6, 6)
    out = families.perturb([data, binary, additive], family, seed=9)
    assert out[1] is binary and out[2] is additive
    assert not torch.equal(out[0], data)


def test_is_mask():
    assert families.is_mask(torch.tensor([0.0, 1.0, 1.0]))
    assert families.is_mask(torch.tensor([0.0, float("-inf")]))
    assert not families.is_mask(torch.tensor([0.0, 0.5]))
    assert not families.is_mask(torch.tensor([1.0, float("-inf")]))
    # Past the first 64 elements (the quick look): still every element decides.
    late = torch.cat([torch.ones(100), torch.tensor([0.5]), torch.zeros(10)])
    assert not families.is_mask(late)
    assert families.is_mask((torch.arange(1000) % 3 == 0).float().reshape(10, 100).t())  # non-contiguous
    assert not families.is_mask(torch.randn(256, 256))
    assert not families.is_mask(torch.empty(0))


def test_forward_with_var_positional_arguments_names_only_the_leading_ones():
    class Star(torch.nn.Module):
        def forward(self, x, *rest):
            return x

    assert families.forward_parameter_names(Star()) == ["x"]
    inputs = [torch.randn(3), torch.rand(3) + 1.0]
    out = families.perturb(inputs, "negated", seed=1, names=["x"])
    assert torch.equal(out[0], -inputs[0]) and torch.equal(out[1], -inputs[1])
