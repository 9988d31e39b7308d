"""The agent runner end to end: a scripted OpenAI-compatible server on loopback, the real evaluator
on the CPU, the built-in suite. Slow: each real evaluation takes seconds (5 in this file)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from tests.env.chat_server import Reply, ScriptedChatServer

from tritongym.cli import main

pytestmark = pytest.mark.slow


def solution(repo_root, name: str) -> str:
    return (repo_root / "examples" / "builtin" / f"{name}.py").read_text()


def fenced(code: str, prose: str = "Here is my kernel.") -> str:
    return f"<think>Let me plan the kernel.</think>\n{prose}\n```python\n{code}```\n"


def broken(code: str) -> str:
    """The honest solution with a syntax error: the static gate turns it into compile_error."""
    return code.replace("class ModelNew(nn.Module):", "class ModelNew(nn.Module)", 1)


def agent_args(server, out, *extra: str) -> list[str]:
    return ["agent", "--base-url", server.base_url, "--model", "scripted-model", "--problems", "builtin",
            "--samples", "1", "--turns", "2", "--concurrency", "2", "--temperature", "0.7", "--max-tokens", "2048",
            "--out", str(out), "--device", "cpu", "--trials", "2", "--timeout", "120", "--request-timeout", "3",
            "--max-retries", "3", "--no-progress", *extra]


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_agent_run_statuses_feedback_retries_resume_and_report(repo_root, tmp_path, capsys):
    leaky, scaled = solution(repo_root, "02_leaky_relu"), solution(repo_root, "01_scaled_add")
    script = {
        "02_leaky_relu": [[Reply(fenced(broken(leaky)))], [Reply(fenced(leaky, "Fixed the missing colon."))]],
        "01_scaled_add": [[Reply(status=500), Reply("I need to think about this more before writing code.")],
                          [Reply(fenced(scaled), delay=6.0), Reply(fenced(scaled))]],
    }
    out = tmp_path / "run"
    with ScriptedChatServer(script) as server:
        args = agent_args(server, out, "--only", "02_leaky_relu", "--only", "01_scaled_add", "--eval-workers", "2")
        assert main(args) == 0
        trajectories = {t["problem"]: t for t in read_jsonl(out / "trajectories.jsonl")}
        assert set(trajectories) == {"02_leaky_relu", "01_scaled_add"}

        leaky_run = trajectories["02_leaky_relu"]
        assert [t["status"] for t in leaky_run["turns"]] == ["compile_error", "ok"]
        assert [t["reward"] for t in leaky_run["turns"]] == [0.0, 0.5]
        second_prompt = server.requests("02_leaky_relu", 1)[0]["messages"]
        assert second_prompt == leaky_run["turns"][1]["messages"]
        assert second_prompt[-1]["role"] == "user"
        assert "Status: compile_error" in second_prompt[-1]["content"]
        assert "SyntaxError" in second_prompt[-1]["content"]
        assert second_prompt[-2] == {"role": "assistant", "content": leaky_run["turns"][0]["reply"]}
        assert leaky_run["best_turn"] == 1
        recheck = leaky_run["recheck"]
        assert recheck["status"] == "ok" and recheck["selection"]["status"] == "ok"
        assert recheck["result"]["solution_hash"] == leaky_run["turns"][1]["result"]["solution_hash"]

        scaled_run = trajectories["01_scaled_add"]
        assert [t["status"] for t in scaled_run["turns"]] == ["void", "ok"]
        assert [t["reward"] for t in scaled_run["turns"]] == [0.0, 0.5]
        assert scaled_run["turns"][0]["code"] is None and scaled_run["turns"][0]["result"] is None
        assert [r["status"] for r in server.requests("01_scaled_add", 0)] == [500, 200]  # retried after the 500
        assert scaled_run["turns"][0]["request_attempts"] == 2
        assert len(server.requests("01_scaled_add", 1)) == 2  # the slow reply timed out, the retry answered
        assert scaled_run["turns"][1]["request_attempts"] == 2 and scaled_run["turns"][1]["generation_s"] >= 3
        assert "no code to evaluate" in scaled_run["turns"][1]["messages"][-1]["content"]

        turn = leaky_run["turns"][1]
        assert turn["usage"]["completion_tokens"] > 0 and turn["eval_s"] > 0 and turn["env_s"] < 0.05
        assert server.requests("02_leaky_relu", 0)[0]["sampling"] == {"temperature": 0.7, "max_tokens": 2048}
        provenance = leaky_run["provenance"]
        assert provenance["model"] == "scripted-model" and provenance["device"] == "cpu"
        assert provenance["sampling"]["temperature"] == 0.7
        assert provenance["evaluator_options"]["num_trials"] == 2
        assert set(provenance["prompt_templates"]) == {"system", "task", "feedback", "void", "few_shot"}
        assert {"tritongym", "torch", "triton"} <= set(provenance)

        # The same command again: everything is finished, nothing is asked or evaluated again.
        requests_before = len(server.log)
        capsys.readouterr()
        assert main(args) == 0
        assert len(server.log) == requests_before
        assert "0 trajectories finished, 2 already done" in capsys.readouterr().out
        # Different settings into the same folder are refused.
        assert main(agent_args(server, out, "--only", "02_leaky_relu", "--only", "01_scaled_add",
                               "--feedback", "full")) == 2
        assert "different settings (feedback)" in capsys.readouterr().err

    assert main(["report", str(out)]) == 0
    markdown = (out / "report.md").read_text()
    assert "| correctness | 100.0% |" in markdown and "correctness only" in markdown
    assert (out / "correctness_by_turn.png").read_bytes().startswith(b"\x89PNG")
    assert "data:image/png;base64," in (out / "report.html").read_text()
    per_turn = json.loads((out / "report.json").read_text())["per_turn"]
    assert [r["void_rate"] for r in per_turn] == [0.5, 0.0]
    assert [r["correct_rate"] for r in per_turn] == [0.0, 1.0]


def test_killed_run_resumes_without_repeating_finished_turns(repo_root, tmp_path):
    leaky = solution(repo_root, "02_leaky_relu")
    script = {"02_leaky_relu": [[Reply(fenced(broken(leaky)))], [Reply(fenced(leaky), delay=600.0)]]}
    out = tmp_path / "run"
    with ScriptedChatServer(script) as server:
        args = agent_args(server, out, "--only", "02_leaky_relu", "--no-recheck")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen([sys.executable, "-m", "tritongym.cli", *args], env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 120
            while not server.requests("02_leaky_relu", 1):  # turn 0 is journaled before turn 1 is asked for
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the agent never reached turn 1"
                time.sleep(0.2)
        finally:
            process.send_signal(signal.SIGKILL)
            process.communicate()
        journal = read_jsonl(out / "turns.jsonl")
        assert [(r["turn"], r["status"]) for r in journal] == [(0, "compile_error")]
        assert not (out / "trajectories.jsonl").exists() or not (out / "trajectories.jsonl").read_text().strip()

        script["02_leaky_relu"][1] = [Reply(fenced(leaky))]
        assert main(args) == 0
        assert len(server.requests("02_leaky_relu", 0)) == 1  # the finished turn was not asked for again
        (trajectory,) = read_jsonl(out / "trajectories.jsonl")
        assert [t["status"] for t in trajectory["turns"]] == ["compile_error", "ok"]
        assert trajectory["turns"][0]["reply"] == journal[0]["reply"]
        assert trajectory["resumed_from_turn"] == 1
        resumed_prompt = server.requests("02_leaky_relu", 1)[-1]["messages"]
        assert "SyntaxError" in resumed_prompt[-1]["content"]
