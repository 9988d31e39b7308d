"""Honest code as LLMs and libraries write it (issue 21): every idiom gets ``ok``, three times.

Each case is a small task and an honest solution in `idioms/` (written for these tests), in a
style the evaluator used to refuse or mis-run: Inductor-style kernels (``triton_helpers``,
``libdevice``/``tl_math`` aliases, ``triton_heuristics.grid``, ``welford_reduce``), a kernel
Inductor itself writes at test time, ``inspect.signature`` as a version check, a forward that
warns, a profiler range around the launch, bf16 ``tl.dot``, a block mask combined with a scalar
condition by ``&``, an int4 split-K GEMM with fp16 atomics (input families used to flip its
verdict), block pointers, and Triton kernels behind ``torch.library`` (``triton_op`` +
``wrap_triton``, ``custom_op``). Every case is evaluated ``REPEATS`` times on a warm pool (fresh
secret seeds each time) and must get the same verdict every time.

A second group pins what an honest *mistake* reads like: a ReLU submitted for LeakyReLU(0.01) is
``incorrect`` with where and by how much, and no hint names a construct the code does not use.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tritongym
from tritongym import EvalOptions, EvalRequest, Status
from tritongym.env import FeedbackPolicy
from tritongym.evaluator.worker import interpreter_fixes

IDIOMS = Path(__file__).resolve().parent / "idioms"
REPEATS = 3
OPTIONS = {"device": "cpu", "num_trials": 1, "timeout": 120.0}

#: (solution, problem, what it exercises)
CASES = [
    ("inductor_style_softmax", "softmax_problem",
     "from torch._inductor.runtime import triton_helpers; libdevice, tl_math; max2, maximum; triton_heuristics.grid"),
    ("inductor_style_welford", "var_mean_problem", "triton_helpers.welford_reduce and welford; rmask & xmask; grid"),
    ("inspect_signature_matmul", "matmul_problem", "inspect.signature(tl.dot) / (triton.autotune) as version checks"),
    ("warns_in_forward", "relu_problem", "warnings.warn during forward (the warning machinery reads the solution)"),
    ("profiler_annotation_relu", "relu_problem", "torch.profiler.record_function around the launch (a GPU run)"),
    ("bf16_dot", "bf16_matmul_problem", "tl.dot on bf16 operands with an fp32 accumulator"),
    ("mask_and_scalar", "relu_problem", "a block mask & a scalar condition (row < n_rows) on a padded grid"),
    ("int4_gemm_splitk", "int4_gemm_problem", "int4 weights, per-group scales and zero points, split-K fp16 atomics"),
    # The op is PyTorch work to the op trace; the clean room (issue 20) sees the kernel run inside it.
    ("triton_op_relu", "relu_problem", "torch.library.triton_op + wrap_triton"),
    ("custom_op_relu", "relu_problem", "torch.library.custom_op wrapping a launch"),
]


@pytest.fixture(scope="module")
def pool():
    from tritongym.execution import LocalPool

    pool = LocalPool(1)
    yield pool
    pool.close()


def evaluate_repeatedly(pool, problem: Path, solution: Path | str, **options) -> list[tritongym.EvalResult]:
    request = EvalRequest(problem, solution, EvalOptions(**{**OPTIONS, **options}))
    futures = [pool.submit(request) for _ in range(REPEATS)]
    return [future.result() for future in futures]


def describe(results: list[tritongym.EvalResult]) -> str:
    return "\n".join(f"{r.status}: {[str(v.code) for v in r.violations]} {(r.error or '')[:400]}" for r in results)


@pytest.mark.parametrize(("solution", "problem", "features"), CASES)
def test_honest_idiom_is_ok_every_time(pool, solution, problem, features):
    results = evaluate_repeatedly(pool, IDIOMS / f"{problem}.py", IDIOMS / f"{solution}.py")
    assert [r.status for r in results] == [Status.OK] * REPEATS, f"{features}\n{describe(results)}"
    assert all(r.violations == [] and r.reward > 0 for r in results), describe(results)


def test_block_pointers_are_ok_or_named_as_unsupported(pool):
    """tl.make_block_ptr / tl.advance: ok where the installed Triton has block pointers; Triton 3.9
    removed them from every tier, and there the verdict names the construct (never a
    runtime_error blamed on the kernel)."""
    results = evaluate_repeatedly(pool, IDIOMS / "matmul_problem.py", IDIOMS / "block_ptr_matmul.py")
    if interpreter_fixes.block_pointers_removed():
        assert [r.status for r in results] == [Status.UNSUPPORTED] * REPEATS, describe(results)
        assert all("tl.make_block_ptr is not supported" in (r.error or "") for r in results), describe(results)
        assert all(any(n.code == "interpreter_limit" for n in r.notices) for r in results)
    else:
        assert [r.status for r in results] == [Status.OK] * REPEATS, describe(results)


# -- a kernel Inductor writes, evaluated as a KernelBook row would carry it ----------------------

#: Runs in a subprocess: asks Inductor's Triton backend for the CPU to compile `f` and records the
#: kernel source it generates. Triton has no CPU driver here, so the backend's target query is
#: answered with a GPU target and compilation stops at Triton's compile step, after codegen.
GENERATE = textwrap.dedent('''
    import sys
    import torch
    import torch._inductor.config as config
    import torch.utils._triton as triton_utils
    from triton.backends.compiler import GPUTarget
    from torch._inductor.async_compile import AsyncCompile

    config.cpu_backend = "triton"
    triton_utils.triton_backend = lambda: GPUTarget("cuda", 80, 32)
    triton_utils.triton_hash_with_backend = lambda: "0" * 64
    sources = []

    class Captured(Exception):
        pass

    def capture(self, kernel_name, source_code, *args, **kwargs):
        sources.append(source_code)
        raise Captured(kernel_name)

    AsyncCompile.triton = capture

    def f(x):
        return torch.nn.functional.gelu(x) * 2.0 + x.amax(-1, keepdim=True)

    try:
        torch.compile(f)(torch.randn(8, 64))
    except Exception:
        pass
    if len(sources) != 1:
        sys.exit(f"expected one generated kernel, got {len(sources)}")
    print(sources[0])
''')

GENERATED_PROBLEM = textwrap.dedent('''
    import torch
    import torch.nn as nn


    class Model(nn.Module):
        def forward(self, x):
            return torch.nn.functional.gelu(x) * 2.0 + x.amax(-1, keepdim=True)


    def get_inputs():
        return [torch.randn(8, 64)]


    def get_init_inputs():
        return []
''')

KERNELBOOK_IMPORTS = ("from torch._inductor.runtime import triton_helpers\n"
                      "from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math\n"
                      "from torch._inductor.runtime.triton_heuristics import grid\n")


def as_kernelbook_row(generated: str) -> tuple[str, str]:
    """Inductor's generated module as KernelBook rows carry it: the ``@triton.jit`` kernel with its
    body untouched, Inductor's runtime imports as KernelBook writes them, the launcher decorator
    (Inductor's own autotuner, not part of a row) and the CPU-driver call dropped. Returns the
    source and the kernel's name."""
    tree = ast.parse(generated)
    kernel = next(node for node in tree.body if isinstance(node, ast.FunctionDef))
    kernel.decorator_list = [d for d in kernel.decorator_list if ast.unparse(d) == "triton.jit"]
    lines = generated.splitlines()
    body = "\n".join(lines[kernel.lineno - 1:kernel.end_lineno])
    body = "@triton.jit\n" + body
    return "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n" + \
        KERNELBOOK_IMPORTS + "\n\n" + body + "\n", kernel.name


def test_a_kernel_inductor_generates_is_ok_every_time(pool, tmp_path):
    done = subprocess.run([sys.executable, "-c", GENERATE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    generated = done.stdout
    assert "triton_helpers." in generated and "libdevice." in generated, generated
    source, name = as_kernelbook_row(generated)
    source += textwrap.dedent(f'''

        class ModelNew(nn.Module):
            def forward(self, x):
                x = x.contiguous()
                buf1 = torch.empty_like(x)
                xnumel, rnumel = x.shape
                {name}[grid(xnumel)](x, buf1, xnumel, rnumel, XBLOCK=2)
                return buf1
    ''')
    problem = tmp_path / "problem.py"
    problem.write_text(GENERATED_PROBLEM)
    results = evaluate_repeatedly(pool, problem, source)
    assert [r.status for r in results] == [Status.OK] * REPEATS, f"{source}\n{describe(results)}"


# -- an honest mistake reads as a mistake -------------------------------------------------------


def test_relu_for_leaky_relu_is_incorrect_with_where_and_by_how_much(pool):
    results = evaluate_repeatedly(pool, IDIOMS / "leaky_relu_uniform_problem.py", IDIOMS / "relu_for_leaky_relu.py",
                                  num_trials=2)
    assert [r.status for r in results] == [Status.INCORRECT] * REPEATS, describe(results)
    for result in results:
        assert result.violations == [], describe([result])
        failed = [t for t in result.trials if not t.passed]
        assert failed and all(t.family != "get_inputs" for t in failed)
        error = result.error or ""
        assert "against a float64 evaluation" in error and "largest errors in output at (" in error, error
        assert "negative values" in error or "zero-mean" in error, error


FORBIDDEN_HINTS = ("tl.dot", "input_precision", "float16", "bfloat16", "fp16", "tf32", "TF32", "cast to")


def test_no_hint_names_a_construct_the_code_does_not_use(pool):
    """Whatever the verdict (incorrect once parent.py reviews family trials, integrity findings
    before), neither the evaluator's messages nor the feedback a model reads mention tl.dot,
    precision keywords or half-precision casts: the ReLU kernel uses none of them."""
    results = evaluate_repeatedly(pool, IDIOMS / "leaky_relu_uniform_problem.py", IDIOMS / "relu_for_leaky_relu.py",
                                  num_trials=2)
    for result in results:
        assert result.status != Status.OK
        texts = [result.error or "", *(v.message for v in result.violations), *(t.message or "" for t in result.trials),
                 *(FeedbackPolicy(level).render(result) for level in ("minimal", "standard", "full"))]
        for text in texts:
            assert not any(word in text for word in FORBIDDEN_HINTS), text
