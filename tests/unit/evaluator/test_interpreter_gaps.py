"""The CPU interpreter's gaps (issue 21) closed by `interpreter_fixes`, and the `grid` shim.

Each scenario runs in a fresh interpreter with ``TRITON_INTERPRET=1``: the fixes patch Triton's
interpreter and the shim adds a finder to ``sys.meta_path``, which must not leak into the test
process. Each asserts against torch on the same values; the bare-interpreter runs show the gap is
real on the installed Triton (where it is not, the first assertion says so).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

KERNELS = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    if sys.argv[1] == "fixed":
        from tritongym.evaluator.worker import interpreter_fixes
        interpreter_fixes.install()

    @triton.jit
    def bf16_dot(a_ptr, b_ptr, c_ptr, N: tl.constexpr):
        r = tl.arange(0, N)
        a = tl.load(a_ptr + r[:, None] * N + r[None, :])
        b = tl.load(b_ptr + r[:, None] * N + r[None, :])
        tl.store(c_ptr + r[:, None] * N + r[None, :], tl.dot(a, b))

    @triton.jit
    def masked(x_ptr, y_ptr, n, flag, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = (offs < n) & (flag > 0)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0) * 2, mask=mask)

    report = {}
    g = torch.Generator().manual_seed(0)
    a = torch.randn(32, 32, generator=g).bfloat16()
    b = torch.randn(32, 32, generator=g).bfloat16()
    c = torch.empty(32, 32)
    bf16_dot[(1,)](a, b, c, N=32)
    report["dot_error"] = float((c.double() - a.double() @ b.double()).abs().max())
    x = torch.randn(100, generator=g)
    for flag in (1, 0):
        y = torch.full((100,), 7.0)
        try:
            masked[(1,)](x, y, 100, flag, BLOCK=128)
            report[f"mask_{flag}"] = float((y - (2 * x if flag else torch.full((100,), 7.0))).abs().max())
        except Exception as exc:
            report[f"mask_{flag}"] = type(exc).__name__ + ": " + str(exc)[:200]
    print(json.dumps(report))
''')


def run(script: str, *args: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def bare():
    return run(KERNELS, "bare")


@pytest.fixture(scope="module")
def fixed():
    return run(KERNELS, "fixed")


def test_bf16_dot_multiplies_values_with_fp32_accumulation(bare, fixed):
    assert bare["dot_error"] > 1e3, f"the bare interpreter computes bf16 dots correctly now: {bare}"
    assert fixed["dot_error"] < 1e-4, fixed


def test_a_block_mask_anded_with_a_scalar_condition_is_a_mask(bare, fixed):
    assert "mask has unsupported dtype" in str(bare["mask_1"]), f"the bare interpreter accepts it now: {bare}"
    assert fixed["mask_1"] == 0.0 and fixed["mask_0"] == 0.0, fixed


def test_block_pointers_on_a_triton_without_them_are_named_as_an_interpreter_limit():
    script = textwrap.dedent('''
        import json
        import torch, triton, triton.language as tl
        from tritongym.evaluator.worker import interpreter_fixes
        interpreter_fixes.install()

        @triton.jit
        def k(x_ptr, N: tl.constexpr):
            p = tl.make_block_ptr(base=x_ptr, shape=(N,), strides=(1,), offsets=(0,), block_shape=(N,), order=(0,))
            tl.store(p, tl.load(p) + 1)

        x = torch.zeros(16)
        try:
            k[(1,)](x, N=16)
            print(json.dumps({"ran": float(x.sum()), "removed": interpreter_fixes.block_pointers_removed()}))
        except Exception as exc:
            print(json.dumps({"error": str(exc), "removed": interpreter_fixes.block_pointers_removed()}))
    ''')
    report = run(script)
    if report["removed"]:
        assert "tl.make_block_ptr is not supported in interpreter mode" in report["error"], report
        assert "removed block pointers" in report["error"]
    else:
        assert report.get("ran") == 16.0, report


def test_the_grid_shim_gives_the_documented_grid_and_keeps_torchs_own():
    script = textwrap.dedent('''
        import json
        from tritongym.evaluator.worker import inductor_compat
        import torch
        inductor_compat.install()
        from torch._inductor.runtime import triton_heuristics
        from torch._inductor.runtime.triton_heuristics import grid
        print(json.dumps({
            "shim": grid is inductor_compat.grid,
            "x": grid(1000)({"XBLOCK": 128}),
            "xy": grid(10, 70)({"XBLOCK": 4, "YBLOCK": 8}),
            "fold": grid(1, 200000)({"XBLOCK": 1, "YBLOCK": 1}),
            "xyz": grid(5, 6, 7)({"XBLOCK": 2, "YBLOCK": 4, "ZBLOCK": 8}),
            "no_block": grid(3)({}),
        }))
    ''')
    report = run(script)
    assert report["shim"], "torch has its own grid again: the shim must step aside (install keeps torch's)"
    assert report["x"] == [8, 1, 1]
    assert report["xy"] == [3, 9, 1]
    assert report["fold"] == [1, 50000, 4]  # y beyond 65535 blocks folded into z
    assert report["xyz"] == [3, 2, 1]
    assert report["no_block"] == [3, 1, 1]


# -- overflow checks the interpreter discards (`_discarded_overflow_checks`: speed, no result changes) --

OVERFLOW = textwrap.dedent('''
    import json, sys
    import torch, triton, triton.language as tl
    from triton.language import semantic
    from triton.runtime import interpreter
    if sys.argv[1] == "fixed":
        from tritongym.evaluator.worker import interpreter_fixes
        interpreter_fixes.install()

    asserts = []
    original = semantic.TritonSemantic.device_assert
    def counting(self, cond, msg, mask):
        asserts.append(msg)
        return original(self, cond, msg, mask)
    semantic.TritonSemantic.device_assert = counting

    @triton.jit
    def wrap(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        v = tl.load(x_ptr + offs, mask=mask, other=0)
        tl.store(y_ptr + offs, v * 65536 + 7 - v, mask=mask)  # int32 overflow: wraps, as on a GPU

    x = torch.arange(-40000, 40000, 997, dtype=torch.int32)
    y = torch.empty_like(x)
    wrap[(3,)](x, y, x.numel(), BLOCK=32)
    options = interpreter.interpreter_builder.options
    print(json.dumps({"y": y.tolist(), "checks": len(asserts), "debug": options.debug,
                      "sanitize": options.sanitize_overflow,
                      "overflow": all(m.startswith("int32 overflow detected") for m in asserts)}))
''')


def test_overflow_checks_the_interpreter_discards_are_skipped_and_results_stay_bit_identical():
    bare, fixed = run(OVERFLOW, "bare"), run(OVERFLOW, "fixed")
    assert bare["debug"] is False and bare["sanitize"] is True, bare
    # Bare: each integer op's check is computed and handed to device_assert, which drops it.
    assert bare["checks"] > 0 and bare["overflow"], bare
    assert fixed["checks"] == 0 and fixed["sanitize"] is False and fixed["debug"] is False, fixed
    assert fixed["y"] == bare["y"]
    x = list(range(-40000, 40000, 997))
    assert bare["y"] == [((v * 65536 + 7 - v + 2**31) % 2**32) - 2**31 for v in x]  # the wrapped values


def test_overflow_checks_stay_when_the_interpreter_would_assert_them():
    from types import SimpleNamespace

    from triton.runtime.interpreter import InterpreterOptions

    from tritongym.evaluator.worker.interpreter_fixes import _discarded_overflow_checks

    debugging = SimpleNamespace(options=InterpreterOptions(debug=True))
    _discarded_overflow_checks(debugging)
    assert debugging.options.sanitize_overflow is True
    plain = SimpleNamespace(options=InterpreterOptions())
    _discarded_overflow_checks(plain)
    assert plain.options.sanitize_overflow is False and plain.options.debug is False
    assert plain.options.allowed_dot_input_precisions == InterpreterOptions().allowed_dot_input_precisions
    for odd in (SimpleNamespace(), SimpleNamespace(options=None), SimpleNamespace(options={"debug": False})):
        before = getattr(odd, "options", "absent")
        _discarded_overflow_checks(odd)  # another Triton's builder: left as it is
        assert getattr(odd, "options", "absent") == before
