"""A resumed agent run asks the model exactly what an uninterrupted run asks, and stores the same
trajectory (timings and ``resumed_from_turn`` aside).

Two runs of the same script against the scripted OpenAI-compatible server on loopback: one straight
through; one whose third request fails until the trajectory is left unfinished (the turns before it
are journaled), then the same command again, which resumes from the journal. The evaluator is a plain
function, so the verdicts are known and the test takes seconds. The resumed prompt is rebuilt from
the journal's records: a record whose fields were swapped or lost changes what the model is sent.
"""

from __future__ import annotations

import json

from tests.env.chat_server import Reply, ScriptedChatServer

from tritongym.env.agent import AgentConfig, run_agent
from tritongym.env.evaluators import CallableEvaluator
from tritongym.evaluator.result import EvalResult, Status, TrialReport

PROBLEM = "02_leaky_relu"
TIMINGS = ("generation_s", "eval_s", "env_s", "wall_s")


def judge(problem, code: str) -> EvalResult:
    if "boom" in code:
        return EvalResult(status=Status.RUNTIME_ERROR, error="Traceback (most recent call last):\n"
                          '  File "candidate.py", line 3, in forward\nRuntimeError: boom', device="cpu")
    if "wrong" in code:
        trial = TrialReport(index=0, family="negated", passed=False, max_abs_error=2.0, max_rel_error=1.0,
                            mismatch_fraction=0.5, message="output: 2 of 4 differ; first at (0, 1): x")
        return EvalResult(status=Status.INCORRECT, error="1 of 1 trials failed", trials=[trial], device="cpu")
    return EvalResult(status=Status.OK, reward=0.5, device="cpu", speedup=1.25)


def fenced(code: str, think: str) -> str:
    return f"<think>{think}</think>\nAttempt:\n```python\n{code}\n```\n"


REPLIES = [fenced("y = boom()", "first"), fenced("y = wrong()", "second"), fenced("y = 1", "third")]


def config(server: ScriptedChatServer, out) -> AgentConfig:
    return AgentConfig(base_url=server.base_url, model="scripted", out=str(out), only=[PROBLEM], turns=3,
                       history="strip-think,last:2", feedback="standard", max_retries=0, request_timeout=10.0,
                       backoff=0.0, concurrency=1)


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def asked(server: ScriptedChatServer) -> list[list[dict]]:
    """The messages of every answered request, in turn order."""
    return [entry["messages"] for entry in sorted(server.log, key=lambda e: e["turn"]) if entry["status"] == 200]


def comparable(trajectory: dict) -> dict:
    trajectory = {k: v for k, v in trajectory.items() if k not in ("finished_at", "resumed_from_turn")}
    # Each run had its own server, on its own port.
    trajectory["provenance"] = {k: v for k, v in trajectory["provenance"].items() if k != "base_url"}
    trajectory["turns"] = [{k: v for k, v in turn.items() if k not in TIMINGS} for turn in trajectory["turns"]]
    return trajectory


def test_a_resumed_run_sends_exactly_the_messages_of_an_uninterrupted_run(tmp_path):
    script = {PROBLEM: [[Reply(text)] for text in REPLIES]}
    with ScriptedChatServer(script) as server:
        summary = run_agent(config(server, tmp_path / "straight"), evaluator=CallableEvaluator(judge), progress=False)
        assert summary["finished"] == 1 and summary["failed"] == 0
        straight_messages = asked(server)
    (straight,) = read_jsonl(tmp_path / "straight" / "trajectories.jsonl")
    assert [t["status"] for t in straight["turns"]] == ["runtime_error", "incorrect", "ok"]
    assert len(straight_messages) == 3

    broken = {PROBLEM: [[Reply(REPLIES[0])], [Reply(REPLIES[1])], [Reply(status=500)]]}
    out = tmp_path / "resumed"
    with ScriptedChatServer(broken) as server:
        summary = run_agent(config(server, out), evaluator=CallableEvaluator(judge), progress=False)
        assert summary["finished"] == 0 and summary["failed"] == 1
        assert not (out / "trajectories.jsonl").exists() or not read_jsonl(out / "trajectories.jsonl")
        journal = read_jsonl(out / "turns.jsonl")
        assert [(r["turn"], r["status"]) for r in journal] == [(0, "runtime_error"), (1, "incorrect")]
        broken[PROBLEM][2] = [Reply(REPLIES[2])]
        summary = run_agent(config(server, out), evaluator=CallableEvaluator(judge), progress=False)
        assert summary["finished"] == 1 and summary["skipped"] == 0
        resumed_messages = asked(server)
        assert [e["turn"] for e in server.log] == [0, 1, 2, 2]  # turns 0 and 1 were not asked again
    (resumed,) = read_jsonl(out / "trajectories.jsonl")

    # What the model was sent, turn by turn, is the same: the resumed turn 2 rebuilt its history
    # (the last two replies, reasoning stripped, and their feedback messages) from the journal.
    assert resumed_messages == straight_messages
    last = straight_messages[2]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert last[2]["content"] == "Attempt:\n```python\ny = boom()\n```"
    assert last[3]["content"] == straight["turns"][0]["feedback_message"]
    assert last[5]["content"] == straight["turns"][1]["feedback_message"]
    # And the stored trajectory is the same, field by field, but for timings and where it resumed.
    assert resumed["resumed_from_turn"] == 2 and straight["resumed_from_turn"] is None
    assert comparable(resumed) == comparable(straight)
    assert [t["messages"] for t in resumed["turns"]] == straight_messages
