"""Adversarial input families: the task's own inputs, and perturbed variants of them.

A constant, zero, identity or analytic-shortcut output can pass a loose tolerance on the task's
own input distribution (KernelBench's ``torch.rand`` makes ReLU the identity; a mean over uniform
inputs is ≈ 0.5). Re-running the same shapes and dtypes on perturbed inputs defeats them
(reward-hacking.md B1–B5):

* ``negated``: every floating input multiplied by −1 (sign-spanning: breaks identity on [0, 1));
* ``scaled``: every floating input multiplied by its own factor 2^u, u ~ U(1, 3) (values 2–8×
  larger: breaks constants and subsampling tuned to a scale, and clamps such as HardTanh that
  are the identity on the task's own inputs and on their negation);
* ``offset``: every floating input shifted by ±U(1, 3)·std of that tensor (breaks outputs that
  rely on a zero mean).

A family must keep the problem's semantics: it perturbs the data a layer computes *on*, never the
tensors that say *how* (an honest kernel must get the same verdict on every run). Left unchanged:

* integer and boolean inputs (targets, indices, packed quantised weights, boolean masks);
* floating masks: a tensor whose values are all 0/1 (a multiplicative mask) or all 0/-inf (an
  additive attention mask); negating or offsetting one makes a tensor no real layer has;
* quantisation and index metadata, recognised by the name of the reference ``forward``'s
  parameter it is passed as (`KEPT_NAMES`: scales, zero points, masks, indices, offsets, lengths).
  Scaling an int4 layer's scales and zero points *together with* its activations moved the
  weights far outside the 4-bit grid's range and multiplied the output by up to 64, so an honest
  split-K fp16-atomics GEMM passed on one run and failed on the next (fp16 rounding of 64x larger
  partial sums against a fixed absolute tolerance).

The factors come from the trial's secret seed. A family is used only when the reference output
stays finite on it (``log`` of negated positives, say, is not a test of the candidate).
"""

from __future__ import annotations

import inspect
import random
import re
from collections.abc import Sequence
from typing import Any

import torch

from tritongym.evaluator.common.family_names import FAMILIES, FAMILY_TASK, PERTURBATION_FAMILIES  # noqa: F401

#: Name words of ``forward`` parameters that carry quantisation or index metadata, or masks.
KEPT_NAMES = frozenset({
    "scale", "scales", "qscale", "qscales", "zero", "zeros", "qzero", "qzeros", "zp", "zps", "zeropoint",
    "zeropoints", "mask", "masks", "idx", "index", "indices", "perm", "offsets", "lengths", "lens", "bins",
    "boundaries", "codebook", "lut", "absmax",
})
_WORD = re.compile(r"[a-z]+")


def kept_by_name(name: str | None) -> bool:
    """Whether a ``forward`` parameter called `name` holds metadata a family must not change."""
    if not name:
        return False
    lowered = name.lower().replace("zero_point", "zeropoint")
    return any(word in KEPT_NAMES for word in _WORD.findall(lowered))


def is_mask(tensor: torch.Tensor) -> bool:
    """A floating tensor whose values are all in {0, 1} or all in {0, -inf}."""
    if tensor.numel() == 0:
        return False
    # The first elements settle most calls (random data is no mask), for the price of 64 elements
    # instead of four passes over the whole input per trial (py-spy: ~5 % of a reference worker).
    head = tensor.reshape(-1)[:64]
    if not bool(((head == 0) | (head == 1) | (head == float("-inf"))).all()):
        return False
    binary = (tensor == 0) | (tensor == 1)
    additive = (tensor == 0) | (tensor == float("-inf"))
    return bool(binary.all()) or bool(additive.all())


def forward_parameter_names(model: Any) -> list[str | None]:
    """The names of `model.forward`'s positional parameters, in order (empty when it takes ``*args``)."""
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return []
    names: list[str | None] = []
    for parameter in parameters:
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            names.append(parameter.name)
        elif parameter.kind == parameter.VAR_POSITIONAL:
            break
    return names


def _perturb_tensor(tensor: torch.Tensor, family: str, rng: random.Random) -> torch.Tensor:
    if not tensor.dtype.is_floating_point or is_mask(tensor):
        return tensor
    if family == "negated":
        return -tensor
    if family == "scaled":
        # Upwards only: a downscale keeps a clamp to [-1, 1] the identity on unit-scale inputs.
        return tensor * (2.0 ** rng.uniform(1.0, 3.0))
    if family == "offset":
        spread = float(tensor.float().std()) if tensor.numel() > 1 else 1.0
        if not spread > 0 or spread != spread:
            spread = 1.0
        return tensor + rng.choice((-1.0, 1.0)) * rng.uniform(1.0, 3.0) * spread
    raise ValueError(f"unknown input family {family!r}; expected one of {', '.join(FAMILIES)}")


def perturb(inputs: Any, family: str, seed: int, names: Sequence[str | None] = ()) -> Any:
    """`inputs` (a nested list/tuple of tensors and values) under `family`, drawn from `seed`.

    `names`: the reference ``forward``'s parameter names, position by position (`KEPT_NAMES`
    decides which top-level inputs stay as they are).
    """
    if family == FAMILY_TASK:
        return inputs
    if family not in PERTURBATION_FAMILIES:
        raise ValueError(f"unknown input family {family!r}; expected one of {', '.join(FAMILIES)}")
    rng = random.Random(seed ^ 0x5EED_F00D)
    if isinstance(inputs, list) and names:
        kept = [kept_by_name(names[i]) if i < len(names) else False for i in range(len(inputs))]
        return [value if keep else _walk(value, family, rng) for value, keep in zip(inputs, kept, strict=True)]
    return _walk(inputs, family, rng)


def _walk(inputs: Any, family: str, rng: random.Random) -> Any:
    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return _perturb_tensor(value, family, rng)
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, tuple):
            return tuple(walk(v) for v in value)
        return value

    return walk(inputs)


def all_finite(value: Any) -> bool:
    """True when every floating tensor in a nested structure is finite."""
    if isinstance(value, torch.Tensor):
        return not value.dtype.is_floating_point or bool(torch.isfinite(value).all())
    if isinstance(value, (list, tuple)):
        return all(all_finite(v) for v in value)
    return True
