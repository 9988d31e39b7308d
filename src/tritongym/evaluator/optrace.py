"""Trace the ATen operators a forward runs, and tell compute from bookkeeping.

Both workers use it: the reference worker to learn which compute ops the task needs, the
candidate worker to record which ones the candidate's forward ran *outside* its Triton kernels
(the launch hook suspends tracing while a kernel runs, because the Triton interpreter itself
calls ATen). A `TorchDispatchMode` sees every dispatched op, including Tensor methods, operators
such as ``@`` and ``+`` and calls through ``torch.ops.aten``, which static checks cannot.

Defends against: PyTorch fallback (A1 in docs/integrity.md), try/except fallbacks (A2).
Residual risk: work done outside ATen (numpy on host copies, custom C++ extensions) is
invisible here; the Triton launch and provenance checks and the static gate cover those.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

#: Ops that allocate, fill, copy, reshape or inspect: never "compute" (names without overload).
NON_COMPUTE_OPS = frozenset(
    "aten::" + name
    for name in (
        # allocation and fills of fresh buffers
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
        "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like",
        "new_full", "fill", "fill_", "zero", "zero_", "scalar_tensor", "resize_", "resize_as_",
        # factories that fill with random values or index patterns
        "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "normal",
        "normal_", "uniform", "uniform_", "bernoulli", "bernoulli_", "arange", "linspace", "logspace", "eye",
        # plain copies and device/dtype moves of whole tensors
        "copy", "copy_", "clone", "contiguous", "_to_copy", "to", "detach", "detach_", "lift_fresh",
        "lift_fresh_copy", "alias", "set_", "_copy_from", "_copy_from_and_resize",
        # metadata queries
        "size", "stride", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "numel",
        "dim", "is_contiguous", "is_same_size", "_local_scalar_dense", "item", "equal",
        "is_nonzero", "record_stream",
    )
)

# Different spellings of the same heavy computation: a candidate that calls torch.mm where the
# reference runs addmm still falls back to PyTorch for the matmul.
_OP_FAMILIES = {
    **{f"aten::{n}": "aten::matmul" for n in (
        "mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "linear", "mv", "addmv", "dot",
        "vdot", "einsum", "_addmm_activation", "tensordot", "inner", "outer", "ger",
    )},
    **{f"aten::{n}": "aten::convolution" for n in (
        "convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
        "conv_transpose2d", "conv_transpose3d", "cudnn_convolution", "cudnn_convolution_transpose",
        "mkldnn_convolution", "_slow_conv2d_forward", "slow_conv3d_forward",
        "slow_conv_transpose2d", "slow_conv_transpose3d", "convolution_overrideable",
        "_nnpack_spatial_convolution", "conv_depthwise3d", "_conv_depthwise2d",
    )},
}


def op_name(func: Any) -> str:
    """``namespace::name`` of an ATen overload, without the overload (``aten::add``)."""
    packet = getattr(func, "overloadpacket", None)
    namespace = getattr(func, "namespace", "aten")
    name = getattr(packet, "__name__", None) or str(func)
    return f"{namespace}::{name}"


def canonical_op(name: str) -> str:
    """Canonical form for comparing op sets: in-place ``relu_`` → ``relu``, ``mm`` → ``matmul``."""
    namespace, _, base = name.partition("::")
    if base.endswith("_") and not base.startswith("_"):
        base = base[:-1]
    full = f"{namespace}::{base}"
    return _OP_FAMILIES.get(full, full)


def is_compute(func: Any) -> bool:
    """Whether an ATen overload does arithmetic (not a view, allocation, copy or query)."""
    if getattr(func, "is_view", False):
        return False
    name = op_name(func)
    if name in NON_COMPUTE_OPS:
        return False
    return not name.startswith("prim::")


def _flop_registry() -> dict[Any, Any]:
    try:
        from torch.utils.flop_counter import flop_registry
    except ImportError:  # pragma: no cover - older torch
        return {}
    return dict(flop_registry)


#: FLOP formulas of matmul, convolution and attention ops, from torch's own flop counter.
_FLOPS = _flop_registry()


def _output_elements(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (list, tuple)):
        return sum(_output_elements(v) for v in value)
    return 0


class OpTrace(TorchDispatchMode):
    """Counts every dispatched op while active; `compute_ops()` lists the arithmetic ones.

    It also measures how much work those compute ops did: `compute_elements`, the elements
    their outputs hold, and `compute_flops`, the FLOPs of matmul/convolution/attention ops by
    torch's flop counter formulas. The parent compares both with the reference's.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch otherwise wraps __torch_dispatch__ in torch._disable_dynamo, whose first call
        # imports torch._dynamo: about 2 s in every worker. Nothing traced here is compiled.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.compute: dict[str, None] = {}
        self.compute_elements = 0
        self.compute_flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001 - torch's protocol
        kwargs = kwargs or {}
        name = op_name(func)
        self.counts[name] += 1
        out = func(*args, **kwargs)
        if is_compute(func):
            self.compute.setdefault(name, None)
            self.compute_elements += _output_elements(out)
            formula = _FLOPS.get(getattr(func, "overloadpacket", None))
            if formula is not None:
                try:
                    self.compute_flops += int(formula(*args, **kwargs, out_val=out))
                except Exception:  # noqa: BLE001 - a formula that does not fit counts nothing
                    pass
        return out

    def compute_ops(self) -> list[str]:
        """Compute ops in order of first use, each once (``aten::addmm``, ...)."""
        return list(self.compute)


@contextmanager
def untraced() -> Iterator[None]:
    """Suspend every active dispatch mode (used around Triton launches and harness work)."""
    with _disable_current_modes():
        yield


def heavy_share(candidate_work: tuple[int, int], reference_work: tuple[int, int]) -> str | None:
    """Why the candidate's PyTorch ops did the reference's work, or None.

    ``work = (elements, flops)``. A fallback when the PyTorch ops produced at least as many
    elements as the whole reference computation does, or at least half its matmul/convolution
    FLOPs: rewriting ``relu`` as ``where``/``mul``, a matmul as a broadcast multiply and sum, or
    keeping the GEMM in PyTorch and writing only the epilogue in Triton.
    """
    elements, flops = candidate_work
    ref_elements, ref_flops = reference_work
    if ref_flops > 0 and flops >= 0.5 * ref_flops:
        return f"{flops:.3g} of the reference's {ref_flops:.3g} matmul/convolution FLOPs ran in PyTorch"
    if ref_elements > 0 and elements >= ref_elements:
        return (f"PyTorch compute ops produced {elements} elements, as many as the reference's whole "
                f"computation ({ref_elements})")
    return None


def covers_reference(candidate_ops: list[str], reference_ops: list[str]) -> bool:
    """True when the candidate ran every compute op of the reference (a PyTorch fallback)."""
    reference = {canonical_op(op) for op in reference_ops}
    if not reference:
        return False
    return reference <= {canonical_op(op) for op in candidate_ops}


def storage_span(tensor: torch.Tensor) -> tuple[int, int]:
    """``(start, end)`` byte addresses of a tensor's whole storage (class-level calls only)."""
    storage = torch.Tensor.untyped_storage(tensor)
    start = storage.data_ptr()
    return start, start + storage.nbytes()
