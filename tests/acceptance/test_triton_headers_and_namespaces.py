"""Honest Triton the clean room refused (issue 44, families 1-3) gets ``ok``, as written.

Each case is an honest solution in `idioms/` in the style the held-out corpora showed refused:

1. the tutorials' grid callable sized from the launch's own arguments
   (``triton.cdiv(meta["n_elements"], meta["BLOCK_SIZE"])``: the CPU interpreter hands ``meta``'s
   integers over as its scalar tensors);
2. an fp8-style header: ``scale: tl.float32``, ``FP8_MAX: tl.constexpr = float8_info.max`` with
   ``float8_info = torch.finfo(torch.float8_e4m3fn)``, a helper whose default is used,
   ``constexpr`` imported bare, a launched wrapper whose body names no ``tl``;
3. Triton's own namespaces: ``tl.extra.cuda.gdc_wait()`` behind a constexpr flag that is off, and
   ``triton.language.standard._log2`` (a private constexpr helper of Triton's, which ``tl.sort``
   calls) beside ``tl.sort``.

Each is evaluated as the service does (every check on) and with the candidate-side checks off, so
that the clean room alone is seen accepting it. The attacks each relaxation must still stop are
cases of the adversarial corpus (`F1-grid-from-meta-torch`, `F9-constexpr-default-answer`,
`F5-private-helper-in-triton-module`, `F5-str-to-ty-eval`, `F5-module-chain-to-builtins`), run with
the clean room alone in tests/adversarial/test_cleanroom.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tritongym import EvalOptions, EvalRequest, Status

IDIOMS = Path(__file__).resolve().parent / "idioms"
OPTIONS = {"device": "cpu", "num_trials": 2, "timeout": 120.0}
CLEAN_ROOM_ALONE = {"candidate_checks": False, "disabled_checks": ["forbidden_construct"]}

#: (solution, problem, what it exercises)
CASES = [
    ("grid_from_meta_relu", "relu_problem",
     "family 1: lambda meta: (triton.cdiv(meta['n_elements'], meta['BLOCK_SIZE']),)"),
    ("fp8_saturate_header", "fp8_saturate_problem",
     "family 2: scale: tl.float32, FP8_MAX: tl.constexpr = float8_info.max, a helper's default, bare constexpr"),
    ("sort_rows_triton_helpers", "sort_rows_problem",
     "family 3: tl.extra.cuda.gdc_wait() under a constexpr-false branch, triton.language.standard._log2, tl.sort"),
]


@pytest.fixture(scope="module")
def pool():
    from tritongym.execution import LocalPool

    with LocalPool(1) as pool:
        yield pool


@pytest.mark.parametrize("checks", ["all checks", "clean room alone"])
@pytest.mark.parametrize(("solution", "problem", "features"), CASES, ids=[case[0] for case in CASES])
def test_honest_triton_is_ok_as_written(pool, solution, problem, features, checks):
    options = {**OPTIONS, **(CLEAN_ROOM_ALONE if checks == "clean room alone" else {})}
    request = EvalRequest(IDIOMS / f"{problem}.py", IDIOMS / f"{solution}.py", EvalOptions(**options))
    result = pool.submit(request).result(timeout=300)
    described = f"{features}\n{result.status}: {[v.message for v in result.violations]} {(result.error or '')[:600]}"
    assert result.status == Status.OK, described
    assert result.violations == [] and result.reward > 0, described
    assert "clean_room" in result.phase_seconds
