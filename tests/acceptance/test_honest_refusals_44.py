"""Honest code the evaluator used to refuse (issue 44, families 4, 5, 6 and 9), each with its attack.

Every honest idiom gets ``ok`` through the jailed evaluation; every attack the old rule stopped
still gets no reward, stopped by what now decides it:

* 4, Inductor's and dynamo's helpers: a KernelBook row with ``triton_heuristics`` as a namespace
  and ``rand_strided`` for its sample inputs is ``ok``; ``rand_strided`` making the output is a
  wrong answer (``incorrect``).
* 5, ordinary Python: a ``@dataclass`` / ``namedtuple`` launch configuration behind a
  ``MagicMock`` import guard (``triton.jit = ...`` on the stand-in) is ``ok``; the candidate's own
  ``exec`` (by a computed name) is refused at run time, and a real rebinding of ``triton.jit`` at
  import is named ``harness_tampering`` by the identity checks.
* 6, wire dtypes: a uint32 sort-key kernel is ``ok``.
* 9, interpreter numerics: an fp8 (e4m3) activation GEMM and two bf16 kernels (one rounding twice,
  in Hugging Face's RMSNorm order, inside a task whose reference ends in bf16) are ``ok``; float8
  inside the bf16 task gets no reward.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tritongym import EvalOptions, EvalRequest, Status

IDIOMS = Path(__file__).resolve().parent / "idioms"
OPTIONS = {"device": "cpu", "num_trials": 1, "timeout": 120.0}

#: (solution, problem, what it exercises)
HONEST = [
    ("kernelbook_row_namespaces", "relu_plus_one_problem",
     "4: from torch._inductor.runtime import triton_heuristics; triton_heuristics.grid; rand_strided; guards aliases"),
    ("dataclass_config_relu", "relu_problem",
     "5: @dataclass(frozen=True) + namedtuple config; try/except ImportError with triton = MagicMock(); triton.jit ="),
    ("uint32_sort_keys", "sort_key_problem", "6: a torch.uint32 output (bitcast sort keys)"),
    ("fp8_gemm", "fp8_gemm_problem", "9: fp32 -> float8e4nv rounding inside a GEMM (124.3 -> 128, not 64)"),
    ("bf16_silu", "bf16_silu_problem", "9: fp32 -> bf16 round-to-nearest-even at the store"),
    ("bf16_rmsnorm", "bf16_rmsnorm_problem", "9: two bf16 roundings in a task whose reference ends in bf16"),
]

#: (solution, problem, the status it must get, a violation code it must carry or None)
ATTACKS = [
    ("rand_strided_output", "relu_plus_one_problem", Status.INCORRECT, None),
    ("exec_spelled_out", "relu_problem", Status.INTEGRITY_VIOLATION, "forbidden_construct"),
    ("rebinds_triton_jit", "relu_problem", Status.INTEGRITY_VIOLATION, "harness_tampering"),
    ("bf16_rmsnorm_via_fp8", "bf16_rmsnorm_problem", Status.INCORRECT, None),
]


@pytest.fixture(scope="module")
def pool():
    from tritongym.execution import LocalPool

    pool = LocalPool(1)
    yield pool
    pool.close()


def evaluate(pool, problem: str, solution: str):
    return pool.submit(EvalRequest(IDIOMS / f"{problem}.py", IDIOMS / f"{solution}.py",
                                   EvalOptions(**OPTIONS))).result()


@pytest.mark.parametrize(("solution", "problem", "features"), HONEST)
def test_honest_idiom_is_ok(pool, solution, problem, features):
    result = evaluate(pool, problem, solution)
    assert result.status == Status.OK, f"{features}\n{result.status} {result.violations} {(result.error or '')[:800]}"
    assert result.violations == [] and result.reward > 0


@pytest.mark.parametrize(("solution", "problem", "status", "code"), ATTACKS)
def test_the_attack_the_old_rule_stopped_gets_no_reward(pool, solution, problem, status, code):
    result = evaluate(pool, problem, solution)
    described = f"{result.status} {[str(v.code) for v in result.violations]} {(result.error or '')[:800]}"
    assert result.status != Status.OK and result.reward == 0, described
    if status is not None:
        assert result.status == status, described
    if code is not None:
        assert code in [str(v.code) for v in result.violations], described
