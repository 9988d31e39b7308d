"""Private helpers shared by ``tritongym.rl``: argument validation, masks, dtypes, group indices.

Every public function validates its tensors here so that the error messages have one shape:
``"<name>: expected <what>, got <what>"`` (the style guide's Gymnasium convention), raised as
``ValueError``. Nothing in this module is exported.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

#: Log-ratios are clamped to ±SAFETY_BOUND before ``exp`` (verl ``rollout_corr_helper.SAFETY_BOUND``):
#: e^20 ≈ 4.85e8 and e^-20 ≈ 2.06e-9, far outside any threshold a caller would use, and finite in fp32.
SAFETY_BOUND = 20.0


def check_tensor(x: object, name: str) -> Tensor:
    """Raise unless ``x`` is a tensor."""
    if not isinstance(x, Tensor):
        raise ValueError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    return x


def check_ndim(x: Tensor, ndim: int, name: str, layout: str) -> Tensor:
    """Raise unless ``x`` is a tensor with ``ndim`` dimensions (``layout`` names them, e.g. ``[n, T]``)."""
    check_tensor(x, name)
    if x.dim() != ndim:
        raise ValueError(f"{name}: expected shape {layout}, got {tuple(x.shape)}")
    return x


def check_shape(x: Tensor, shape: Sequence[int], name: str) -> Tensor:
    """Raise unless ``x`` has exactly ``shape``."""
    check_tensor(x, name)
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {tuple(shape)}, got {tuple(x.shape)}")
    return x


def check_floating(x: Tensor, name: str) -> Tensor:
    """Raise unless ``x`` has a floating dtype."""
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating dtype, got {x.dtype}")
    return x


def check_positive(value: float, name: str, *, allow_zero: bool = False) -> float:
    """Raise unless ``value`` is > 0 (or >= 0 with ``allow_zero``)."""
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name}: expected a value {bound}, got {value}")
    return value


def as_bool_mask(mask: Tensor, name: str, shape: Sequence[int] | None = None) -> Tensor:
    """Return ``mask`` as a bool tensor; accepts bool or 0/1 numeric masks (non-zero means valid)."""
    check_tensor(mask, name)
    if shape is not None:
        check_shape(mask, shape, name)
    if mask.dtype == torch.bool:
        return mask
    if mask.is_floating_point() or mask.is_complex():
        return mask != 0
    return mask.to(torch.bool)


def result_dtype(x: Tensor) -> torch.dtype:
    """The dtype a function returns for input ``x``: its own if floating, else torch's default float."""
    return x.dtype if x.is_floating_point() else torch.get_default_dtype()


def compute_dtype(x: Tensor) -> torch.dtype:
    """Internal dtype for token-level maths: float64 stays float64, everything else runs in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def as_group_ids(group_ids: object, n: int, name: str = "group_ids") -> Tensor:
    """Validate and return group ids as an int64 tensor of shape ``[n]`` (lists are accepted)."""
    if not isinstance(group_ids, Tensor):
        try:
            group_ids = torch.as_tensor(group_ids)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise ValueError(
                f"{name}: expected an integer tensor of shape ({n},), got {group_ids!r}"
            ) from exc
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError(f"{name}: expected an integer dtype, got {group_ids.dtype}")
    check_shape(group_ids, (n,), name)
    return group_ids.to(torch.int64)


def group_inverse(group_ids: Tensor) -> tuple[Tensor, int]:
    """Map arbitrary integer ids to dense indices ``0..G-1``; returns ``(inverse [n] int64, G)``.

    Ids need not be contiguous, sorted or adjacent; rows with the same id share an index.
    """
    uniques, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(uniques.numel())


def group_sum(values: Tensor, inverse: Tensor, num_groups: int) -> Tensor:
    """Sum ``values [n, ...]`` into ``[G, ...]`` by group index (``index_add_``, deterministic on CPU)."""
    out = values.new_zeros((num_groups, *values.shape[1:]))
    return out.index_add_(0, inverse, values)
