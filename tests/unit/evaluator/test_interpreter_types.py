"""`interpreter_types`: Triton's type objects from a table, field for field what Triton builds.

Each scenario runs in a fresh interpreter (the module patches Triton's classes, which must not
leak into the test process). The originals stay reachable as ``__wrapped__``, so each check
builds the same object both ways in one process and compares every field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

PRELUDE = textwrap.dedent('''
    import json, sys
    import numpy as np
    import triton.language as tl
    from triton.language import core
    from triton.runtime import interpreter
    from tritongym.evaluator.worker import interpreter_types

    def fields(value):
        """Every attribute, in order, with tl.tuple shapes spelled out (values, types, fields)."""
        out = []
        for name, item in vars(value).items():
            if isinstance(item, core.tuple):
                item = ["tl.tuple", [getattr(v, "value", v) for v in item.values],
                        [str(t) for t in item.type.types], item.type.fields]
            elif isinstance(item, core.constexpr):
                item = ["constexpr", item.value]
            elif isinstance(item, (int, str)):
                pass
            else:
                item = [type(item).__name__, str(item), id(item)]
            out.append([name, item])
        return out

    NUMPY_OF = {"fp64": np.float64, "fp32": np.float32, "fp16": np.float16, "int64": np.int64, "int32": np.int32,
                "uint32": np.uint32, "int8": np.int8, "int1": np.bool_}

    def value(shape, dtype=tl.float32, modulus=7, offset=0):
        """A tl.tensor of `shape` (a scalar for []) holding small values; a Python number as it is."""
        if not isinstance(dtype, core.dtype):
            return dtype
        np_dtype = np.uint64 if dtype.is_ptr() else NUMPY_OF[dtype.name]
        data = (np.arange(int(np.prod(shape or [1]))) % modulus + offset).astype(np_dtype).reshape(shape or ())
        kind = core.block_type(dtype, shape) if shape else dtype
        return core.tensor(interpreter.TensorHandle(data, dtype), kind)

    def outcome(build):
        try:
            return ["ok", fields(build())]
        except Exception as exc:
            return ["raised", type(exc).__name__, str(exc)]
''')


def run(script: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(script)], capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_block_types_from_the_table_have_tritons_fields_and_errors():
    report = run('''
        interpreter_types.install()
        table_init = core.block_type.__init__
        triton_init = table_init.__wrapped__
        def build(init, element, shape):
            block = core.block_type.__new__(core.block_type)
            init(block, element, shape)
            return block
        elements = [tl.float32, tl.bfloat16, tl.int1, tl.int64, tl.pointer_type(tl.float16),
                    tl.pointer_type(tl.int8, const=True)]
        shapes = [lambda: [4], lambda: [2, 8], lambda: [1, 16, 1], lambda: core.tuple([32, 4]),
                  lambda: [tl.constexpr(8), 2], lambda: [3], lambda: [], lambda: (2, 8), lambda: [True, 2],
                  lambda: [2 ** 21]]
        cases = []
        for element in elements:
            for shape in shapes:
                # Triton's twice, then the table's twice (the first fills it, the second reads it).
                inits = (triton_init, triton_init, table_init, table_init)
                got = [outcome(lambda: build(init, element, shape())) for init in inits]
                cases.append([str(element), str(shape()) if not isinstance(shape(), core.tuple) else "tl.tuple", got])
        # Each block from the table owns its shape: changing one leaves the next one alone.
        first = core.block_type(tl.float32, [2, 8])
        first.shape._setitem(0, 64)
        second = core.block_type(tl.float32, [2, 8])
        print(json.dumps({"cases": cases, "second": [second.shape.values, second.name, second.numel],
                          "installed": table_init is not triton_init}))
    ''')
    assert report["installed"]
    for element, shape, (triton_a, triton_b, table_a, table_b) in report["cases"]:
        # Everything equal, the element type by identity (the caller's object, as Triton keeps it).
        assert triton_a == triton_b == table_a == table_b, (element, shape, triton_a, table_b)
        if triton_a[0] == "ok":
            assert [name for name, _ in table_b[1]] == ["element_ty", "shape", "numel", "name"]
    outcomes = {(e, s): c[0][0] for e, s, c in report["cases"]}
    assert outcomes[("fp32", "[2, 8]")] == "ok" and outcomes[("fp32", "tl.tuple")] == "ok"
    # Triton's own errors, every time: a 0-d shape, a non-power-of-two, a builtin tuple (of a shape
    # the table holds), too many elements.
    assert {outcomes[("fp32", s)] for s in ("[]", "[3]", "(2, 8)", "[2097152]")} == {"raised"}
    assert report["second"] == [[2, 8], "<['2', '8'], fp32>", 16]


def test_tensors_from_the_table_have_tritons_fields():
    report = run('''
        interpreter_types.install()
        table_init = core.tensor.__init__
        triton_init = table_init.__wrapped__
        handle = interpreter.TensorHandle(np.zeros((2, 8), np.float32), tl.float32)
        types = [core.block_type(tl.float32, [2, 8]), core.block_type(tl.pointer_type(tl.int32), [4, 1, 16]),
                 tl.float32, tl.pointer_type(tl.float16), core.block_type(tl.int1, [128])]
        cases = []
        for kind in types:
            got = []
            for init in (triton_init, table_init, table_init):
                value = core.tensor.__new__(core.tensor)
                init(value, handle, kind)
                got.append(fields(value))
            cases.append([str(kind), got])
        a = core.tensor(handle, types[0])
        b = core.tensor(handle, types[0])
        a.shape._setitem(0, tl.constexpr(64))
        print(json.dumps({"cases": cases, "b": [v.value for v in b.shape.values],
                          "c": [v.value for v in core.tensor(handle, types[0]).shape.values]}))
    ''')
    for kind, (triton, table_first, table_again) in report["cases"]:
        assert triton == table_first == table_again, kind
        assert [name for name, _ in triton] == ["handle", "shape", "numel", "type", "dtype"]
    assert report["b"] == report["c"] == [2, 8]


def test_broadcasts_return_what_triton_returns():
    """Same shapes, same-rank broadcasts, splats (several element types) and the paths left to
    Triton (other ranks, incompatible shapes): operands, types, data and errors as Triton's."""
    report = run('''
        interpreter_types.install()
        semantic = interpreter.interpreter_semantic
        table = type(semantic).broadcast_impl_value
        triton = table.__wrapped__
        def result(impl, lhs, rhs):
            try:
                a, b = impl(semantic, lhs, rhs)
            except Exception as exc:
                return [type(exc).__name__, str(exc)]
            return [a is lhs, b is rhs, fields(a.type), fields(b.type), str(a.handle.data.dtype),
                    a.handle.data.tolist(), str(b.handle.data.dtype), b.handle.data.tolist(),
                    a.handle.dtype is lhs.handle.dtype.scalar, b.handle.dtype is rhs.handle.dtype.scalar]
        f32, f16, i32, i1, ptr = tl.float32, tl.float16, tl.int32, tl.int1, tl.pointer_type(tl.float32)
        pairs = [([2, 8], f32, [2, 8], f32), ([], f32, [], i32), ([2, 8], f32, [], f32), ([], f32, [4], f32),
                 ([2, 1], f32, [1, 8], f32), ([8], f32, [2, 8], f32), ([2, 8], f32, [8], f32),
                 ([4, 1, 16], f32, [4, 1, 16], f32), ([2, 8], f32, [2, 1], f32), ([1, 1], i32, [4, 8], i32),
                 ([4, 1, 8], f16, [1, 2, 1], f16), ([1], f32, [16], f32), ([16], i1, [1], i1),
                 ([4, 1], f32, [4, 1], f32), ([], ptr, [4, 8], i32), ([4, 8], i32, [], ptr),
                 ([4, 1], ptr, [1, 8], i32), ([2, 8], f16, [], f32), ([], i1, [2, 2], i1),
                 ([2, 8], f32, [4, 8], f32), ([2, 2], i32, [2, 4], i32), ([4, 8], f32, [2, 4, 8], f32),
                 # Different ranks, compatible: a [N] row against an [N, N] tile on either side (square,
                 # so a row broadcast along the wrong axis still fits and only the values tell), a [1],
                 # and a row under two new axes.
                 ([4], f32, [4, 4], f32), ([4, 4], f32, [4], f32), ([1], f32, [4, 4], f32),
                 ([4], i32, [2, 4, 4], i32), ([4, 4], f16, [4], f16)]
        cases = []
        for left, left_ty, right, right_ty in pairs:
            lhs, rhs = value(left, left_ty), value(right, right_ty)
            cases.append([left, right, result(triton, lhs, rhs), result(table, lhs, rhs)])
        # A builder whose create_splat is not Triton's gets Triton's whole path (to_ir included).
        seen = []
        to_ir = core.block_type.to_ir
        core.block_type.to_ir = lambda self, builder: (seen.append(1), to_ir(self, builder))[1]
        splat = interpreter.InterpreterBuilder.create_splat
        interpreter.InterpreterBuilder.create_splat = lambda self, ty, arg: splat(self, ty, arg)
        replaced = result(table, value([2, 8]), value([]))
        interpreter.InterpreterBuilder.create_splat = splat
        kept = result(table, value([2, 8]), value([]))
        print(json.dumps({"cases": cases, "to_ir": [len(seen), replaced == kept]}))
    ''')
    for left, right, triton, table in report["cases"]:
        assert triton == table, (left, right)
    same = {(tuple(left), tuple(right)): t for left, right, t, _ in report["cases"]}
    assert same[((2, 8), (2, 8))][:2] == [True, True]  # Triton returns the operands themselves
    assert same[((2, 1), (1, 8))][:2] == [False, False]
    assert same[((2, 1), (1, 8))][5] == [[0.0] * 8, [1.0] * 8]
    assert same[((2, 8), ())][:2] == [True, False] and same[((), (4,))][:2] == [False, True]
    assert same[((), (4, 8))][4] == "uint64"  # a pointer splat to the offsets' shape
    assert same[((2, 8), (4, 8))][0] == "ValueError" and same[((2, 2), (2, 4))][0] == "ValueError"
    # A [4] row (values 0..3) broadcast against a [4, 4] tile repeats along the rows, as numpy would.
    assert same[((4,), (4, 4))][5] == [[0.0, 1.0, 2.0, 3.0]] * 4
    assert same[((4, 4), (4,))][7] == [[0.0, 1.0, 2.0, 3.0]] * 4
    assert report["to_ir"] == [1, True]



BIAS_KERNELS = '''
import triton
import triton.language as tl


@triton.jit
def add_bias(x_ptr, bias_ptr, out_ptr, N: tl.constexpr):
    rows = tl.arange(0, N)[:, None]
    cols = tl.arange(0, N)[None, :]
    tile = tl.load(x_ptr + rows * N + cols)          # [N, N]
    bias = tl.load(bias_ptr + tl.arange(0, N))       # [N]: one rank less than the tile
    tl.store(out_ptr + rows * N + cols, tile + bias)
    tl.store(out_ptr + N * N + rows * N + cols, bias * tile - bias)
'''


def test_a_row_bias_added_to_a_square_tile_gives_tritons_result(tmp_path):
    """A kernel adds an [N] bias to an [N, N] tile (operands of different ranks, compatible shapes,
    the bias on either side): with the tables its output is Triton's own, bit for bit, and the
    row broadcast torch computes (a bias broadcast along the wrong axis would still fit the square
    tile, so only the values can tell)."""
    kernels = tmp_path / "bias_kernels.py"
    kernels.write_text(BIAS_KERNELS, encoding="utf-8")
    report = run(f'''
        import torch
        from triton.language import semantic as semantic_module
        from tritongym.evaluator.worker.startup import load_module
        module = load_module({str(kernels)!r}, "bias_kernels")
        interpreter_types.install()
        owner = semantic_module.TritonSemantic
        tables = (core.block_type.__init__, core.tensor.__init__, owner.broadcast_impl_value,
                  owner.binary_op_type_checking_impl)
        originals = tuple(f.__wrapped__ for f in tables)
        def use(functions):
            (core.block_type.__init__, core.tensor.__init__, owner.broadcast_impl_value,
             owner.binary_op_type_checking_impl) = functions
        torch.manual_seed(0)
        out = {{}}
        for n in (4, 16):
            x, bias = torch.randn(n, n), torch.randn(n)
            expected = torch.cat([(x + bias).reshape(-1), (bias * x - bias).reshape(-1)])
            got = []
            for name, functions in (("triton", originals), ("tables", tables), ("tables again", tables)):
                use(functions)
                result = torch.empty(2 * n * n)
                module.add_bias[(1,)](x, bias, result, N=n)
                got.append(result)
            out[n] = {{"same": [torch.equal(got[0].view(torch.int32), g.view(torch.int32)) for g in got[1:]],
                      "torch": torch.allclose(got[0], expected, rtol=0, atol=1e-6),
                      "tables_installed": tables[2] is not originals[2]}}
        print(json.dumps(out))
    ''')
    for n, outcome in report.items():
        assert outcome["tables_installed"], n
        assert outcome["torch"], f"Triton's own result for N={n} is not the row broadcast"
        assert outcome["same"] == [True, True], f"the tables' result for N={n} differs from Triton's"


def test_same_type_operands_return_what_triton_returns():
    """Two tensors of one of the four types go straight to the broadcast; everything else (scalars,
    pointers, mixed or narrow types, each flag) gives what Triton's type checking gives."""
    report = run('''
        interpreter_types.install()
        semantic = interpreter.interpreter_semantic
        fast = type(semantic).binary_op_type_checking_impl
        triton = fast.__wrapped__
        def result(impl, lhs, rhs, flags):
            try:
                a, b = impl(semantic, lhs, rhs, *flags)
            except Exception as exc:
                return [type(exc).__name__, str(exc)]
            return [a is lhs, b is rhs, fields(a.type), fields(b.type), str(a.handle.data.dtype),
                    a.handle.data.tolist(), str(b.handle.data.dtype), b.handle.data.tolist()]
        f64, f32, f16, i64, i32, u32, i8 = (tl.float64, tl.float32, tl.float16, tl.int64, tl.int32,
                                            tl.uint32, tl.int8)
        ptr = tl.pointer_type(tl.float32)
        operands = [(f32, f32), (f64, f64), (i32, i32), (i64, i64), (f16, f16), (u32, u32), (i8, i8),
                    (f32, f16), (i32, i64), (f32, i32), (ptr, i32), (i32, ptr), (ptr, ptr), (f32, 2),
                    (3, i32), (f16, 1.5), (u32, -1)]
        shapes = [([2, 8], [2, 8]), ([2, 8], []), ([], [4]), ([2, 1], [1, 8]), ([], [])]
        flags = [(), (True, True), (False, False, True, True), (False, False, False, True),
                 (True, False), (False, False, True, False)]
        cases = []
        for left_ty, right_ty in operands:
            for left, right in shapes:
                for flag in flags:
                    lhs, rhs = value(left, left_ty, 5, 1), value(right, right_ty, 5, 1)
                    want, got = result(triton, lhs, rhs, flag), result(fast, lhs, rhs, flag)
                    cases.append([str(left_ty), str(right_ty), left, right, list(flag), want == got])
        counted = []
        computation = type(semantic).computation_type_impl
        type(semantic).computation_type_impl = lambda *a: (counted.append(a[1].name), computation(*a))[1]
        for left_ty, right_ty in operands[:5]:
            fast(semantic, value([2, 8], left_ty, 5, 1), value([2, 8], right_ty, 5, 1))
        print(json.dumps({"cases": cases, "computed": counted}))
    ''')
    assert report["computed"] == ["fp16"]  # fp32, fp64, int32, int64 skip Triton's type computation
    different = [case for case in report["cases"] if not case[-1]]
    assert not different, different
    assert len(report["cases"]) == 17 * 5 * 6


def test_the_builtin_solutions_are_bit_identical_with_and_without_the_tables():
    """Every built-in solution's forward, with the tables and with Triton's originals, alternating."""
    report = run(f'''
        import torch
        from tritongym.evaluator.worker.startup import load_module as load
        from pathlib import Path
        from triton.language import semantic as semantic_module
        from tritongym.evaluator.worker import interpreter_fixes
        interpreter_fixes.install()
        owner = semantic_module.TritonSemantic
        tables = (core.block_type.__init__, core.tensor.__init__, owner.broadcast_impl_value,
                  owner.binary_op_type_checking_impl)
        originals = tuple(f.__wrapped__ for f in tables)
        def use(functions):
            (core.block_type.__init__, core.tensor.__init__, owner.broadcast_impl_value,
             owner.binary_op_type_checking_impl) = functions
        root = Path({str(ROOT)!r})
        same = {{}}
        for path in sorted((root / "examples" / "builtin").glob("[0-9]*.py")):
            problem = load(str(root / "src" / "tritongym" / "tasks" / "builtin" / path.name), "p_" + path.stem)
            solution = load(str(path), "s_" + path.stem)
            torch.manual_seed(0)
            model = solution.ModelNew(*problem.get_init_inputs())
            inputs = problem.get_inputs()
            outputs = []
            for functions in (originals, tables, tables):
                use(functions)
                out = model(*inputs)
                outputs.append(out.reshape(-1).contiguous().view(torch.uint8))
            same[path.stem] = all(torch.equal(outputs[0], o) for o in outputs[1:])
        again = (interpreter_types.install(), core.block_type.__init__ is tables[0])[1]
        print(json.dumps({{"same": same, "again": again}}))
    ''')
    assert len(report["same"]) >= 17 and all(report["same"].values()), report["same"]
    assert report["again"]  # installing twice keeps the first installation
