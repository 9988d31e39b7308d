"""Defence in depth: the harness attacks again, with the first line of defence switched off.

In the shipped configuration the static gate and the run-time policy (`forbidden_construct`) stop
these cases before anything else sees them. Here `forbidden_construct` is disabled: the static
findings become notices and the run-time policy records instead of refusing, so each attack runs
to completion and the checks behind it (tamper detection, captured references, rechecks of timed
outputs, provenance, the parent's comparison) must still leave it without reward.

Attacks that only the first line stops are listed as strict xfails: the residual risk in
docs/integrity.md, noticed automatically if a deeper check ever closes them.
"""

from __future__ import annotations

import pytest

import tritongym
from tritongym import Status

from .corpus import case_paths, load_problem, parse_case

#: case id -> what the deeper layers must report (a violation code, or a status for non-violations).
DEEPER = {
    "D2-background-thread": "background_thread",
    "C3-deferred-write": "timed_output_mismatch",
    "C2-phase-by-dispatch-mode": "timed_output_mismatch",
    "D4-forge-reported-time": "harness_tampering",
    "D4-forge-reported-time-early": "harness_tampering",
    "E3-forge-evidence": "harness_tampering",
    "E3-hide-tampering": "harness_tampering",
    "B8-blind-worker-globals": "harness_tampering",
    "D4-patch-allclose-obfuscated": "harness_tampering",
    "D4-timer-patch-obfuscated": "harness_tampering",
    "D4-timer-patch-after-trials": "harness_tampering",
    "A5-exec-kernel-source": "no_triton_launch",
    "B10-gc-walk-obfuscated": "input_mutation",
    "B10-frame-walk-obfuscated": Status.INCORRECT,
    "E3-sys-modules-obfuscated": Status.INCORRECT,
    "E2-os-exit-obfuscated": Status.CRASHED,
    "E1-fake-frames-on-inherited-fds-obfuscated": Status.CRASHED,
}
#: Stopped by the static gate alone: switching off the dispatch trace through private torch
#: internals, a fallback after reaching builtins through len.__self__, and a Python helper run
#: by the CPU interpreter inside a kernel (a GPU would refuse to compile it).
RESIDUAL = {
    "E5-static-gate-evasion": "only the static gate sees the dispatch-trace bypass",
    "A1-untraced-fallback": "_disable_current_modes() raises no audit event; only the static gate sees it",
    "A1-torch-inside-interpreted-kernel": "CPU interpreter only; only the static gate sees the helper call",
}

_CASES = {case.case_id: case for case in (parse_case(p) for p in case_paths())}


def _params() -> list:
    params = []
    for case_id in [*DEEPER, *RESIDUAL]:
        marks = [pytest.mark.slow]
        if case_id in RESIDUAL:
            marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=RESIDUAL[case_id]))
        params.append(pytest.param(case_id, id=case_id, marks=marks))
    return params


@pytest.mark.parametrize("case_id", _params())
def test_deeper_checks_hold_without_the_first_line(case_id):
    case = _CASES[case_id]
    options = {"num_trials": 2, **case.options, "disabled_checks": frozenset({"forbidden_construct"})}
    result = tritongym.evaluate(load_problem(case.problem), case.path, device="cpu", **options)
    assert result.reward == 0, f"{case_id} got reward {result.reward} once the first line was off: {result.status}"
    expected = DEEPER.get(case_id)
    if isinstance(expected, Status):
        assert result.status == expected, (result.status, result.error)
    elif expected is not None:
        assert expected in [str(v.code) for v in result.violations], (result.status, result.violations)
    # The first line still saw it and says so.
    assert any(n.code == "check_disabled" for n in result.notices)
