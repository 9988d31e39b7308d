"""``tritongym agent --model scripted:DIR``: the agent runner without a model server (issue 45 §5).

A real loopback endpoint answers with the solution files of DIR; the runner's own chat client,
journal, sandboxed evaluations and report run as with any model. Also: ``--eval-workers`` defaults
to what ``run`` uses (the cores on a CPU), and ``--base-url`` is required for any other model.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("httpx")

from tritongym.cli import main  # noqa: E402
from tritongym.env.scripted import NO_SOLUTION, ScriptedModelServer  # noqa: E402
from tritongym.execution.pool import default_workers  # noqa: E402
from tritongym.tasks import builtin_suite  # noqa: E402


def test_scripted_model_answers_each_problem_with_its_file_over_http(repo_root):
    import httpx

    problems = [p for p in builtin_suite() if p.name in ("07_softmax", "02_leaky_relu")]
    with ScriptedModelServer(repo_root / "examples" / "builtin", problems[:1]) as server:
        def ask(task: str) -> str:
            body = {"model": "scripted", "messages": [{"role": "system", "content": "s"},
                                                      {"role": "user", "content": task}]}
            reply = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=10).json()
            return reply["choices"][0]["message"]["content"]

        paired = problems[0]
        answer = ask(f"Task {paired.problem_id}: write ModelNew")
        assert answer.startswith("```python\n") and "class ModelNew" in answer
        assert answer[len("```python\n"):-len("\n```")] == (repo_root / "examples" / "builtin" /
                                                            f"{paired.name}.py").read_text()
        assert ask(f"Task {problems[1].problem_id}: write ModelNew") == NO_SOLUTION  # not given to the server
        assert ask("a prompt that names no task") == NO_SOLUTION


def test_agent_runs_and_reports_without_a_model_server(repo_root, tmp_path, capsys):
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(repo_root / "examples" / "builtin" / "07_softmax.py", solutions)  # none for 02_leaky_relu
    out = tmp_path / "run"
    code = main(["agent", "--model", f"scripted:{solutions}", "--problems", "builtin", "--only", "07_softmax",
                 "--only", "02_leaky_relu", "--turns", "1", "--out", str(out), "--device", "cpu", "--trials", "2",
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    trajectories = {json.loads(line)["problem"]: json.loads(line)
                    for line in (out / "trajectories.jsonl").read_text().splitlines()}
    assert trajectories["07_softmax"]["turns"][0]["status"] == "ok"
    assert trajectories["02_leaky_relu"]["turns"][0]["void"] is True  # no file: a reply without code
    provenance = trajectories["07_softmax"]["provenance"]
    assert provenance["model"] == f"scripted:{solutions}"
    assert provenance["evaluator"]["max_workers"] == default_workers("cpu")  # as `run`, not 1
    assert main(["report", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["correctness"]["value"] == pytest.approx(0.5)


def test_any_other_model_needs_a_base_url_and_a_scripted_folder_must_exist(tmp_path, capsys):
    assert main(["agent", "--model", "Qwen/Qwen3-8B", "--out", str(tmp_path / "a")]) == 2
    assert "--base-url is required" in capsys.readouterr().err
    assert main(["agent", "--model", f"scripted:{tmp_path / 'none'}", "--out", str(tmp_path / "b")]) == 2
    assert "is not a folder of solution files" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
