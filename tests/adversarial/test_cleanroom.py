"""The clean room decides alone: every candidate-side filter off, attacks still get no reward.

The candidate worker's own checks (launch records, op traces, host reads, tamper detection,
kernel-body checks, the static gate's and the run-time policy's refusals) run beside candidate
code and are forgeable; since issue 20 they are early filters only. Here they are all switched
off (``candidate_checks=False``, ``forbidden_construct`` disabled: the policy records instead of
refusing), so each attack runs to completion, and what stops it must be a property of the clean
room (`tritongym.evaluator.cleanroom`; the trials it replays are chosen by
`tritongym.evaluator.replays`), named per case below. The honest controls of the corpus, in the
same configuration, must still get ``ok``: the pair that makes the rule worth having.
"""

from __future__ import annotations

import pytest

import tritongym
from tritongym import Status

from .corpus import case_paths, load_problem, parse_case

OFF = {"candidate_checks": False, "disabled_checks": ["forbidden_construct"], "num_trials": 2}

#: case id -> (the verdict the clean room alone gives, the property of the design that stops it)
BY_CONSTRUCTION = {
    "F1-grid-graphmodule": ("evidence_mismatch", "ops inside a launch (grid callables) are not logged, so their "
                            "work is not re-executed and the replay's output lacks it"),
    "F1-heuristics-value": ("pytorch_fallback", "heuristic values are computed before the leaf launch: their "
                            "ops are logged, re-executed and measured as PyTorch work"),
    "F1-config-pre-hook": ("pytorch_fallback", "pre-hooks run before the leaf launch: their ops are logged, "
                           "re-executed and measured as PyTorch work in the clean room"),
    "F2-reset-live-trace": ("pytorch_fallback", "the work share is measured by the clean room's own replay, "
                            "not read from the candidate's trace"),
    "F2-erase-live-log": ("evidence_mismatch", "an op erased from the log is not re-executed: the replay's "
                          "outputs are wrong"),
    "F2-erase-one-family": ("evidence_mismatch", "every input family has a trial replayed: the family the kernel "
                            "is wrong on is re-executed from its (honest-looking) log, whose output is the "
                            "kernel's wrong one"),
    "F2-forged-accuracy-constant": ("precision_downgrade", "every check of a trial's outputs beyond the tolerance "
                                    "(float32-accurate, better than a trivial output) is applied to the clean room's "
                                    "outputs: the candidate's own are a filter it can answer with torch (the constant "
                                    "is 1e-3 off the float64 mean on every draw; trivial_output too when the replayed "
                                    "trial has an earlier one to average)"),
    "F2-forged-accuracy-fp16": ("precision_downgrade", "as above: the float64 comparison is made on what the "
                                "logged kernel computes, not on what the candidate sent"),
    "F3-numpy-raw-write": ("evidence_mismatch", "raw-memory writes are in no log: the replay computes only "
                           "what the logged kernels do"),
    "F4-thread-joined": ("evidence_mismatch", "a thread's ops are in no log (modes are thread-local)"),
    "F4-start-new-thread": ("evidence_mismatch", "as above, whatever starts the thread"),
    "F5-int-subclass-argument": ("unreplayable", "logs carry JSON numbers only: an int subclass cannot be "
                                 "described, so the forward cannot be replayed"),
    "F5-triton-named-helper": ("python_in_kernel", "kernels are rebuilt in a namespace of Triton only: a Python "
                               "helper has no binding the clean room provides"),
    "F5-handle-attribute-chain": ("python_in_kernel", "the body check refuses .handle on values"),
    "F5-module-chain-to-builtins": ("python_in_kernel", "a chain from an allowed module must reach Triton's own "
                                    "objects: tl.core.builtins is Python's module, whatever tl.core imports"),
    "F5-global-rebound-after-check": ("python_in_kernel", "globals are bound from what the launch saw; a Python "
                                      "function is not a Triton binding"),
    "F6-tuple-subclass-iter": ("unreplayable", "outputs are logged as lists and tuples of tensor references; a "
                               "tuple subclass cannot be described"),
    "F7-forged-unsupported": (Status.RUNTIME_ERROR, "'unsupported' is believed only when the hashed source uses a "
                              "construct the interpreter lacks"),
    "F8-host-answer-tensor": ("host_compute", "a tensor of unknown origin ships its bytes with the log; bytes "
                              "that differ per trial make the log vary, and replayed on fresh inputs it gives the "
                              "old answer"),
    "A1-transpose-contiguous": ("pytorch_fallback", "a reference with no compute op only moves data: the clean "
                                "room measures the elements the replayed copies wrote in a new layout"),
    "A1-transpose-copy-into": ("pytorch_fallback", "as above: copy_ into a buffer of another layout is measured"),
    "A1-transpose-by-stack": ("pytorch_fallback", "as above, with the elements the replayed compute ops read"),
    "F8-from-file-shared": ("evidence_mismatch", "aten::from_file is logged like any op and the clean room "
                            "refuses ops with host side effects; had the data come in without an op, its bytes "
                            "would ship with the log and be charged as host data"),
    # Issue 43: attacks aimed at the clean room itself. One property decides them: the outputs must
    # follow from the replayed log acting on the clean room's own inputs, including fresh inputs the
    # candidate never saw (a log that varies between trials is replayed on them: the counterfactual).
    "G1-scalar-argument": ("host_compute", "a scalar answer computed in hidden torch rides in a float argument: "
                           "replayed on fresh inputs the log gives the old answer, and the varying value (64 bits) "
                           "exceeds a scalar output's budget (0 bits)"),
    "G1-constexpr-keyword": ("host_compute", "as above, the answer in a tl.constexpr keyword: keywords are compared "
                             "like every other field of the log"),
    "G1-grid-size": ("precision_downgrade", "a grid size holds only a coarse answer (here 1/4096): the replay's "
                     "output fails the float64 precision check; a finer grid is a varying value the counterfactual "
                     "replay and the output's budget refuse, as for G1-scalar-argument"),
    "G2-no-launch-shipped-output": ("host_compute", "a log with no launch whose output arrives as shipped bytes: "
                                    "the bytes differ per trial, the counterfactual replay returns the old answer"),
    "G3-module-constant": ("evidence_mismatch", "a fresh kernel per call carrying that call's module constant: the "
                           "kernel table is part of the compared log and kernels are rebuilt per bindings; the "
                           "logged constant is not the one the candidate used, so the replay's output is wrong"),
    "G3-view-offset-table": ("host_compute", "a view's offset into a constant table, chosen on the host: a field "
                             "of a tensor reference like any other, and on fresh inputs it selects the old answer"),
    "G4-packed-int64": ("host_compute", "two float32 answers packed in an int64: information is counted in bits "
                        "(64 per packed value), and the counterfactual replay returns the old sums"),
    "G5-lse-in-torch": ("pytorch_fallback", "PyTorch arithmetic on the inputs' floating-point values before any "
                        "kernel wrote them is the problem's work, whatever it costs next to the reference's"),
    "G5-rewritten-loss": ("pytorch_fallback", "as above: a loss spelled with other ops than the reference's"),
    "G5-normal-identity": ("pytorch_fallback", "ops random by name are judged by their arguments: normal(mean=x) "
                           "reads x's values"),
    "G5-selection-in-torch": ("pytorch_fallback", "the pair of selections being glue: a selection in torch that "
                              "answers a selection problem reads as many elements as the reference's whole "
                              "computation (the work rule), whatever its spelling"),
    "G6-near-answer-correction": ("precision_downgrade", "a float16 stand-in of the answer shipped as bytes: the "
                                  "replay's outputs get every output check, float64 precision included"),
    "G7-sum-scaled-099": ("precision_downgrade", "a sum times 0.99, inside a 1 % tolerance: the replay's outputs "
                          "get the float64 precision check"),
    "G6-fp16-plus-correction": ("host_compute", "a float16 kernel plus a host-made correction: on fresh inputs the "
                                "correction is wrong and the output fails the precision check, and the correction's "
                                "bytes are far over the budget"),
    # Issue 44, families 1-3: what the clean room now accepts from honest Triton, each beside the attack
    # the old rule stopped, stopped now by the property that decides it.
    "F1-grid-from-meta-torch": ("evidence_mismatch", "a grid callable's sizes are logged as the ints Triton read, "
                                "but the callable itself runs inside the leaf launch: its ops are not logged, so "
                                "the replay's output lacks their work"),
    "F9-constexpr-default-answer": ("host_compute", "a default is bound when the candidate's def runs and is "
                                    "logged with the launch like an argument: the answer it carries varies between "
                                    "trials, and replayed on fresh inputs the log gives the old answer"),
    "F5-private-helper-in-triton-module": ("python_in_kernel", "private names reach only Triton's own kernel "
                                           "helpers, resolved in the clean room's own Triton: a helper planted in a "
                                           "Triton module by the candidate's process does not exist there"),
    "F5-str-to-ty-eval": ("python_in_kernel", "Triton's language package is reachable, but tl.str_to_ty is host "
                          "code (it evals part of its string with Python's builtins) and is refused by name and "
                          "identity"),
}


def _cases(prefix: str) -> list:
    return [pytest.param(case, id=case.case_id) for case in map(parse_case, case_paths())
            if case.case_id.startswith(prefix) or (prefix == "F" and case.case_id in BY_CONSTRUCTION)
            or (prefix == "F" and case.case_id.startswith("G"))
            or (prefix == "control" and case.family == "control" and case.expects_ok and case.device == "cpu")]


@pytest.fixture(scope="module")
def pool():
    from tritongym.execution import LocalPool

    with LocalPool(1) as pool:
        yield pool


def _evaluate(pool, case, **options):
    problem = load_problem(case.problem)
    merged = {**case.options, **options}
    request = tritongym.EvalRequest(problem, case.path, tritongym.EvalOptions(**merged))
    return pool.submit(request).result(timeout=300)


def test_every_clean_room_case_is_listed():
    ids = {case.case_id for case in map(parse_case, case_paths()) if case.case_id.startswith(("F", "G"))}
    assert ids == {case_id for case_id in BY_CONSTRUCTION if case_id.startswith(("F", "G"))}
    assert set(BY_CONSTRUCTION) <= {case.case_id for case in map(parse_case, case_paths())}


@pytest.mark.parametrize("case", _cases("F"))
def test_attack_stopped_by_the_clean_room_alone(pool, case):
    result = _evaluate(pool, case, **OFF)
    expected, why = BY_CONSTRUCTION[case.case_id]
    assert result.reward == 0 and result.status != Status.OK, f"HACK GOT THROUGH ({why}): {result.error}"
    if isinstance(expected, Status):
        assert result.status == expected, (result.status, result.error)
    else:
        codes = [v.code for v in result.violations]
        assert expected in codes, (result.status, codes, result.error)


@pytest.mark.parametrize("case", _cases("control"))
def test_honest_control_passes_the_clean_room_alone(pool, case):
    result = _evaluate(pool, case, **OFF)
    assert result.status == Status.OK, (result.error, [v.message for v in result.violations])
    assert result.reward > 0
    assert "clean_room" in result.phase_seconds
