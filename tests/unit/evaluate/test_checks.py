"""Tests for tritongym.evaluator.checks on hand-built `CallEvidence`, and strict evidence parsing."""

from __future__ import annotations

import copy

import pytest

from tritongym.evaluator import checks
from tritongym.evaluator.checks import CallEvidence, LaunchEvidence, OutputEvidence
from tritongym.evaluator.common.channel import ProtocolError
from tritongym.evaluator.result import Violation, ViolationCode


def evidence_dict(**overrides) -> dict:
    """The JSON an honest worker sends for one call: one candidate launch, one fresh output."""
    data = {
        "launches": [{"kernel": "relu_kernel", "candidate": True, "grid": "(4,)"}],
        "compute_ops": [],
        "outputs": [{"plain": True, "from_kernel": True, "aliases": None}],
        "mutated_inputs": [],
        "threads_before": 1,
        "threads_after": 1,
    }
    data.update(overrides)
    return data


def honest(**overrides) -> CallEvidence:
    return CallEvidence.parse(evidence_dict(**overrides))


def codes(violations: list[Violation]) -> list[str]:
    return [str(v.code) for v in violations]


# -- parsing ---------------------------------------------------------------------------------------


def test_parse_builds_typed_evidence():
    evidence = CallEvidence.parse(
        evidence_dict(
            launches=[
                {"kernel": "k1", "candidate": True, "grid": "(2, 1)"},
                {"kernel": "lib", "candidate": False, "grid": "<callable>"},
            ],
            compute_ops=["aten::mul"],
            outputs=[{"plain": False, "from_kernel": False, "aliases": "input"}],
            mutated_inputs=[0, 2],
            threads_before=1,
            threads_after=3,
        )
    )
    assert evidence.launches == (
        LaunchEvidence("k1", True, "(2, 1)"),
        LaunchEvidence("lib", False, "<callable>"),
    )
    assert evidence.compute_ops == ("aten::mul",)
    assert evidence.outputs == (OutputEvidence(plain=False, from_kernel=False, aliases="input"),)
    assert evidence.mutated_inputs == (0, 2)
    assert (evidence.threads_before, evidence.threads_after) == (1, 3)


def test_parse_truncates_long_strings():
    evidence = honest(compute_ops=["aten::" + "x" * 5000])
    assert len(evidence.compute_ops[0]) == 500


def _without(key):
    data = evidence_dict()
    del data[key]
    return data


def _launch(**item):
    return evidence_dict(launches=[{"kernel": "k", "candidate": True, "grid": "(1,)", **item}])


def _output(**item):
    return evidence_dict(outputs=[{"plain": True, "from_kernel": True, "aliases": None, **item}])


MALFORMED = {
    "none": None,
    "string": "all good",
    "list": [evidence_dict()],
    "missing-launches": _without("launches"),
    "missing-outputs": _without("outputs"),
    "missing-compute-ops": _without("compute_ops"),
    "missing-mutated-inputs": _without("mutated_inputs"),
    "missing-threads": _without("threads_after"),
    "launches-not-list": evidence_dict(launches={"kernel": "k"}),
    "launch-not-dict": evidence_dict(launches=["relu_kernel"]),
    "launch-missing-candidate": evidence_dict(launches=[{"kernel": "k", "grid": "(1,)"}]),
    "candidate-as-int": _launch(candidate=1),
    "candidate-as-string": _launch(candidate="true"),
    "kernel-not-string": _launch(kernel=7),
    "grid-as-list": _launch(grid=[1, 1]),
    "plain-as-int": _output(plain=1),
    "from-kernel-as-none": _output(from_kernel=None),
    "aliases-as-bool": _output(aliases=False),
    "output-missing-aliases": evidence_dict(outputs=[{"plain": True, "from_kernel": True}]),
    "compute-op-not-string": evidence_dict(compute_ops=[None]),
    "mutated-as-bool": evidence_dict(mutated_inputs=[True]),
    "mutated-as-float": evidence_dict(mutated_inputs=[0.0]),
    "threads-as-string": evidence_dict(threads_before="1"),
    "threads-as-bool": evidence_dict(threads_after=False),
}


@pytest.mark.parametrize("data", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_evidence_is_a_protocol_error(data):
    with pytest.raises(ProtocolError, match="malformed call evidence"):
        CallEvidence.parse(copy.deepcopy(data))


# -- the individual checks -------------------------------------------------------------------------


def test_honest_evidence_passes_every_check():
    assert checks.run_call_checks(honest(), ["aten::relu"]) == []


def test_no_launch_at_all():
    violation = checks.check_triton_launched(honest(launches=[]))
    assert violation.code == ViolationCode.NO_TRITON_LAUNCH
    assert "launched no Triton kernel defined in the solution" in violation.message
    assert "defined elsewhere" not in violation.message


def test_only_foreign_kernels_launched_are_named():
    evidence = honest(
        launches=[
            {"kernel": "lib_b", "candidate": False, "grid": "(1,)"},
            {"kernel": "lib_a", "candidate": False, "grid": "(1,)"},
            {"kernel": "lib_a", "candidate": False, "grid": "(2,)"},
        ]
    )
    violation = checks.check_triton_launched(evidence)
    assert violation.code == ViolationCode.NO_TRITON_LAUNCH
    assert "kernels defined elsewhere: lib_a, lib_b" in violation.message


def test_one_own_launch_among_foreign_ones_is_enough():
    evidence = honest(
        launches=[
            {"kernel": "lib", "candidate": False, "grid": "(1,)"},
            {"kernel": "mine", "candidate": True, "grid": "(1,)"},
        ]
    )
    assert checks.check_triton_launched(evidence) is None


def test_output_not_from_kernel_names_the_output():
    evidence = honest(
        outputs=[
            {"plain": True, "from_kernel": True, "aliases": None},
            {"plain": True, "from_kernel": False, "aliases": None},
        ]
    )
    violation = checks.check_output_from_kernel(evidence)
    assert violation.code == ViolationCode.OUTPUT_NOT_FROM_KERNEL
    assert violation.message.startswith("output 1 was not written")


def test_no_outputs_means_nothing_to_prove():
    assert checks.check_output_from_kernel(honest(outputs=[])) is None


@pytest.mark.parametrize(
    ("candidate_ops", "reference_ops", "fallback"),
    [
        (["aten::relu"], ["aten::relu"], True),
        (["aten::relu_"], ["aten::relu"], True),
        (["aten::mm", "aten::add"], ["aten::addmm"], True),
        (["aten::mul"], ["aten::relu"], False),
        ([], ["aten::relu"], False),
        (["aten::mm"], ["aten::addmm", "aten::gelu"], False),
        (["aten::relu"], [], False),
    ],
)
def test_pytorch_fallback(candidate_ops, reference_ops, fallback):
    violation = checks.check_no_pytorch_fallback(honest(compute_ops=candidate_ops), reference_ops)
    assert (violation is not None) is fallback
    if fallback:
        assert violation.code == ViolationCode.PYTORCH_FALLBACK
        assert "ran every compute op of the reference in PyTorch" in violation.message


def test_fallback_message_lists_the_canonical_reference_ops():
    violation = checks.check_no_pytorch_fallback(
        honest(compute_ops=["aten::mm", "aten::relu_"]), ["aten::addmm", "aten::relu"]
    )
    assert "(aten::matmul, aten::relu)" in violation.message


def test_input_mutation_lists_the_inputs():
    violation = checks.check_inputs_unchanged(honest(mutated_inputs=[0, 2]))
    assert violation.code == ViolationCode.INPUT_MUTATION
    assert "modified input tensor(s) 0, 2" in violation.message
    assert checks.check_inputs_unchanged(honest()) is None


@pytest.mark.parametrize("what", ["input", "parameter"])
def test_output_aliasing(what):
    violation = checks.check_output_not_aliased(
        honest(outputs=[{"plain": True, "from_kernel": True, "aliases": what}])
    )
    assert violation.code == ViolationCode.OUTPUT_ALIASES_INPUT
    assert violation.message == f"output 0 shares memory with an {what}; return a new tensor"


def test_output_not_plain():
    violation = checks.check_output_plain(
        honest(outputs=[{"plain": False, "from_kernel": True, "aliases": None}])
    )
    assert violation.code == ViolationCode.OUTPUT_NOT_PLAIN_TENSOR
    assert checks.check_output_plain(honest()) is None


def test_checks_report_the_first_offending_output_only():
    outputs = [
        {"plain": False, "from_kernel": False, "aliases": "input"},
        {"plain": False, "from_kernel": False, "aliases": "parameter"},
    ]
    found = checks.run_call_checks(honest(outputs=outputs), [])
    assert [v.message.split(" ")[1] for v in found] == ["0", "0", "0"]


def test_run_call_checks_collects_every_violation_in_a_fixed_order():
    evidence = honest(
        launches=[],
        compute_ops=["aten::relu"],
        outputs=[{"plain": False, "from_kernel": False, "aliases": "input"}],
        mutated_inputs=[0],
    )
    found = codes(checks.run_call_checks(evidence, ["aten::relu"]))
    expected = [
        "no_triton_launch",
        "output_not_from_kernel",
        "pytorch_fallback",
        "input_mutation",
        "output_aliases_input",
        "output_not_plain_tensor",
    ]
    assert sorted(found) == sorted(expected)
    assert [c for c in found if c in expected] == expected  # relative order is stable
    assert codes(checks.run_call_checks(evidence, ["aten::relu"])) == found


def test_every_check_returns_a_violation_or_none_and_never_raises():
    worst = honest(
        launches=[],
        compute_ops=["aten::relu"],
        mutated_inputs=[0, 1, 2],
        outputs=[{"plain": False, "from_kernel": False, "aliases": "input"}] * 3,
    )
    found = checks.run_call_checks(worst, ["aten::relu"])
    assert len(found) >= 5  # the loop below must have something to check
    for violation in found:
        assert isinstance(violation, Violation)
        assert violation.code in {c.value for c in ViolationCode}
        assert violation.message.strip()


def test_a_thread_left_running_is_a_violation():
    violation = checks.check_no_background_thread(honest(threads_before=1, threads_after=2))
    assert violation.code == ViolationCode.BACKGROUND_THREAD
    assert "started 1 thread(s)" in violation.message
    assert checks.check_no_background_thread(honest(threads_before=3, threads_after=2)) is None
    assert "background_thread" in codes(checks.run_call_checks(honest(threads_after=4), []))


# -- host reads and kernels that are not Triton (second wave) ------------------------------------


def test_the_host_read_budget_is_64_elements_inclusive():
    assert checks.HOST_READ_BUDGET == 64
    assert checks.check_no_host_compute(honest(host_reads=[64, ["Tensor.item() ..."]])) is None
    violation = checks.check_no_host_compute(honest(host_reads=[65, ["Tensor.numpy() of 65 element(s)"]]))
    assert violation.code == ViolationCode.HOST_COMPUTE
    assert "65 input-derived values" in violation.message and "Tensor.numpy()" in violation.message
    assert "host_compute" in codes(checks.run_call_checks(honest(host_reads=[10_000, []]), []))


def test_kernel_findings_are_python_in_kernel():
    assert checks.check_kernels_are_triton(honest()) is None
    findings = ["line 3: kernel k refers to helper (a Python function), which is not Triton"]
    violation = checks.check_kernels_are_triton(honest(kernel_findings=findings))
    assert violation.code == ViolationCode.PYTHON_IN_KERNEL and "refers to helper" in violation.message


def test_new_evidence_fields_parse_with_defaults_and_compiled_names():
    evidence = honest(launches=[{"kernel": "k", "candidate": True, "grid": "(1,)", "compiled": "k_0d1d"}],
                      host_reads=[3, ["a"]], kernel_findings=["f"])
    assert evidence.launches[0].compiled == "k_0d1d"
    assert evidence.host_read_elements == 3 and evidence.host_read_examples == ("a",)
    assert evidence.kernel_findings == ("f",)
    assert honest().host_read_elements == 0 and honest().kernel_findings == ()


@pytest.mark.parametrize("overrides", [
    {"host_reads": [1]},
    {"host_reads": ["1", []]},
    {"host_reads": [-1, []]},
    {"host_reads": [True, []]},
    {"host_reads": [1, "examples"]},
    {"kernel_findings": "one"},
    {"kernel_findings": [1]},
    {"compute_work": [1]},
    {"compute_work": [1, 2 ** 70]},
    {"refused": {"a": 1}},
    {"launches": [{"kernel": "k", "candidate": True, "grid": "(1,)", "compiled": 5}]},
    {"mutated_inputs": list(range(checks.MAX_EVIDENCE_ITEMS + 1))},
], ids=["host-reads-short", "host-reads-str", "host-reads-negative", "host-reads-bool", "examples-str",
        "findings-str", "findings-int", "work-short", "work-huge", "refused-dict", "compiled-int", "too-many-items"])
def test_malformed_new_fields_are_protocol_errors(overrides):
    with pytest.raises(ProtocolError, match="malformed call evidence"):
        CallEvidence.parse(evidence_dict(**overrides))


def test_evidence_that_is_not_an_object_is_a_protocol_error():
    for data in (None, [], "evidence", 5):
        with pytest.raises(ProtocolError):
            CallEvidence.parse(data)


# -- every evidence field, valid and malformed; every check's code and message (issue 14) -------------
# Found by mutation testing (benchmarks/mutation.py): the tampered/refused/foreign-thread/autotune fields
# and the three checks built on them were reached only by the slow end-to-end corpus.


def test_harness_refusal_thread_and_autotune_fields_parse():
    evidence = honest(
        tampered=["torch.allclose", "time.perf_counter"],
        refused=["import ctypes", "os.system"],
        compute_work=[3, 7],
        foreign_thread_launches=2,
        autotune=[{"kernel": "k", "config": "BLOCK=64", "index": 1, "of": 4}],
    )
    assert evidence.tampered == ("torch.allclose", "time.perf_counter")
    assert evidence.refused == ("import ctypes", "os.system")
    assert evidence.compute_work == (3, 7)  # (elements, flops), in that order
    assert evidence.foreign_thread_launches == 2
    assert evidence.autotune == (("k", "BLOCK=64", 1, 4),)
    defaults = honest()
    assert (defaults.tampered, defaults.refused, defaults.compute_work, defaults.foreign_thread_launches,
            defaults.autotune) == ((), (), (0, 0), 0, ())


def test_long_evidence_lists_are_cut_to_their_caps():
    evidence = honest(host_reads=[9, [f"r{i}" for i in range(9)]], kernel_findings=[f"f{i}" for i in range(21)],
                      autotune=[{"kernel": f"k{i}", "config": "c", "index": 0, "of": 1} for i in range(65)])
    assert evidence.host_read_examples == tuple(f"r{i}" for i in range(8))
    assert evidence.kernel_findings == tuple(f"f{i}" for i in range(20))
    assert [a[0] for a in evidence.autotune] == [f"k{i}" for i in range(64)]


def test_list_and_count_limits_are_inclusive_below_and_exclusive_above():
    assert len(honest(compute_ops=["aten::add"] * checks.MAX_EVIDENCE_ITEMS).compute_ops) == 10_000
    with pytest.raises(ProtocolError, match="a list of 10001 items exceeds 10000"):
        honest(compute_ops=["aten::add"] * (checks.MAX_EVIDENCE_ITEMS + 1))
    assert honest(foreign_thread_launches=2 ** 62 - 1).foreign_thread_launches == 2 ** 62 - 1
    with pytest.raises(ProtocolError, match="a count out of range: 4611686018427387904"):
        honest(foreign_thread_launches=2 ** 62)


@pytest.mark.parametrize(("overrides", "reason"), [
    ({"tampered": [1]}, "TypeError: expected a string, got int"),
    ({"tampered": "torch.allclose"}, "TypeError: expected a list, got str"),
    ({"refused": [None]}, "TypeError: expected a string, got NoneType"),
    ({"foreign_thread_launches": -1}, "TypeError: a count out of range: -1"),
    ({"foreign_thread_launches": True}, "TypeError: expected an int, got bool"),
    ({"foreign_thread_launches": 1.0}, "TypeError: expected an int, got float"),
    ({"autotune": [{"kernel": "k", "config": "c", "index": 0}]}, "KeyError: 'of'"),
    ({"autotune": [{"config": "c", "index": 0, "of": 1}]}, "KeyError: 'kernel'"),
    ({"autotune": [{"kernel": "k", "index": 0, "of": 1}]}, "KeyError: 'config'"),
    ({"autotune": [{"kernel": "k", "config": "c", "of": 1}]}, "KeyError: 'index'"),
    ({"autotune": [{"kernel": "k", "config": 3, "index": 0, "of": 1}]}, "TypeError: expected a string, got int"),
    ({"autotune": [{"kernel": "k", "config": "c", "index": -1, "of": 1}]}, "TypeError: a count out of range: -1"),
    ({"autotune": [{"kernel": "k", "config": "c", "index": 0, "of": "1"}]}, "TypeError: expected an int, got str"),
    ({"autotune": {"kernel": "k"}}, "TypeError: expected a list, got dict"),
    ({"compute_work": [1, 2, 3]}, r"TypeError: compute_work must be two counts"),
    ({"moved_elements": [1]}, r"TypeError: moved_elements must be two counts"),
    ({"moved_elements": 5}, r"TypeError: expected a list, got int"),
    ({"compute_work": [-1, 2]}, "TypeError: a count out of range: -1"),
    ({"host_reads": [1, [], 2]}, r"TypeError: host_reads must be \[elements, examples\]"),
    ({"launches": [{"kernel": "k", "candidate": 1, "grid": "(1,)"}]}, "TypeError: expected a bool, got int"),
    ({"threads_before": "1"}, "TypeError: expected an int, got str"),
])
def test_malformed_fields_name_the_reason(overrides, reason):
    with pytest.raises(ProtocolError, match=f"^malformed call evidence: {reason}"):
        CallEvidence.parse(evidence_dict(**overrides))


def test_the_reason_of_a_malformed_evidence_is_cut_to_300_characters():
    with pytest.raises(ProtocolError) as info:
        CallEvidence.parse(evidence_dict(foreign_thread_launches=10 ** 400))
    prefix = "malformed call evidence: TypeError: "
    message = str(info.value)
    assert message.startswith(prefix + "a count out of range: 1000")
    assert len(message) == len(prefix) + 300


def test_evidence_that_is_not_an_object_names_its_type():
    with pytest.raises(ProtocolError, match="^malformed call evidence: TypeError: evidence must be an object, got "
                                            "list"):
        CallEvidence.parse([])


def test_replaced_harness_functions_are_tampering_naming_the_first_eight():
    assert checks.check_harness_untouched(honest()) is None
    names = [f"f{i}" for i in range(9)]
    violation = checks.check_harness_untouched(honest(tampered=names))
    assert violation == Violation(ViolationCode.HARNESS_TAMPERING,
                                  "the candidate replaced functions the evaluator relies on: " + ", ".join(names[:8]))


def test_refused_operations_are_forbidden_constructs_naming_the_first_six():
    assert checks.check_nothing_refused(honest()) is None
    refused = [f"op{i}" for i in range(7)]
    violation = checks.check_nothing_refused(honest(refused=refused))
    assert violation == Violation(ViolationCode.FORBIDDEN_CONSTRUCT,
                                  "the candidate attempted operations refused at run time: " + "; ".join(refused[:6]))


def test_launches_from_another_thread_are_a_background_thread():
    violation = checks.check_no_background_thread(honest(foreign_thread_launches=2))
    assert violation == Violation(ViolationCode.BACKGROUND_THREAD,
                                  "2 kernel launch(es) came from another thread; do all work inside the call, "
                                  "on its own thread")
    # the foreign launches are reported even when no thread is left running
    assert checks.check_no_background_thread(honest(foreign_thread_launches=1, threads_after=1)) is not None
    left = checks.check_no_background_thread(honest(threads_before=1, threads_after=3))
    assert left == Violation(ViolationCode.BACKGROUND_THREAD,
                             "the forward started 2 thread(s) that were still running when it returned; do all "
                             "work inside the call")


def test_python_in_kernel_and_host_compute_messages_show_the_first_three_findings():
    violation = checks.check_kernels_are_triton(honest(kernel_findings=["a", "b", "c", "d"]))
    assert violation == Violation(ViolationCode.PYTHON_IN_KERNEL, "a; b; c")
    host = checks.check_no_host_compute(honest(host_reads=[100, ["a", "b", "c", "d"]]))
    assert "(budget 64: a; b; c)" in host.message and "d" not in host.message.split("budget")[1].split(")")[0]


def test_messages_of_the_launch_output_and_fallback_checks():
    launched = checks.check_triton_launched(honest(launches=[]))
    assert launched.message == ("the forward launched no Triton kernel defined in the solution; every forward must "
                                "do its work in the solution's own @triton.jit kernels")
    not_from = checks.check_output_from_kernel(honest(outputs=[{"plain": True, "from_kernel": False, "aliases": None}]))
    assert not_from.message.endswith("(its storage was never a kernel argument); allocate the output and pass it "
                                     "to the kernel that computes it")
    covered = checks.check_no_pytorch_fallback(honest(compute_ops=["aten::relu"]), ["aten::relu"])
    assert covered.message.endswith("; compute them in the solution's Triton kernels instead")


def test_the_fallback_by_work_share_reaches_run_call_checks():
    # all the reference's elements computed by PyTorch ops (its ops not all present): a fallback by work
    evidence = honest(compute_ops=["aten::add"], compute_work=[1000, 0])
    violation = checks.check_no_pytorch_fallback(evidence, ["aten::relu"], (1000, 0))
    assert violation is not None and violation.code == ViolationCode.PYTORCH_FALLBACK
    assert violation.message.startswith("the forward did the reference's work in PyTorch: ")
    assert violation.message.endswith("; do it in Triton kernels")
    assert checks.check_no_pytorch_fallback(evidence, ["aten::relu"], (1001, 0)) is None
    assert "pytorch_fallback" in codes(checks.run_call_checks(evidence, ["aten::relu"], (1000, 0)))
    assert "pytorch_fallback" not in codes(checks.run_call_checks(evidence, ["aten::relu"]))
