"""Metric code against hand-computed figures (speedups as a GPU run would produce them)."""

from __future__ import annotations

import math

import pytest
from tests.env.trajectories import cpu_run, gpu_run, trajectory, turn

from tritongym.bench import metrics


def test_fast_p_is_strict_and_over_all_items():
    correct = [True, True, False, True]
    speedup = [2.0, 1.1, 3.0, 0.5]  # the incorrect one is fast, and still a failure
    assert metrics.fast_p(correct, speedup, 0) == 0.75
    assert metrics.fast_p(correct, speedup, 1.0) == 0.5
    assert metrics.fast_p(correct, speedup, 2.0) == 0.0  # 2.0 is not > 2.0
    assert metrics.fast_p([True], [None], 1.0) is None


def test_geometric_mean():
    assert metrics.geometric_mean([2.0, 1.1, 0.5]) == pytest.approx(1.1 ** (1 / 3))
    assert metrics.geometric_mean([]) is None


def test_summary_of_a_gpu_run_matches_hand_computation():
    summary = metrics.summarize(gpu_run())
    assert summary["tasks"] == 4 and summary["speed_measured"]
    assert summary["correctness"]["value"] == 0.75
    fast = {p: entry["value"] for p, entry in summary["vs_eager"]["fast_p"].items()}
    # Final speedups: a 2.0 (the re-check, not the 2.5 selected), b 1.1, c incorrect, d 0.5.
    assert fast == {"0": 0.75, "1": 0.5, "1.2": 0.25, "1.5": 0.25, "2": 0.0}
    geo = summary["vs_eager"]["geomean_speedup_correct"]
    assert geo["value"] == pytest.approx((2.0 * 1.1 * 0.5) ** (1 / 3)) and geo["n"] == 3
    low, high = summary["correctness"]["ci95"]
    assert 0.0 <= low <= 0.75 <= high <= 1.0
    # Only the selection-time figures of task a carry a compile speedup; the final ones come from the re-check.
    assert summary["vs_compile"] is None


def test_winners_curse_compares_selection_and_recheck():
    curse = metrics.winners_curse(gpu_run())
    assert curse["rechecked"] == 1 and curse["failed_recheck"] == 0
    assert curse["selection_geomean_speedup"] == pytest.approx(2.5)
    assert curse["recheck_geomean_speedup"] == pytest.approx(2.0)
    assert curse["gap"] == pytest.approx(1.25)


def test_samples_are_averaged_within_a_task_first():
    runs = [
        trajectory("x", [turn(0, "ok", 3.0)], sample=0),
        trajectory("x", [turn(0, "incorrect")], sample=1),
        trajectory("y", [turn(0, "ok", 1.5)], sample=0),
    ]
    summary = metrics.summarize(runs)
    assert summary["correctness"]["value"] == pytest.approx(0.75)  # mean(1/2, 1)
    assert summary["vs_eager"]["fast_p"]["1.2"]["value"] == pytest.approx(0.75)
    assert summary["vs_eager"]["fast_p"]["2"]["value"] == pytest.approx(0.25)
    assert summary["vs_eager"]["geomean_speedup_correct"]["value"] == pytest.approx(math.sqrt(3.0 * 1.5))


def test_per_turn_and_best_by_turn():
    runs = [
        trajectory("p", [turn(0, "void"), turn(1, "compile_error"), turn(2, "ok", 1.1)]),
        trajectory("q", [turn(0, "ok", 1.3, completion_tokens=300), turn(1, "integrity_violation")]),
    ]
    rows = metrics.per_turn(runs)
    assert [r["n"] for r in rows] == [2, 2, 1]
    assert [r["correct_rate"] for r in rows] == [0.5, 0.0, 1.0]
    assert [r["best_correct_rate"] for r in rows] == [0.5, 0.5, 1.0]
    assert [r["void_rate"] for r in rows] == [0.5, 0.0, 0.0]
    assert [r["violation_rate"] for r in rows] == [0.0, 0.5, 0.0]
    assert [r["fast_1.2"] for r in rows] == [0.5, None, 0.0]
    assert [r["best_fast_1.2"] for r in rows] == [0.5, 0.5, 0.5]
    assert rows[0]["mean_completion_tokens"] == 400


def test_cpu_run_reports_correctness_only():
    summary = metrics.summarize(cpu_run())
    assert not summary["speed_measured"]
    assert summary["vs_eager"] is None and summary["vs_compile"] is None
    assert summary["correctness"]["value"] == pytest.approx(2 / 3)
    assert [r["best_correct_rate"] for r in summary["per_turn"]] == [pytest.approx(1 / 3), pytest.approx(2 / 3)]


def test_bootstrap_interval_is_deterministic_and_degenerate_for_constant_data():
    groups = [[1.0], [0.0], [1.0], [1.0]]
    first = metrics.bootstrap_ci(groups, lambda items: sum(items) / len(items))
    assert first == metrics.bootstrap_ci(groups, lambda items: sum(items) / len(items))
    assert first[0] < 0.75 < first[1]
    assert metrics.bootstrap_ci([[1.0], [1.0]], lambda items: sum(items) / len(items)) == (1.0, 1.0)
    assert metrics.bootstrap_ci([[1.0]], lambda items: 1.0) is None


def test_run_to_run_diff():
    before = cpu_run()
    after = [trajectory("a", [turn(0, "incorrect")]), trajectory("b", [turn(0, "ok")]),
             trajectory("c", [turn(0, "ok")]), trajectory("z", [turn(0, "ok")])]
    diff = metrics.compare(after, before)
    assert diff["shared_tasks"] == 3
    assert diff["gained"] == ["builtin/c"] and diff["lost"] == ["builtin/a"]
    assert diff["correctness_delta"]["value"] == pytest.approx(0.0)
    assert diff["only_current"] == ["builtin/z"]
    assert "fast_p_delta" not in diff


def test_a_compile_baseline_run_reports_its_speedups_against_torch_compile():
    runs = gpu_run()
    for traj in runs:
        traj["provenance"]["evaluator_options"] = {"baseline": "compile"}
    summary = metrics.summarize(runs)
    assert summary["baseline"] == "compile" and summary["vs_eager"] is None
    assert summary["vs_compile"]["fast_p"]["1.2"]["value"] == 0.25


def test_both_baselines_report_compile_speedups_beside_eager():
    runs = [trajectory("a", [turn(0, "ok", 2.0, compile_speedup=1.3)]),
            trajectory("b", [turn(0, "ok", 1.5, compile_speedup=0.9)])]
    summary = metrics.summarize(runs)
    assert summary["vs_eager"]["fast_p"]["1.2"]["value"] == 1.0
    assert summary["vs_compile"]["fast_p"]["1.2"]["value"] == 0.5
    assert summary["vs_compile"]["geomean_speedup_correct"]["value"] == pytest.approx(math.sqrt(1.3 * 0.9))


def test_violation_codes_and_per_task_rows():
    runs = gpu_run()
    runs[2]["turns"][1]["result"]["violations"] = [{"code": "pytorch_fallback", "message": "m"},
                                                    {"code": "output_not_from_kernel", "message": "m"}]
    runs[3]["turns"][0]["result"]["violations"] = [{"code": "pytorch_fallback", "message": "m"}]
    assert metrics.violation_codes(runs) == {"pytorch_fallback": 2, "output_not_from_kernel": 1}
    rows = {r["problem_id"]: r for r in metrics.per_task(runs)}
    assert rows["builtin/a"] == {"problem_id": "builtin/a", "name": "a", "samples": 1, "correct": 1,
                                 "best_speedup": 2.0, "rechecked": 1}
    assert rows["builtin/c"]["correct"] == 0 and rows["builtin/c"]["best_speedup"] is None
