"""Defence in depth: the harness attacks again, with the first line of defence switched off.

In the shipped configuration the static gate and the run-time policy (`forbidden_construct`) stop
these cases before anything else sees them. Here `forbidden_construct` is disabled: the static
findings become notices and the run-time policy records instead of refusing, so each attack runs
to completion and the checks behind it (tamper detection, captured references, rechecks of timed
outputs, provenance, the parent's comparison) must still leave it without reward.

Attacks that only the first line stops are listed as strict xfails: the residual risk in
docs/integrity.md, noticed automatically if a deeper check ever closes them.

Like the corpus, every case runs through the test process's warm `LocalPool` (candidates forked
from a jailed fork server, the path RL training uses, and a harder place to attack from: the
attack's siblings are the next cases), or in fresh processes through `tritongym.evaluate` with
``TRITONGYM_CORPUS_LAUNCHER=spawn``.
"""

from __future__ import annotations

import pytest
from tests.session_pool import evaluate_in_session_pool

from tritongym import Status

from .corpus import case_paths, load_problem, parse_case

#: case id -> what the deeper layers must report (a violation code, a status for non-violations,
#: or None when only "no reward" is asserted).
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
    "B10-frame-walk-obfuscated": None,  # incorrect, or host_compute when it touches pointers of input copies
    "E3-sys-modules-obfuscated": Status.INCORRECT,
    "E2-os-exit-obfuscated": Status.CRASHED,
    "E1-fake-frames-on-inherited-fds-obfuscated": Status.CRASHED,
    # Issue 7/15: what only the evidence can stop (the first wave let these through).
    "A1-untraced-fallback": "harness_tampering",
    "A1-torch-inside-interpreted-kernel": "python_in_kernel",
    "A1-torch-in-grid-callable": "pytorch_fallback",
    "A1-torch-in-pre-run-hook": "pytorch_fallback",
    "A1-problem-model-in-grid": "pytorch_fallback",
    "A1-constexpr-object": "python_in_kernel",
    "A1-call-form-python-helper": "python_in_kernel",
    "H1-numpy-whole": "host_compute",
    "H1-numpy-asarray": "host_compute",
    "H2-python-tolist": "host_compute",
    "H2-python-item-loop": "host_compute",
    "H3-partial-host-softmax": "host_compute",
    "H4-host-in-grid-callable": "host_compute",
    "E1-channel-takeover": Status.CRASHED,
    "E3-persistent-function-mode": "harness_tampering",
    "E3-persistent-dispatch-mode": "harness_tampering",
    "E5-rewrite-source-fileio": None,
    "E3-rebind-harness-table": "harness_tampering",
    "E5-rewrite-source-after-check": None,
    # Issue 21: `inspect` is allowed by spelling; its frame walks and harness defaults are refused
    # at run time, and without that the walk finds nothing of the parent and the fallback is named.
    "B10-inspect-frame-walk": None,
    "E3-inspect-signature-defaults": "pytorch_fallback",
}
#: Stopped by the first line alone: the evasion idioms themselves (reaching builtins through
#: len.__self__, imports through them, a module attribute written through its __dict__), which
#: this case uses for nothing: once they are allowed, what remains is an honest kernel.
RESIDUAL = {
    "E5-static-gate-evasion": "the evasion idioms are used for nothing: only the first line names them",
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
    if case.device == "gpu":
        pytest.skip("GPU case")
    options = {"num_trials": 2, **case.options, "disabled_checks": frozenset({"forbidden_construct"})}
    result = evaluate_in_session_pool(load_problem(case.problem), case.path, device="cpu",
                                      launcher_variable="TRITONGYM_CORPUS_LAUNCHER", **options)
    assert result.reward == 0, f"{case_id} got reward {result.reward} once the first line was off: {result.status}"
    expected = DEEPER.get(case_id)
    if isinstance(expected, Status):
        assert result.status == expected, (result.status, result.error)
    elif expected is not None:
        assert expected in [str(v.code) for v in result.violations], (result.status, result.violations)
    # The first line still saw it and says so (when it saw anything: the new attacks use no
    # forbidden vocabulary at all, which is the point of judging by evidence).
    if case.expected_violation == "forbidden_construct":
        assert any(n.code == "check_disabled" for n in result.notices)
