"""Per-level tables (KernelBench's): correctness and fast_p per level, against eager and torch.compile."""

from __future__ import annotations

import pytest

from tritongym.bench import metrics


def sample(level: int | None, problem: str, status: str, speedup: float | None = None,
           compile_speedup: float | None = None, *, index: int = 0) -> dict:
    """One sample as `tritongym run --run-dir` stores it: a single-turn trajectory."""
    result = {"status": status, "correct": status == "ok", "speedup": speedup,
              "speedup_vs_compile": compile_speedup, "violations": []}
    return {"problem": problem, "problem_id": f"kernelbench/level{level}/{problem}" if level else f"builtin/{problem}",
            "level": level, "sample": index, "mode": "run", "best_turn": 0, "recheck": None,
            "turns": [{"turn": 0, "code": "code", "void": False, "status": status, "result": result,
                       "reward": 0.5 if status == "ok" else 0.0}]}


def test_each_level_gets_its_own_fast_p_against_eager_and_compile():
    run = [sample(1, "19", "ok", 2.5, 1.2), sample(1, "19", "incorrect", index=1),  # task mean 0.5
           sample(1, "23", "ok", 0.8, 0.6), sample(2, "7", "ok", 1.6, 1.1), sample(2, "8", "runtime_error")]
    rows = {row["level"]: row for row in metrics.per_level(run)}
    assert rows[1]["tasks"] == 2 and rows[1]["samples"] == 3
    assert rows[1]["correctness"] == pytest.approx(0.75)
    eager1 = {p: e["value"] for p, e in rows[1]["vs_eager"]["fast_p"].items()}
    assert eager1 == pytest.approx({"0": 0.75, "1": 0.25, "1.2": 0.25, "1.5": 0.25, "2": 0.25})
    compile1 = {p: e["value"] for p, e in rows[1]["vs_compile"]["fast_p"].items()}
    assert compile1 == pytest.approx({"0": 0.75, "1": 0.25, "1.2": 0.0, "1.5": 0.0, "2": 0.0})
    eager2 = {p: e["value"] for p, e in rows[2]["vs_eager"]["fast_p"].items()}
    assert eager2 == pytest.approx({"0": 0.5, "1": 0.5, "1.2": 0.5, "1.5": 0.5, "2": 0.0})
    assert rows[2]["correctness"] == 0.5
    summary = metrics.summarize(run, bootstrap=False)
    assert summary["kind"] == "run" and [r["level"] for r in summary["per_level"]] == [1, 2]


def test_a_compile_baseline_run_reports_speedup_as_the_compile_column():
    run = [sample(1, "19", "ok", 1.3)]
    run[0]["provenance"] = {"evaluator_options": {"baseline": "compile"}}
    (row,) = metrics.per_level(run, "compile")
    assert row["vs_eager"] is None and row["vs_compile"]["fast_p"]["1"]["value"] == 1.0


def test_levels_sort_with_unlevelled_problems_last_and_cpu_runs_have_no_speed():
    rows = metrics.per_level([sample(None, "softmax", "ok"), sample(3, "1", "ok"), sample(1, "1", "incorrect")])
    assert [r["level"] for r in rows] == [1, 3, None]
    assert all(r["vs_eager"] is None and r["vs_compile"] is None for r in rows)
    assert metrics.run_kind([sample(1, "1", "ok"), {**sample(1, "2", "ok"), "mode": "sequential"}]) == "agent"


def test_report_on_a_run_out_file_says_which_folder_it_reads(tmp_path):
    from tritongym.bench.report import write_report

    results = tmp_path / "results.jsonl"
    results.write_text("{}\n")
    with pytest.raises(FileNotFoundError, match="run --run-dir DIR"):
        write_report(results)
