"""Cheaper type bookkeeping for Triton's CPU interpreter: the same objects, built from a table.

Under ``TRITON_INTERPRET=1`` every operation of every program runs Triton's frontend in Python:
``x + 1`` type-checks its operands, builds a ``block_type`` for the splat, a ``tensor`` for each
result, and each of those builds ``tl.tuple`` shapes (a tuple type per tuple, a ``constexpr`` per
dimension, a string name). The numpy work is small next to that: in a py-spy profile of the
built-in solutions' forwards (every other speed fix installed), ``block_type.__init__`` was 19 %,
``tensor.__init__`` 12 % and ``broadcast_impl_value`` 35 % (inclusive) of interpreted time, most of
it spent recomputing what depends on the shape alone.

Four changes, none of which changes a value or a type the interpreter computes:

* `_block_type_fields`: a ``block_type`` of a shape seen before gets its shape-derived fields
  (the tuple type, ``numel``, the shape's text in ``name``) from a table keyed by the shape's
  integers, instead of unwrapping, validating and formatting the shape again. The element type is
  the caller's, and ``name`` is formatted with it exactly as Triton formats it.
* `_tensor_fields`: a ``tensor`` of a shape seen before gets ``numel`` and its ``constexpr``
  dimensions from the table (the dimensions are the same immutable ``constexpr`` objects; each
  tensor gets its own ``tl.tuple`` and list around them).
* `_int_shape_broadcasts`: ``broadcast_impl_value`` compares and combines the operands' shapes as
  ints. Two blocks of one shape, or two scalars, are returned unchanged, which is what Triton's
  does after comparing the shapes through ``tl.tuple.__eq__`` (a ``tl.tuple`` built per
  comparison); two blocks of one rank get Triton's result shape, types and ``create_broadcast``
  calls, in Triton's order; a scalar next to a block is splat with Triton's calls, except that
  ``create_splat`` receives the block type itself rather than the copy ``to_ir`` builds through
  ``get_block_ty`` (it reads only the shape), and only while the builder's ``create_splat`` and
  ``get_block_ty`` are the interpreter's own. Operands of different ranks and incompatible shapes
  take Triton's path (and its ``ValueError``). 1.13x faster forwards on top of the two tables (one
  forward of each built-in solution 1161 ms → 1029 ms, `benchmarks/interpreter_speedups.py`).
* `_same_type_operands`: ``binary_op_type_checking_impl`` of two ``tensor``s of one element type
  among fp32, fp64, int32 and int64 goes straight to the broadcast: for those, Triton's pointer
  checks pass, its computation type is that type and both casts return their operands
  (`SAME_TYPE_NAMES` says why the other types are left out). Scalars (Python numbers), pointers
  and mixed types take Triton's path. 1.05x faster forwards on top of the other three (one forward
  of each built-in solution 1029 ms → 980 ms).

Anything else (shapes holding ``constexpr`` objects or non-``int`` values, the first shape of its
kind, a shape Triton rejects) goes through Triton's own code; a rejected shape is never tabled, so
it raises Triton's error every time. Every object a table hands out is either immutable in use
(``int``, ``str``, ``constexpr``) or new per call (each ``tl.tuple``, its list, its tuple type), so
no two tensors or types share state they could change. Tables are capped (`TABLE_LIMIT` shapes);
past the cap new shapes take Triton's path. Measured by ``benchmarks/interpreter_speedups.py``;
tested for identical fields and outputs in ``tests/unit/evaluator/test_interpreter_types.py``.
Installed by `interpreter_fixes.install_speedups`, on the CPU tier only (a GPU compiles its kernels;
the tables would build the same objects there, but nothing there was measured or tested).
"""

from __future__ import annotations

import builtins
from typing import Any

#: Shapes remembered per table (a kernel uses a handful; past this, Triton's own path runs).
TABLE_LIMIT = 4096


def _int_dims(shape: Any, tl_tuple: type) -> builtins.tuple[int, ...] | None:
    """`shape`'s dimensions as a key when they are plain ints in a list or ``tl.tuple``, else None.

    Only ``list`` and ``tl.tuple`` qualify: Triton's ``block_type`` asserts
    ``isinstance(shape, (list, tuple))`` where ``tuple`` is ``tl.tuple``, so a builtin tuple must
    keep reaching that assertion.
    """
    kind = type(shape)
    values = shape.values if kind is tl_tuple else shape if kind is list else None
    if type(values) is not list or not values:
        return None
    key = builtins.tuple(values)
    for dim in key:
        if type(dim) is not int:
            return None
    return key


def _new_tuple(tl: Any, values: list[Any], types: list[Any], fields: Any) -> Any:
    """A ``tl.tuple`` of `values` with a fresh tuple type of `types`: what ``tl.tuple(values)``
    builds, without recomputing the element types."""
    shape = tl.tuple.__new__(tl.tuple)
    shape.values = values
    shape.type = tl.tuple_type(list(types), list(fields) if type(fields) is list else fields)  # 3.6: a list
    return shape


def _block_type_fields() -> None:
    from triton.language import core as tl

    original = tl.block_type.__init__
    if getattr(original, "_tritongym_table", False):
        return
    table: dict[builtins.tuple[int, ...], builtins.tuple[list[Any], Any, int, str]] = {}

    def __init__(self: Any, element_ty: Any, shape: Any) -> None:
        key = _int_dims(shape, tl.tuple)
        found = table.get(key) if key is not None else None
        if found is None:
            original(self, element_ty, shape)
            if key is not None and len(table) < TABLE_LIMIT:
                made = self.shape
                table[key] = (list(made.type.types), made.type.fields, self.numel, str(made))
            return
        types, fields, numel, text = found
        self.element_ty = element_ty
        self.shape = _new_tuple(tl, list(key), types, fields)
        self.numel = numel
        self.name = f'<{text}, {element_ty}>'  # Triton's format, with the shape's text tabled

    __init__._tritongym_table = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    tl.block_type.__init__ = __init__


def _tensor_fields() -> None:
    from triton.language import core as tl

    original = tl.tensor.__init__
    if getattr(original, "_tritongym_table", False):
        return
    table: dict[builtins.tuple[int, ...], builtins.tuple[Any, list[Any], list[Any], Any]] = {}

    def __init__(self: Any, handle: Any, type: Any) -> None:  # noqa: A002 (Triton's parameter name)
        key = _int_dims(getattr(type, "shape", None), tl.tuple) if type.is_block() else ()
        found = table.get(key) if key is not None else None
        if found is None:
            original(self, handle, type)
            if key is not None and len(table) < TABLE_LIMIT:
                made = self.shape
                table[key] = (self.numel, list(made.values), list(made.type.types), made.type.fields)
            return
        numel, dims, types, fields = found
        # Attributes in Triton's order (it assigns ``shape`` first, then rebinds it).
        self.handle = handle
        self.shape = _new_tuple(tl, list(dims), types, fields)
        self.numel = numel
        self.type = type
        self.dtype = type.scalar

    __init__._tritongym_table = True  # type: ignore[attr-defined]
    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    tl.tensor.__init__ = __init__


def _int_shape_broadcasts() -> None:
    from triton.language import core as tl
    from triton.language import semantic
    from triton.runtime import interpreter

    owner = getattr(semantic, "TritonSemantic", None)
    original = getattr(owner, "broadcast_impl_value", None)
    builder_class = getattr(interpreter, "InterpreterBuilder", None)
    if original is None or builder_class is None or getattr(original, "_tritongym_table", False):
        return
    # Triton >= 3.7 wraps results with ``make_tensor``; 3.6 calls ``tensor`` directly.
    make_name = "make_tensor" if hasattr(owner, "make_tensor") else "tensor"
    # The splat shortcut hands ``create_splat`` the block type itself instead of the copy
    # ``to_ir`` builds through ``get_block_ty``; that is the same input only while both are these.
    splat, block_ty = builder_class.create_splat, builder_class.get_block_ty

    def broadcast_impl_value(self: Any, lhs: Any, rhs: Any) -> Any:
        lhs_ty, rhs_ty = lhs.type, rhs.type
        lhs_block, rhs_block = lhs_ty.is_block(), rhs_ty.is_block()
        if not lhs_block and not rhs_block:
            return lhs, rhs  # Triton's scalar-scalar case
        builder = self.builder
        if lhs_block and rhs_block:
            lhs_dims = _int_dims(lhs_ty.shape, tl.tuple)
            rhs_dims = _int_dims(rhs_ty.shape, tl.tuple)
            if lhs_dims is None or rhs_dims is None or len(lhs_dims) != len(rhs_dims):
                return original(self, lhs, rhs)  # other ranks: Triton adds the leading axes
            if lhs_dims == rhs_dims:
                return lhs, rhs  # one shape: Triton's loop finds nothing to broadcast
            ret_shape = []
            for left, right in zip(lhs_dims, rhs_dims, strict=True):
                if left == 1:
                    ret_shape.append(right)
                elif right == 1 or right == left:
                    ret_shape.append(left)
                else:
                    return original(self, lhs, rhs)  # raises Triton's ValueError
            # Triton compares ``tl.tuple`` shapes with the list (a ``tl.tuple`` built per
            # comparison); the same ints compared as a builtin tuple give the same answer.
            ret_dims = builtins.tuple(ret_shape)
            make = getattr(self, make_name)
            if lhs_dims != ret_dims:
                ret_ty = tl.block_type(lhs_ty.scalar, ret_shape)
                lhs = make(builder.create_broadcast(lhs.handle, ret_shape), ret_ty)
            if rhs_dims != ret_dims:
                ret_ty = tl.block_type(rhs_ty.scalar, ret_shape)
                rhs = make(builder.create_broadcast(rhs.handle, ret_shape), ret_ty)
            return lhs, rhs
        kind = type(builder)
        if kind is not builder_class or kind.create_splat is not splat or kind.get_block_ty is not block_ty:
            return original(self, lhs, rhs)
        make = getattr(self, make_name)
        if lhs_block:  # block, scalar: the scalar is splat to the block's shape
            rhs_ty = lhs_ty.with_element_ty(rhs_ty.scalar)
            rhs_ty.element_ty.to_ir(builder)  # what ``to_ir`` would raise for an element type
            rhs = make(builder.create_splat(rhs_ty, rhs.handle), rhs_ty)
        else:
            lhs_ty = rhs_ty.with_element_ty(lhs_ty.scalar)
            lhs_ty.element_ty.to_ir(builder)
            lhs = make(builder.create_splat(lhs_ty, lhs.handle), lhs_ty)
        return lhs, rhs

    broadcast_impl_value._tritongym_table = True  # type: ignore[attr-defined]
    broadcast_impl_value.__wrapped__ = original  # type: ignore[attr-defined]
    owner.broadcast_impl_value = broadcast_impl_value


#: Element types for which Triton's implicit typecasting of two tensors of that one type is the
#: identity: ``computation_type_impl`` returns the type itself (fp64; fp32; integer promotion of
#: equal ranks and signedness) for any ``div_or_mod``, and ``cast`` to an equal type returns its
#: input. (Not fp16/bf16/fp8: a division casts those to fp32.)
SAME_TYPE_NAMES = frozenset({"fp32", "fp64", "int32", "int64"})


def _same_type_operands() -> None:
    from triton.language import core as tl
    from triton.language import semantic

    owner = getattr(semantic, "TritonSemantic", None)
    original = getattr(owner, "binary_op_type_checking_impl", None)
    if original is None or getattr(original, "_tritongym_table", False):
        return
    tensor, dtype = tl.tensor, tl.dtype

    def binary_op_type_checking_impl(self: Any, lhs: Any, rhs: Any, allow_lhs_ptr: bool = False,
                                     allow_rhs_ptr: bool = False, arithmetic_check: bool = True,
                                     div_or_mod: bool = False) -> Any:
        if type(lhs) is tensor and type(rhs) is tensor:
            lhs_ty, rhs_ty = lhs.dtype, rhs.dtype
            if (type(lhs_ty) is dtype and type(rhs_ty) is dtype and lhs_ty.name == rhs_ty.name
                    and lhs_ty.name in SAME_TYPE_NAMES):
                # Triton's pointer checks pass (no pointer), the computation type is this type and
                # both casts return their input: only the broadcast is left.
                return self.broadcast_impl_value(lhs, rhs)
        return original(self, lhs, rhs, allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)

    binary_op_type_checking_impl._tritongym_table = True  # type: ignore[attr-defined]
    binary_op_type_checking_impl.__wrapped__ = original  # type: ignore[attr-defined]
    owner.binary_op_type_checking_impl = binary_op_type_checking_impl


def install() -> None:
    """Install the four changes (idempotent; a Triton without these classes is left as it is)."""
    from triton.language import core as tl

    if not all(hasattr(tl, name) for name in ("block_type", "tensor", "tuple", "tuple_type")):
        return
    _block_type_fields()
    _tensor_fields()
    _int_shape_broadcasts()
    _same_type_operands()
