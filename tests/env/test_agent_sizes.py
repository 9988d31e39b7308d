"""The agent runner and CLI items of issue 23: CPU-size problems, outcome counts in the summary,
an honest "nothing written", and Ctrl-C. A scripted endpoint on loopback and a function evaluator."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.env.chat_server import Reply, ScriptedChatServer

from tritongym import cli
from tritongym.env import CallableEvaluator
from tritongym.env.agent import AgentConfig, run_agent
from tritongym.evaluator.result import EvalResult, Status

BIG_RELU = (Path(__file__).resolve().parents[1] / "fixtures" / "problems" / "relu_kernelbench_size.py").read_text()


def code(text: str) -> str:
    return f"```python\n{text}\n```"


def test_cpu_size_reaches_the_prompt_and_the_evaluator_and_outcomes_are_counted(tmp_path):
    problems = tmp_path / "problems"
    problems.mkdir()
    (problems / "big_relu.py").write_text(BIG_RELU)
    seen = []

    def evaluate(problem, source):
        seen.append(problem)
        status = Status.OK if "right" in source else Status.INCORRECT
        return EvalResult(status=status, reward=0.5 if status == Status.OK else 0.0, problem_size=problem.size)

    script = {"big_relu": [[Reply(code("wrong"))], [Reply(code("right"))]]}
    with ScriptedChatServer(script) as server:
        config = AgentConfig(base_url=server.base_url, model="m", out=str(tmp_path / "run"), problems=str(problems),
                             turns=2, size="cpu", max_retries=1, backoff=0.05, request_timeout=5.0)
        summary = run_agent(config, evaluator=CallableEvaluator(evaluate), progress=False)
        task = server.log[0]["messages"][1]["content"]
    assert summary["finished"] == 1 and summary["outcomes"] == {"ok": 1}
    assert seen and all(p.size == "cpu" for p in seen)
    assert "batch_size = 4096" not in task and "# tritongym-size: cpu" in task  # the model sees its sizes
    # Resuming the run at the other size is refused: it would mix two versions of the problem.
    with ScriptedChatServer(script) as server:
        again = AgentConfig(base_url=server.base_url, model="m", out=str(tmp_path / "run"), problems=str(problems),
                            turns=2, size="original", max_retries=1, backoff=0.05, request_timeout=5.0)
        with pytest.raises(ValueError, match="different settings .*size"):
            run_agent(again, evaluator=CallableEvaluator(evaluate), progress=False)


def test_agent_cli_says_when_nothing_was_written(tmp_path, capsys):
    script = {"02_leaky_relu": [[Reply(status=400)]]}
    with ScriptedChatServer(script) as server:
        code_ = cli.main(["agent", "--base-url", server.base_url, "--model", "m", "--only", "02_leaky_relu",
                          "--turns", "1", "--out", str(tmp_path / "run"), "--no-progress", "--max-retries", "1",
                          "--device", "cpu"])
    out = capsys.readouterr().out
    assert code_ == cli.EXIT_EVALUATOR
    assert "nothing was written yet" in out and "written to" not in out


def test_agent_cli_ctrl_c_says_how_to_resume(tmp_path, capsys, monkeypatch):
    import tritongym.env.agent as agent

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # what the terminal's Ctrl-C raises in the main thread

    monkeypatch.setattr(agent, "run_agent", interrupted)
    assert cli.main(["agent", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", str(tmp_path / "r"),
                     "--device", "cpu"]) == 130
    err = capsys.readouterr().err
    assert "interrupted; re-run the same command to resume" in err and "Traceback" not in err
