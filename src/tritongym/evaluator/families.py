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

Integer and boolean inputs (targets, indices, shapes) are never changed. The factors come from
the trial's secret seed. A family is used only when the reference output stays finite on it
(``log`` of negated positives, say, is not a test of the candidate).
"""

from __future__ import annotations

import random
from typing import Any

import torch

FAMILY_TASK = "get_inputs"
PERTURBATION_FAMILIES = ("negated", "scaled", "offset")
FAMILIES = (FAMILY_TASK, *PERTURBATION_FAMILIES)


def _perturb_tensor(tensor: torch.Tensor, family: str, rng: random.Random) -> torch.Tensor:
    if not tensor.dtype.is_floating_point:
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


def perturb(inputs: Any, family: str, seed: int) -> Any:
    """`inputs` (a nested list/tuple of tensors and values) under `family`, drawn from `seed`."""
    if family == FAMILY_TASK:
        return inputs
    if family not in PERTURBATION_FAMILIES:
        raise ValueError(f"unknown input family {family!r}; expected one of {', '.join(FAMILIES)}")
    rng = random.Random(seed ^ 0x5EED_F00D)

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
