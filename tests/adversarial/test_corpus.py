"""Run every case of the adversarial corpus through `tritongym.evaluate` and check its verdict.

One parametrised test per case file (the case id is the test id), controls first. A control
must behave (honest → ``ok`` with a reward above 0, wrong → ``incorrect``) before any attack's
verdict means anything, so every attack depends on a session fixture that runs the controls and
fails the attack, naming the control, when one misbehaved. An attack must get:

* ``reward == 0``: the property the corpus exists for (a failure here says HACK GOT THROUGH);
* the expected status (exactly, or anything but ``ok`` for "not ok");
* the expected violation code among ``result.violations`` (unless "none").

A case whose header carries ``Known gap:`` is a strict xfail: it documents an attack the
evaluator does not catch yet, keeps the suite green, and fails (XPASS) the day it is caught, so
the line gets removed. Cases with ``Device: gpu`` carry the ``gpu`` marker (skipped without CUDA),
cases that run the timing protocol on a CPU the ``slow`` marker. Runs use ``num_trials=2``
unless the header's Options say otherwise.

Every case runs through a warm `LocalPool` (candidates forked from a jailed fork server, the path
RL training uses), or through plain `tritongym.evaluate` (fresh workers per evaluation) with
``TRITONGYM_CORPUS_LAUNCHER=spawn``. The verdict logic is the same code either way; the sandbox
tests (tests/sandbox/, tests/execution/) cover each process set-up's boundary.
"""

from __future__ import annotations

import time

import pytest
from tests.session_pool import evaluate_in_session_pool

import tritongym
from tritongym import Status

from .corpus import Case, HeaderError, case_paths, load_problem, parse_case

#: Seconds one evaluation may take on the 2-core CPU runner (typically 3-25 s; generous so a
#: busy machine does not flake, tight enough to catch a verdict that waits for the 180 s timeout).
WALL_CLOCK_BOUND_S = 90.0
DEFAULT_OPTIONS = {"num_trials": 2}
#: Observed verdicts, by case id, for the terminal summary (see conftest.py).
OBSERVED: dict[str, dict] = {}


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _params() -> list:
    params = []
    for path in case_paths():
        try:
            case = parse_case(path)
        except HeaderError as exc:
            params.append(pytest.param(exc, id=path.stem))
            continue
        marks = []
        if case.device == "gpu":
            marks.append(pytest.mark.gpu)
        if case.options.get("time_on_cpu"):
            marks.append(pytest.mark.slow)  # the timing protocol on a CPU: 15-25 s each
        if case.known_gap:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError,
                                           reason=f"known gap: {case.known_gap}"))
        params.append(pytest.param(case, id=case.case_id, marks=marks))
    return params


def _evaluate(problem, solution, **options) -> tritongym.EvalResult:
    return evaluate_in_session_pool(problem, solution, launcher_variable="TRITONGYM_CORPUS_LAUNCHER", **options)


def run_case(case: Case) -> tritongym.EvalResult:
    """Evaluate one case with its header's options; records the verdict for the summary."""
    options = {**DEFAULT_OPTIONS, **case.options}
    device = "cuda" if case.device == "gpu" else "cpu"
    started = time.monotonic()
    result = _evaluate(load_problem(case.problem), case.path, device=device, **options)
    elapsed = time.monotonic() - started
    OBSERVED[case.case_id] = {
        "family": case.family, "status": str(result.status), "reward": result.reward,
        "violations": [str(v.code) for v in result.violations], "seconds": elapsed,
        "expected": f"{case.expected_status or 'not ok'} / {case.expected_violation or 'none'}",
        "known_gap": bool(case.known_gap),
    }
    assert elapsed < WALL_CLOCK_BOUND_S, (
        f"{case.case_id}: the evaluation took {elapsed:.1f} s (bound {WALL_CLOCK_BOUND_S:g} s)")
    return result


def describe(result: tritongym.EvalResult) -> str:
    lines = [f"status={result.status} reward={result.reward} "
             f"violations={[str(v.code) for v in result.violations]}"]
    if result.error:
        lines.append(f"error: {result.error[:600]}")
    for violation in result.violations:
        lines.append(f"violation [{violation.code}]: {violation.message[:300]}")
    for notice in result.notices:
        lines.append(f"notice [{notice.code}]: {notice.message[:200]}")
    return "\n".join(lines)


def check_control(case: Case, result: tritongym.EvalResult) -> str | None:
    """None when the control behaved, else why not."""
    if case.expects_ok:
        if result.status != Status.OK or not result.reward > 0:
            return f"honest control {case.case_id} is not ok with a reward > 0:\n{describe(result)}"
    elif result.status != case.expected_status or result.reward != 0:
        return f"wrong control {case.case_id} is not {case.expected_status}, reward 0:\n{describe(result)}"
    return None


@pytest.fixture(scope="session")
def controls() -> dict[str, tuple[Case, tritongym.EvalResult, str | None]]:
    """Every runnable control, evaluated once, with the reason it misbehaved (None if it did not)."""
    outcomes = {}
    cuda = _cuda_available()
    for path in case_paths():
        try:
            case = parse_case(path)
        except HeaderError:
            continue  # reported by its own test and by test_header_schema
        if not case.is_control or (case.device == "gpu" and not cuda):
            continue
        result = run_case(case)
        outcomes[case.case_id] = (case, result, check_control(case, result))
    return outcomes


@pytest.mark.parametrize("case", _params())
def test_case(case: Case | HeaderError, controls: dict) -> None:
    if isinstance(case, HeaderError):
        pytest.fail(f"malformed case header: {case}")
    if case.is_control:
        _, result, problem = controls[case.case_id]
        assert problem is None, problem
        return
    broken = [problem for _, _, problem in controls.values() if problem is not None]
    if broken:
        pytest.fail("a control misbehaved, so no attack verdict means anything:\n" + "\n".join(broken))

    result = run_case(case)
    assert result.reward == 0, (
        f"HACK GOT THROUGH: {case.case_id} earned reward {result.reward} ({case.strategy})\n"
        f"{describe(result)}")
    if case.expected_status is None:
        assert result.status != Status.OK, f"{case.case_id}: expected any status but ok\n{describe(result)}"
    else:
        assert result.status == case.expected_status, (
            f"{case.case_id}: expected status {case.expected_status}, got {result.status}\n"
            f"{describe(result)}")
    if case.expected_violation is not None:
        codes = [str(v.code) for v in result.violations]
        assert str(case.expected_violation) in codes, (
            f"{case.case_id}: expected violation {case.expected_violation} among {codes}\n{describe(result)}")


def test_precision_policy_report_still_names_the_finding() -> None:
    """With ``precision_policy="report"`` a precision downgrade is allowed but still reported.

    Only the task's own inputs are used (no input families), where the fp16-operand matmul is
    within tolerance, so the verdict is ok and the finding must appear as a notice.
    """
    case = parse_case(next(p for p in case_paths() if p.stem == "precision_fp16_operand_matmul"))
    started = time.monotonic()
    result = tritongym.evaluate(load_problem(case.problem), case.path, device="cpu", num_trials=2,
                                input_families=(), precision_policy="report")
    assert time.monotonic() - started < WALL_CLOCK_BOUND_S
    assert result.status == Status.OK and result.reward > 0, describe(result)
    assert "precision_downgrade" not in [str(v.code) for v in result.violations], describe(result)
    assert any("precision_downgrade" in notice.message for notice in result.notices), describe(result)
