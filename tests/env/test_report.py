"""`tritongym report`: files, self-contained HTML with embedded plots, CPU wording, comparison, exports."""

from __future__ import annotations

import json
import re

import pyarrow.parquet as pq
from tests.env.trajectories import cpu_run, gpu_run

from tritongym.bench.report import CPU_NOTE, write_report
from tritongym.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_run(directory, trajectories):
    directory.mkdir()
    (directory / "trajectories.jsonl").write_text("".join(json.dumps(t) + "\n" for t in trajectories))
    return directory


def test_gpu_run_report_has_speed_metrics_plots_and_self_contained_html(tmp_path):
    run = write_run(tmp_path / "gpu", gpu_run())
    paths = write_report(run)
    for name in ("report.md", "report.html", "report.json", "correctness_by_turn.png", "rates_by_turn.png",
                 "tokens_by_turn.png", "fast_p.png"):
        assert (run / name).is_file(), name
    for png in run.glob("*.png"):
        assert png.read_bytes().startswith(PNG_MAGIC)
    markdown = paths["markdown"].read_text()
    assert "| fast_1.2 (vs eager) | 25.0% |" in markdown
    assert "| correctness | 75.0% |" in markdown
    assert "at re-check 2x (gap 1.25)" in markdown
    assert "| builtin/a | a | 1 | 1 | 2x | 1 |" in markdown and "| builtin/c | c | 1 | 0 | n/a | 0 |" in markdown
    assert CPU_NOTE not in markdown
    page = paths["html"].read_text()
    assert len(re.findall(r'<img alt="[^"]+" src="data:image/png;base64,[A-Za-z0-9+/=]+">', page)) == 4
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "<script" not in page
    report = json.loads(paths["json"].read_text())
    assert report["vs_eager"]["fast_p"]["1.2"]["value"] == 0.25
    assert report["definitions"]["fast_p"].startswith("fraction of all tasks")


def test_cpu_run_report_says_correctness_only_and_compares(tmp_path):
    run = write_run(tmp_path / "cpu", cpu_run())
    other = write_run(tmp_path / "other", gpu_run()[:2])
    assert main(["report", str(run), "--compare", str(other), "--parquet", str(tmp_path / "turns.parquet"),
                 "--sft", str(tmp_path / "sft.jsonl"), "--sft-turns", "correct"]) == 0
    markdown = (run / "report.md").read_text()
    assert CPU_NOTE in markdown and "fast_1.2 (vs eager)" not in markdown
    assert not (run / "fast_p.png").exists()
    assert "## Compared with the other run" in markdown and "2 shared tasks" in markdown
    assert json.loads((run / "report.json").read_text())["speed_note"] == CPU_NOTE
    table = pq.read_table(tmp_path / "turns.parquet").to_pylist()
    assert len(table) == 6 and {r["status"] for r in table} == {"compile_error", "ok", "void", "incorrect"}
    sft = [json.loads(line) for line in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert [(r["problem_id"], r["turn"]) for r in sft] == [("builtin/a", 1), ("builtin/b", 0), ("builtin/b", 1)]
    assert sft[0]["messages"][-1] == {"role": "assistant", "content": "reply"}


def test_report_of_an_empty_folder_is_a_usage_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no finished trajectories" in capsys.readouterr().err
