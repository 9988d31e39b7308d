"""The PyTorch-fallback rules over the ops a forward ran (decided in the parent).

The workers record which ATen compute ops ran and how much they read (`worker.optrace`); these
rules say what such a record means: which spellings are the same computation (`canonical_op`),
whether the candidate's own PyTorch ops did the reference's heavy work (`heavy_share`) or ran
every compute op the reference runs (`covers_reference`). `checks.check_no_pytorch_fallback`
applies them (A1 in docs/integrity.md).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

# Different spellings of the same heavy computation: a candidate that calls torch.mm where the
# reference runs addmm still falls back to PyTorch for the matmul. Read-only, and bound as a
# default argument (harness tables stay immutable wherever this module is loaded).
_OP_FAMILIES = MappingProxyType({
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
})


def canonical_op(name: str, _families: Any = _OP_FAMILIES) -> str:
    """Canonical form for comparing op sets: in-place ``relu_`` → ``relu``, ``mm`` → ``matmul``."""
    namespace, _, base = name.partition("::")
    if base.endswith("_") and not base.startswith("_"):
        base = base[:-1]
    full = f"{namespace}::{base}"
    return _families.get(full, full)


def heavy_share(candidate_work: tuple[int, int], reference_work: tuple[int, int],
                candidate_moved: tuple[int, int] = (0, 0), reference_moved: tuple[int, int] = (0, 0)) -> str | None:
    """Why the candidate's PyTorch ops did the reference's work, or None.

    ``work = (elements, flops)``, elements being what compute ops read. A fallback when the
    PyTorch ops read at least as many elements as the whole reference computation does, or at
    least half its matmul/convolution FLOPs: rewriting ``relu`` as ``where``/``mul``, a matmul as
    a broadcast multiply and sum, or keeping the GEMM in PyTorch and writing only the epilogue in Triton.

    A reference with no compute op at all only moves data (``x.transpose(1, 2).contiguous()``, a
    cast): its work is the elements its copies wrote in a new layout and in a new dtype
    (``moved = (layout, dtype)``, `optrace.op_moves`), and the candidate's copies of the kinds the
    reference makes, plus whatever its compute ops read (a transpose spelled with ``cat`` or
    ``gather``), must stay below it. Kind by kind: an honest transpose that upcasts in PyTorch
    first moves no layout. Without this rule a PyTorch fallback of a transpose got full reward
    (found on an H100, reproduced on the CPU).
    """
    elements, flops = candidate_work
    ref_elements, ref_flops = reference_work
    if ref_flops > 0 and flops >= 0.5 * ref_flops:
        return f"{flops:.3g} of the reference's {ref_flops:.3g} matmul/convolution FLOPs ran in PyTorch"
    if ref_elements > 0 and elements >= ref_elements:
        return (f"PyTorch compute ops read {elements} elements, as many as the reference's whole "
                f"computation ({ref_elements})")
    kinds = [kind for kind in (0, 1) if reference_moved[kind] > 0]
    if ref_elements == 0 and ref_flops == 0 and kinds:
        reference_total = sum(reference_moved[kind] for kind in kinds)
        candidate_total = elements + sum(candidate_moved[kind] for kind in kinds)
        if candidate_total >= reference_total:
            what = " and ".join(("a new layout", "a new dtype")[kind] for kind in kinds)
            return (f"the reference only moves data ({reference_total} elements copied into {what}) and PyTorch "
                    f"ops moved or read as many ({candidate_total})")
    return None


def covers_reference(candidate_ops: list[str], reference_ops: list[str]) -> bool:
    """True when the candidate ran every compute op of the reference (a PyTorch fallback)."""
    reference = {canonical_op(op) for op in reference_ops}
    if not reference:
        return False
    return reference <= {canonical_op(op) for op in candidate_ops}
