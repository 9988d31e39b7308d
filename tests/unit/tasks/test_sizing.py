"""CPU-size variants (tritongym.tasks.sizing) and the pre-flight estimate (tritongym.tasks.preflight).

The fitting tests run the audit's real meta-device probe subprocess; problems here are written to
be small so each probe answers in well under a second once torch is imported.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tritongym.errors import OptionsError, ProblemError
from tritongym.tasks import Problem
from tritongym.tasks.preflight import check, preflight
from tritongym.tasks.sizing import (
    CpuBudget,
    SizeChange,
    SizingRecord,
    SizingStatus,
    _Slot,
    apply_record,
    at_size,
    changes_at,
    fit_cpu_size,
    floor_of,
    is_scalable,
    parse_size,
    rewrite,
    scaled_value,
    size_constants,
)

ELEMENTWISE = (Path(__file__).resolve().parents[2] / "fixtures" / "problems" / "relu_kernelbench_size.py").read_text()

CONV = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride=stride, groups=groups)

    def forward(self, x):
        return self.conv(x)

batch_size = 16
in_channels = 3
out_channels = 64
kernel_size = 3
stride = 2
groups = 32
height = width = 256
depth, length = 24, 4095
input_shape = (32768,)
N = 2048 * 2

def get_inputs():
    return [torch.rand(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, stride, 1]
'''

HARDCODED = ELEMENTWISE.replace("torch.rand(batch_size, dim)", "torch.rand(4096, 393216)").replace(
    "batch_size = 4096\ndim = 393216\n", "")


def problem(source: str, name: str = "p") -> Problem:
    return Problem.from_source(source, name=name)


def test_size_constants_finds_every_module_level_integer_form():
    slots = {s.name: s.value for s in size_constants(CONV)}
    assert slots["batch_size"] == 16 and slots["out_channels"] == 64
    assert slots["height=width"] == 256            # chained assignment: one constant
    assert slots["depth"] == 24 and slots["length"] == 4095  # tuple unpacking
    assert slots["input_shape[0]"] == 32768        # a shape tuple's element
    assert slots["N"] == 4096                      # arithmetic of literals


def test_structure_and_small_values_are_never_scaled():
    slots = {s.name: s for s in size_constants(CONV)}
    assert not is_scalable(slots["kernel_size"]) and not is_scalable(slots["stride"])
    assert not is_scalable(slots["groups"])        # ≥ 16 but named as structure: channels must divide by it
    assert not is_scalable(slots["in_channels"])   # 3: below the scalable minimum
    assert is_scalable(slots["out_channels"]) and is_scalable(slots["height=width"])


def test_floors_keep_every_dimension_meaningful():
    batch = _Slot("batch_size", 16, (1, 0), (1, 2))
    dim = _Slot("dim", 393216, (1, 0), (1, 6))
    assert scaled_value(batch, 30) == 2            # a batch may shrink to 2, never to 1
    assert scaled_value(dim, 30) == 8              # any other size stops at 8
    assert floor_of(_Slot("dim", 20, (1, 0), (1, 2))) == 8
    assert floor_of(_Slot("dim", 5, (1, 0), (1, 1))) == 5  # never raised above its original


def test_ragged_sizes_stay_ragged():
    ragged = _Slot("dim2", 4095, (1, 0), (1, 4))
    for halvings in range(1, 8):
        value = scaled_value(ragged, halvings)
        assert value % 16 == 4095 % 16, (halvings, value)  # the masked tail KernelBench tests is kept


def test_rewrite_marks_the_variant_and_changes_only_the_named_constants():
    changes = changes_at(ELEMENTWISE, 4)
    assert {c.name for c in changes} == {"batch_size", "dim"}
    source = rewrite(ELEMENTWISE, changes)
    variant = problem(source)
    assert variant.size == "cpu" and problem(ELEMENTWISE).size == "original"
    assert variant.size_note == "batch_size 4096->256, dim 393216->24576"
    assert "batch_size = 256\ndim = 24576\n" in source
    assert source.split("\n", 1)[1].replace("256", "4096", 1).replace("24576", "393216", 1) == ELEMENTWISE


def test_rewrite_refuses_a_source_that_no_longer_matches_its_record():
    with pytest.raises(ProblemError, match="changed since its CPU size was chosen"):
        rewrite(ELEMENTWISE, [SizeChange("batch_size", 1024, 16)])


def test_fit_scales_an_oversized_problem_into_the_budget():
    budget = CpuBudget()
    record = fit_cpu_size(problem(ELEMENTWISE, "relu"), budget)
    assert record.status == SizingStatus.SCALED
    assert record.total_bytes is not None and record.total_bytes <= budget.max_bytes
    # the smallest scale that fits: one halving fewer would be over the budget
    bigger = dict((c.name, c.scaled) for c in changes_at(ELEMENTWISE, record.halvings - 1))
    assert 4 * 2 * bigger["batch_size"] * bigger["dim"] > budget.max_bytes
    variant = apply_record(problem(ELEMENTWISE), record)
    assert variant.size == "cpu" and variant.content_hash != problem(ELEMENTWISE).content_hash


def test_fit_leaves_a_small_problem_unchanged_and_explains_a_hardcoded_one():
    small = ELEMENTWISE.replace("batch_size = 4096", "batch_size = 4").replace("dim = 393216", "dim = 1000")
    assert fit_cpu_size(problem(small)).status == SizingStatus.UNCHANGED
    record = fit_cpu_size(problem(HARDCODED))
    assert record.status == SizingStatus.CANNOT
    assert "not module-level constants" in (record.reason or "")


def test_fit_skips_scales_at_which_the_problem_own_shape_checks_fail():
    # The forward only accepts a row length divisible by 3072: most power-of-two scales break it.
    strict = ELEMENTWISE.replace("return torch.relu(x)",
                                 "assert x.shape[1] % 3072 == 0, 'rows must hold whole 3072-blocks'\n"
                                 "        return torch.relu(x)")
    record = fit_cpu_size(problem(strict), CpuBudget(max_bytes=64 << 20))
    assert record.status == SizingStatus.SCALED
    dim = next(c.scaled for c in record.changes if c.name == "dim")
    assert dim % 3072 == 0


@pytest.mark.slow  # real reference runs at several sizes: the full tier
def test_fit_accepts_a_heavy_problem_at_its_floors_within_the_hard_limits():
    # 8 MiB of weights the module constants cannot shrink: over the preferred 4 MiB, under the hard 32.
    heavy = ELEMENTWISE.replace("super().__init__()",
                                "super().__init__()\n        self.w = nn.Parameter(torch.ones(2048, 1024))")
    heavy = heavy.replace("return torch.relu(x)", "return torch.relu(x) + self.w.sum()")
    record = fit_cpu_size(problem(heavy))
    assert record.status == SizingStatus.SCALED and "over the preferred CPU budget" in (record.reason or "")
    assert {c.name: c.scaled for c in record.changes} == {"batch_size": 2, "dim": 8}
    huge = heavy.replace("torch.ones(2048, 1024)", "torch.ones(8192, 2048)")  # 64 MiB: over the hard limit
    assert fit_cpu_size(problem(huge)).status == SizingStatus.CANNOT


@pytest.mark.slow  # real reference runs at several sizes: the full tier
def test_a_problem_whose_shape_rules_forbid_small_sizes_says_so():
    strict = ELEMENTWISE.replace("return torch.relu(x)",
                                 "assert x.shape[1] >= 100000, 'rows of at least 100000'\n        return torch.relu(x)")
    record = fit_cpu_size(problem(strict))
    assert record.status == SizingStatus.CANNOT
    assert "smallest scale that runs" in (record.reason or "") and "rows of at least 100000" in record.reason


@pytest.mark.slow  # real reference runs at several sizes: the full tier
def test_a_problem_that_only_runs_at_its_original_size_keeps_it_when_within_the_hard_limits():
    # 6 MiB at its original size (over the preferred 4 MiB, within the hard 32); every smaller scale breaks it.
    exact = ELEMENTWISE.replace("batch_size = 4096\ndim = 393216", "batch_size = 24\ndim = 32768").replace(
        "return torch.relu(x)", "assert x.shape[1] == 32768, 'rows of exactly 32768'\n        return torch.relu(x)")
    record = fit_cpu_size(problem(exact))
    assert record.status == SizingStatus.UNCHANGED and "over the preferred CPU budget" in (record.reason or "")


def test_at_size_original_is_identity_and_cpu_lists_refusals():
    problems = [problem(ELEMENTWISE, "relu"), problem(HARDCODED, "hard")]
    assert at_size(problems, "original").problems == problems
    sized = at_size(problems, "cpu")
    assert [p.name for p in sized.problems] == ["relu"] and sized.problems[0].size == "cpu"
    assert [p.name for p, _ in sized.refused] == ["hard"]
    assert sized.records["hard"].status == SizingStatus.CANNOT
    with pytest.raises(OptionsError):
        parse_size("tiny")


def test_record_round_trips_through_its_json_form():
    record = SizingRecord("kernelbench/level1/19", "19_ReLU", SizingStatus.SCALED,
                          (SizeChange("batch_size", 4096, 16),), 8, 123, 0, None)
    assert SizingRecord.from_dict(record.to_dict()) == record


def test_preflight_refuses_the_original_size_with_the_fix_named():
    results = preflight([problem(ELEMENTWISE, "relu")], memory_limit_gb=8, timeout=180, size="original")
    refusal = results["relu"].refusal
    assert refusal is not None and "12.0 GiB" in refusal and "--size cpu" in refusal
    assert "--memory-limit-gb" in refusal
    small = ELEMENTWISE.replace("batch_size = 4096", "batch_size = 4").replace("dim = 393216", "dim = 1000")
    assert preflight([problem(small, "small")], memory_limit_gb=8, timeout=180)["small"].refusal is None


def test_preflight_time_check_names_the_timeout():
    result = check(problem(ELEMENTWISE, "mm"), 1 << 20, int(1e14), memory_limit_gb=8, timeout=60, size="original")
    assert result.refusal is not None and "--timeout" in result.refusal and "GFLOP" in result.refusal


def test_problem_size_is_in_every_result_and_a_shape_mismatch_is_not_error_0():
    from tritongym.evaluator.result import EvalResult, Status, TrialReport

    result = EvalResult(status=Status.INCORRECT, problem_id="kernelbench/level1/19", problem_size="cpu",
                        trials=[TrialReport(0, "get_inputs", False, None, None, message="shape (4,) != (4, 1)")])
    assert EvalResult.from_dict(result.to_dict()).problem_size == "cpu"
    assert EvalResult.from_dict({"status": "ok"}).problem_size == "original"  # older producers
    text = result.summary()
    assert "problem: kernelbench/level1/19 (CPU size)" in text
    assert "max abs error n/a (1 not comparable" in text and "max abs error 0" not in text


def _dataset():
    import os
    from pathlib import Path

    path = Path(os.environ.get("TRITONGYM_KERNELBENCH_JSONL", "") or Path(__file__).resolve().parents[3].parent
                / "shared" / "datasets" / "kernelbench" / "kernelbench_l1-l3.jsonl")
    if not path.is_file():
        pytest.skip(f"the shared KernelBench dataset is absent: {path} (clone with shared/ beside the repo, or set "
                    "TRITONGYM_KERNELBENCH_JSONL)")
    return path


def test_the_shipped_table_covers_kernelbench_and_every_change_keeps_the_rules():
    from tritongym.tasks import builtin_suite, load_problems
    from tritongym.tasks.flags import audit_flags
    from tritongym.tasks.sizing import shipped_sizes

    table = shipped_sizes()
    problems = load_problems(_dataset())
    assert all(p.content_hash in table for p in problems + builtin_suite())
    flagged = audit_flags()
    assert any(flagged.get(apply_record(p, table[p.content_hash]).content_hash) for p in problems[:40])
    for problem in problems:
        record = table[problem.content_hash]
        if record.status == SizingStatus.UNCHANGED:
            assert apply_record(problem, record) is problem
            continue
        if record.status != SizingStatus.SCALED:
            assert record.status == SizingStatus.CANNOT and record.reason, problem.problem_id
            continue
        slots = {s.name: s for s in size_constants(problem.source)}
        for change in record.changes:
            slot = slots[change.name]
            assert is_scalable(slot) and floor_of(slot) <= change.scaled < change.original, change
        variant = apply_record(problem, record)
        assert variant.size == "cpu" and variant.problem_id == problem.problem_id
        entry = flagged.get(variant.content_hash)  # the audit of the variant, where it found something
        assert entry is None or entry.problem_id == problem.problem_id
    cannot = [r for r in table.values() if r.status == SizingStatus.CANNOT]
    assert all(r.problem_id.startswith("kernelbench/level3/") for r in cannot)  # levels 1 and 2 all have one
