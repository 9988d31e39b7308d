"""Tests for tritongym.bench.audit: flags on small hand-made problems, budgets, the tolerance rule, files.

The problems below are written into a temporary folder and audited once per module (one meta-device
probe, one reference worker each, 3 input seeds and 2 weight seeds) so the whole file stays near a
minute on a 2-core CPU; the pure functions are tested without any worker.
"""

from __future__ import annotations

import json
import math
import textwrap
import time

import pytest
import torch

from tritongym.bench import audit
from tritongym.bench.audit import (
    AuditFlag,
    AuditStats,
    AuditStatus,
    ProblemAudit,
    ToleranceOverride,
    max_excess,
    read_flags_json,
    recommend_tolerance,
    render_markdown,
    write_flags_json,
)
from tritongym.tasks import load_problem_file


def _problem(body: str, inputs: str, linear: bool = False) -> str:
    """A KernelBench-format problem whose forward is `body` (`self.linear` is a Linear(32, 32) if asked)."""
    forward = textwrap.indent(body, " " * 8)
    layer = "        self.linear = nn.Linear(32, 32)\n" if linear else ""
    return (
        "import time\nimport torch\nimport torch.nn as nn\n\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        f"        super().__init__()\n{layer}\n"
        "    def forward(self, x):\n"
        f"{forward}\n\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )


PROBLEMS = {
    # tanh(x)·1e-3: every output inside (−0.01, 0.01).
    "near_zero": _problem("return torch.tanh(x) * 1e-3", "torch.randn(16, 32)"),
    # The same constant whatever the input.
    "constant": _problem("return torch.full((x.shape[0],), 3.0)", "torch.randn(16, 32)"),
    # ReLU on torch.rand inputs in [0, 1): the identity on the task's own inputs.
    "uniform_relu": _problem("return torch.relu(x)", "torch.rand(16, 32)"),
    # Depends on the weights only.
    "input_insensitive": _problem("return self.linear.weight.sum(1).expand(x.shape[0], 32) + 0 * x.sum()",
                                  "torch.randn(16, 32)", linear=True),
    # Has weights that never reach the output.
    "weight_insensitive": _problem("return 2 * x + 0 * self.linear.weight.sum()", "torch.randn(16, 32)",
                                   linear=True),
    # A healthy task: a linear layer on sign-spanning inputs.
    "healthy": _problem("return self.linear(x)", "torch.randn(16, 32)", linear=True),
    # 16 GiB of inputs: must be skipped without allocating them.
    "oversized": _problem("return x", "torch.randn(1 << 20, 1 << 12)"),
    # A trial reply (inputs + outputs) over the channel's default 64 MiB frame limit.
    "large_trial": _problem("return 2 * x", "torch.randn(2, 9_000_000)"),
    # The reference itself raises.
    "raises": _problem("raise ValueError('boom in the reference forward')", "torch.randn(4, 32)"),
}
OPTIONS = {"input_seeds": 3, "weight_seeds": 2, "memory_budget_gb": 1.0, "time_budget_s": 30.0}


@pytest.fixture(scope="module")
def audits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("audit_problems")
    problems = []
    for name, source in PROBLEMS.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
        problems.append(load_problem_file(folder / f"{name}.py"))
    results = audit.audit_problems(problems, progress=None, **OPTIONS)
    return {result.name: result for result in results}


def test_near_zero_output_is_flagged_and_tightened(audits):
    result = audits["near_zero"]
    assert result.status == AuditStatus.AUDITED
    # Every output is within atol=1e-2 of every other: input-insensitive at that tolerance too.
    assert {AuditFlag.NEAR_ZERO_OUTPUT, AuditFlag.NEAR_CONSTANT_OUTPUT, AuditFlag.INPUT_INSENSITIVE,
            AuditFlag.ZEROS_PASS, AuditFlag.CONSTANT_PASS, AuditFlag.MEAN_OUTPUT_PASS} == set(result.flags)
    assert result.stats.max_abs_output < 1e-3
    # Zeros pass up to atol ≈ max|out| ≈ 1e-3, so the override must sit below it.
    assert result.override is not None and result.override.atol <= 1e-4
    assert result.stats.reference_rel_error is not None and result.stats.reference_rel_error < 1e-6


def test_constant_output_is_flagged_without_a_possible_override(audits):
    result = audits["constant"]
    assert {AuditFlag.INPUT_INSENSITIVE, AuditFlag.NEAR_CONSTANT_OUTPUT, AuditFlag.CONSTANT_PASS,
            AuditFlag.MEAN_OUTPUT_PASS} <= set(result.flags)
    assert result.stats.input_seed_max_diff == 0.0 and result.stats.fraction_std_below == 1.0
    assert result.override is None and "no tolerance separates them" in result.override_note


def test_relu_on_uniform_inputs_is_the_identity_on_task_inputs_only(audits):
    result = audits["uniform_relu"]
    assert {AuditFlag.PASSTHROUGH_PASS, AuditFlag.IDENTITY_ON_TASK_INPUTS} <= set(result.flags)
    assert result.stats.trivial_passes["input 0"] == OPTIONS["input_seeds"]
    assert result.stats.negated_passthrough is False
    assert result.override is None  # the passthrough is exact: only sign-spanning inputs defeat it


def test_input_insensitive_output_is_flagged(audits):
    result = audits["input_insensitive"]
    assert AuditFlag.INPUT_INSENSITIVE in result.flags and AuditFlag.MEAN_OUTPUT_PASS in result.flags
    assert AuditFlag.WEIGHT_INSENSITIVE not in result.flags
    assert result.stats.weight_seed_max_diff > 0.1


def test_weight_insensitive_output_is_flagged_and_needs_no_tolerance_change(audits):
    result = audits["weight_insensitive"]
    assert result.flags == (AuditFlag.WEIGHT_INSENSITIVE,)
    assert result.stats.weight_seed_max_diff == 0.0
    assert result.override is None and "would not address" in result.override_note


def test_healthy_problem_has_no_flags(audits):
    result = audits["healthy"]
    assert result.status == AuditStatus.AUDITED and result.flags == ()
    assert result.override is None and result.override_note is None
    assert result.stats.repeat_max_diff == 0.0
    assert all(count == 0 for count in result.stats.trivial_passes.values())
    assert set(result.stats.trivial_passes) == {"zeros", "constant", "mean of other seeds", "input 0"}


def test_problem_with_large_trials_is_audited(audits):
    result = audits["large_trial"]
    assert result.status == AuditStatus.AUDITED, result.reason
    assert result.flags == ()


def test_oversized_problem_is_skipped_from_its_meta_estimate(audits):
    result = audits["oversized"]
    assert result.status == AuditStatus.SKIPPED and result.stats is None
    assert result.estimate.input_bytes == 16 << 30
    # The output is the input itself: counted once.
    assert result.reason == ("inputs + parameters + outputs/intermediates ≈ 16.00 GiB > the 1 GiB "
                             "memory budget")


def test_oversized_problem_never_reaches_a_worker(audits, monkeypatch, tmp_path):
    def no_worker(*args, **kwargs):
        raise AssertionError("a skipped problem must not start a reference worker")

    monkeypatch.setattr(audit.run, "ReferenceRunner", no_worker)
    path = tmp_path / "oversized.py"
    path.write_text(PROBLEMS["oversized"], encoding="utf-8")
    problem = load_problem_file(path)
    result = audit.audit_problem(problem, estimate=audits["oversized"].estimate, **OPTIONS)
    assert result.status == AuditStatus.SKIPPED


def test_reference_that_raises_is_failed_with_its_error(audits):
    result = audits["raises"]
    assert result.status == AuditStatus.FAILED and result.flags == ()
    assert "boom in the reference forward" in result.reason


def test_slow_first_trial_is_skipped(tmp_path):
    path = tmp_path / "slow.py"
    path.write_text(_problem("time.sleep(5)\nreturn x", "torch.randn(4, 32)"), encoding="utf-8")
    started = time.monotonic()
    result = audit.audit_problem(load_problem_file(path), input_seeds=2, weight_seeds=1, time_budget_s=0.5)
    assert result.status == AuditStatus.SKIPPED
    assert "longer than the 0.5 s time budget" in result.reason
    assert time.monotonic() - started < 30


def test_invalid_options_are_refused():
    with pytest.raises(audit.OptionsError):
        audit.audit_problems([], input_seeds=1)
    with pytest.raises(audit.OptionsError):
        audit.audit_problems([], memory_budget_gb=0)


# ---- max_excess and the tolerance rule (no workers) ---------------------------------------------


def test_max_excess_matches_the_per_element_rule():
    expected = torch.tensor([1.0, -2.0, 0.5])
    predicted = torch.tensor([1.1, -2.0, 0.5])
    # |1.1 − 1| − r·1 is the worst element.
    assert max_excess(predicted, expected, [0.0, 0.05]) == pytest.approx([0.1, 0.05], abs=1e-6)
    assert max_excess(0.0, expected, [0.01])[0] == pytest.approx(2.0 - 0.02)


def test_max_excess_handles_special_values_and_integers():
    nan = float("nan")
    assert max_excess(torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0]), [0.0]) == [0.0]
    assert max_excess(torch.tensor([0.0, 1.0]), torch.tensor([nan, 1.0]), [0.0]) == [math.inf]
    assert max_excess(0.0, torch.tensor([3, 4]), [0.01]) == [math.inf]
    assert max_excess(torch.tensor([3, 4]), torch.tensor([3, 4]), [0.01]) == [-math.inf]
    assert max_excess(0.0, torch.empty(0), [0.01]) == [-math.inf]


def test_max_excess_is_chunked_consistently(monkeypatch):
    monkeypatch.setattr(audit.tolerance, "_CHUNK", 3)
    expected = torch.linspace(-1, 1, 10)
    predicted = expected.clone()
    predicted[7] += 0.5
    assert max_excess(predicted, expected, [0.0])[0] == pytest.approx(0.5, abs=1e-6)


def _grid_excess(values, rtols):
    """max_excess of a single-element prediction error `values` = (diff, |e|) over the rtols."""
    diff, magnitude = values
    return [diff - r * magnitude for r in rtols]


def test_recommend_tolerance_picks_the_fewest_factor_ten_steps():
    _, rtols = audit.tolerance_grid((1e-2, 1e-2))
    # Zeros on outputs of size 1e-3: zeros fail once atol < ~1e-3 (rtol barely matters).
    zeros = [_grid_excess((1e-3, 1e-3), rtols)]
    reference = [_grid_excess((1e-9, 1e-3), [r / 10 for r in rtols])]
    override, note = recommend_tolerance({"zeros": zeros}, reference)
    assert override == ToleranceOverride(atol=1e-4, rtol=1e-2)
    assert "every trivial output fails" in note


def test_recommend_tolerance_keeps_the_honest_margin():
    _, rtols = audit.tolerance_grid((1e-2, 1e-2))
    zeros = [_grid_excess((1e-3, 1e-3), rtols)]
    # The float32 reference is 1e-6 off: atol=1e-4 leaves a 100x margin; 1e-5 would not.
    noisy = [_grid_excess((2e-6, 1e-3), [r / 10 for r in rtols])]
    override, _ = recommend_tolerance({"zeros": zeros}, noisy)
    assert override == ToleranceOverride(atol=1e-4, rtol=1e-2)
    # Now the reference is as far off as the zeros: nothing separates them.
    hopeless = [_grid_excess((5e-4, 1e-3), [r / 10 for r in rtols])]
    override, note = recommend_tolerance({"zeros": zeros}, hopeless)
    assert override is None and "also fails the float32 reference" in note


def test_recommend_tolerance_reports_exact_predictors_and_missing_truth():
    _, rtols = audit.tolerance_grid((1e-2, 1e-2))
    exact = [_grid_excess((0.0, 1.0), rtols)]
    override, note = recommend_tolerance({"input 0": exact}, [[-1.0] * len(rtols)])
    assert override is None and "input 0 still pass" in note
    override, note = recommend_tolerance({"zeros": exact}, None)
    assert override is None and "float64" in note
    override, note = recommend_tolerance({}, None)
    assert override is None and "not needed" in note


def test_recommend_tolerance_tightens_rtol_for_concentrated_outputs():
    _, rtols = audit.tolerance_grid((1e-2, 1e-2))
    # A scalar loss ≈ 0.5 that moves by 1e-4 between seeds: the other seeds' mean passes
    # until atol and rtol·0.5 are both below 1e-4.
    mean = [_grid_excess((1e-4, 0.5), rtols)]
    reference = [_grid_excess((1e-8, 0.5), [r / 10 for r in rtols])]
    override, _ = recommend_tolerance({"mean of other seeds": mean}, reference)
    assert override == ToleranceOverride(atol=1e-5, rtol=1e-4)


# ---- the flags file and the report ----------------------------------------------------------------


def _audit(hash_: str, flags=(), status=AuditStatus.AUDITED, override=None, level=1) -> ProblemAudit:
    stats = AuditStats(input_seeds=5, weight_seeds=3, output_shapes=((4,),), first_trial_s=0.1,
                       max_abs_output=1e-3, mean_abs_output=1e-4, max_std_across_inputs=1e-4,
                       mean_std_across_inputs=1e-5, fraction_std_below=1.0, input_seed_max_diff=1e-4,
                       weight_seed_max_diff=None, repeat_max_diff=0.0, trivial_passes={"zeros": 5})
    audited = status == AuditStatus.AUDITED
    return ProblemAudit(problem_id=f"p/{hash_}", name=f"name_{hash_}", level=level, content_hash=hash_,
                        status=status, flags=tuple(flags), stats=stats if audited else None,
                        override=override, override_note="note" if flags else None,
                        reason=None if status == AuditStatus.AUDITED else "over budget")


def test_flags_json_format(tmp_path):
    path = tmp_path / "audit_flags.json"
    audits = [_audit("a", [AuditFlag.ZEROS_PASS], override=ToleranceOverride(1e-4, 1e-2)),
              _audit("b"), _audit("c", status=AuditStatus.SKIPPED),
              _audit("d", [AuditFlag.WEIGHT_INSENSITIVE])]
    write_flags_json(audits, path, generated="2026-11-22")
    document = json.loads(path.read_text())
    assert document == {
        "version": 1, "generated": "2026-11-22", "tool": "tritongym audit",
        "problems": {
            "a": {"problem_id": "p/a", "flags": ["zeros_pass"], "atol": 1e-4, "rtol": 1e-2, "note": "note"},
            "d": {"problem_id": "p/d", "flags": ["weight_insensitive"], "atol": None, "rtol": None,
                  "note": "note"},
        },
    }
    assert read_flags_json(path) == document


def test_flags_json_merges_with_an_existing_file(tmp_path):
    path = tmp_path / "audit_flags.json"
    write_flags_json([_audit("a", [AuditFlag.ZEROS_PASS]), _audit("b", [AuditFlag.ZEROS_PASS])], path)
    # A later run re-audits "a" (now clean) and adds "c"; "b" was not part of it and stays.
    write_flags_json([_audit("a"), _audit("c", [AuditFlag.CONSTANT_PASS])], path)
    assert sorted(read_flags_json(path)["problems"]) == ["b", "c"]
    write_flags_json([_audit("c", [AuditFlag.CONSTANT_PASS])], path, merge=False)
    assert sorted(read_flags_json(path)["problems"]) == ["c"]


def test_flags_json_is_what_the_evaluator_reads(tmp_path, monkeypatch):
    from tritongym.tasks import flags as task_flags

    path = tmp_path / "audit_flags.json"
    write_flags_json([_audit("a", [AuditFlag.ZEROS_PASS], override=ToleranceOverride(1e-4, 1e-2))], path)

    class Files:
        def __truediv__(self, name):
            assert name == "audit_flags.json"
            return path

    monkeypatch.setattr(task_flags.resources, "files", lambda package: Files())
    task_flags.audit_flags.cache_clear()
    try:
        entry = task_flags.audit_flags()["a"]
    finally:
        task_flags.audit_flags.cache_clear()
    assert (entry.flags, entry.atol, entry.rtol) == (("zeros_pass",), 1e-4, 1e-2)


def test_read_flags_json_rejects_unknown_flags(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"version": 1, "problems": {"x": {"problem_id": "x", "flags": ["made_up"],
                                                                  "atol": None, "rtol": None}}}))
    with pytest.raises(audit.ProblemError):
        read_flags_json(path)


def test_problem_audit_json_round_trip_is_strict_json():
    result = _audit("a", [AuditFlag.ZEROS_PASS])
    result = ProblemAudit(**{**result.__dict__, "stats": AuditStats(**{**result.stats.__dict__,
                                                                        "max_abs_output": math.inf})})
    data = json.loads(result.to_json())
    assert data["flags"] == ["zeros_pass"] and data["status"] == "audited"
    assert data["stats"]["max_abs_output"] is None


def test_problem_audit_round_trips_through_json(audits):
    for result in audits.values():
        assert ProblemAudit.from_dict(json.loads(result.to_json())) == result


def test_tolerance_grid_is_tidy():
    atols, rtols = audit.tolerance_grid((1e-2, 1e-2))
    assert atols == [1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8] and rtols == [1e-2, 1e-3, 1e-4, 1e-5, 1e-6]


def test_markdown_report_lists_every_section():
    text = render_markdown([_audit("a", [AuditFlag.ZEROS_PASS], override=ToleranceOverride(1e-4, 1e-2)),
                            _audit("b", level=2), _audit("c", status=AuditStatus.SKIPPED, level=None)],
                           {"command": "tritongym audit", "date": "2026-11-22"})
    assert "| command | tritongym audit |" in text
    assert "| level 1 | 1 | 1 | 0 | 0 | 1 |" in text and "| other | 1 | 0 | 1 | 0 | 0 |" in text
    assert "| `zeros_pass` | 1 | 0 | 0 | 1 |" in text
    assert "atol=0.0001, rtol=0.01" in text and "zeros: 5/5" in text
    assert "### Skipped problems (1)" in text and "over budget" in text
