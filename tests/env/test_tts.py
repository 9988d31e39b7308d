"""Test-time scaling through the agent runner, with a scripted endpoint and a function evaluator
returning real `EvalResult`s (fast): parallel sampling at the sequential budget, sequential
iterations restarting from the best attempts, the winner's fresh re-check, and a failing endpoint
leaving a trajectory unfinished for the next run to finish."""

from __future__ import annotations

import json
import threading

from tests.env.chat_server import Reply, ScriptedChatServer

from tritongym.env import CallableEvaluator
from tritongym.env.agent import AgentConfig, run_agent
from tritongym.evaluator.result import EvalResult, Status, TimingReport


class SpeedEvaluator:
    """Correct for code containing ``speed=X``, with that speedup; the re-check measures 10 % less."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, problem, code: str) -> EvalResult:
        with self.lock:
            self.calls.append(code)
            repeat = self.calls.count(code) > 1
        if "speed=" not in code:
            return EvalResult(status=Status.INCORRECT, error="1 of 5 trials failed")
        speedup = float(code.split("speed=")[1].split()[0]) * (0.9 if repeat else 1.0)
        timing = TimingReport("cuda_events", "test GPU", speedup, 1.0, 30, 30)
        return EvalResult(status=Status.OK, reward=0.5 + 0.5 * min(speedup, 3.0), speedup=speedup, timing=timing,
                          device="cuda")


def code(text: str) -> str:
    return f"```python\n{text}\n```"


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def config(server, out, **overrides) -> AgentConfig:
    settings = {"base_url": server.base_url, "model": "m", "out": str(out), "only": ["02_leaky_relu"],
                "samples": 1, "turns": 2, "max_retries": 1, "backoff": 0.05, "request_timeout": 5.0}
    return AgentConfig(**{**settings, **overrides})


def test_parallel_sampling_has_the_sequential_budget_and_no_history(tmp_path):
    replies = [[Reply(code("speed=1.5"))], [Reply(code("wrong"))], [Reply(code("speed=2.0"))]]
    evaluator = SpeedEvaluator()
    with ScriptedChatServer({"02_leaky_relu": [[r for turn in replies for r in turn]]}) as server:
        cfg = config(server, tmp_path / "par", tts="parallel", turns=2, iterations=2, keep_best=1)
        assert cfg.evaluation_budget == 3
        summary = run_agent(cfg, evaluator=CallableEvaluator(evaluator), progress=False)
        assert summary["finished"] == 1
        assert len(server.log) == 3 and all(len(r["messages"]) == 2 for r in server.log)  # system + task only
    (trajectory,) = read(tmp_path / "par" / "trajectories.jsonl")
    assert [t["status"] for t in trajectory["turns"]] == ["ok", "incorrect", "ok"]
    assert trajectory["best_turn"] == 2 and trajectory["mode"] == "parallel"
    # The winner was evaluated again, and both figures are kept.
    assert evaluator.calls.count("speed=2.0\n") == 2
    assert trajectory["recheck"]["selection"]["speedup"] == 2.0
    assert abs(trajectory["recheck"]["speedup"] - 1.8) < 1e-9


def test_sequential_iterations_restart_from_the_best_attempts(tmp_path):
    # The server keys replies by the number of assistant messages in the prompt: 0 for turn 0, then 1 for
    # turns 1-3 (turn 1 sees turn 0; turns 2 and 3 see the one best attempt kept).
    script = {"02_leaky_relu": [[Reply(code("speed=1.2"))],
                                [Reply(code("wrong")), Reply(code("speed=1.4")), Reply(code("speed=1.3"))]]}
    with ScriptedChatServer(script) as server:
        cfg = config(server, tmp_path / "seq", turns=2, iterations=3, keep_best=1)
        assert cfg.evaluation_budget == 4
        run_agent(cfg, evaluator=CallableEvaluator(SpeedEvaluator()), progress=False)
        # Turn 2 (iteration 1) sees only the best earlier attempt; turn 3 (iteration 2) the best of all three.
        third, fourth = server.log[2]["messages"], server.log[3]["messages"]
    assistants = [[m["content"] for m in msgs if m["role"] == "assistant"] for msgs in (third, fourth)]
    assert assistants == [[code("speed=1.2")], [code("speed=1.4")]]
    (trajectory,) = read(tmp_path / "seq" / "trajectories.jsonl")
    assert [t["iteration"] for t in trajectory["turns"]] == [0, 0, 1, 2]
    assert trajectory["best_turn"] == 2


def test_failing_endpoint_leaves_the_trajectory_unfinished_and_a_rerun_finishes_it(tmp_path):
    script = {"02_leaky_relu": [[Reply(code("wrong"))], [Reply(status=400)]]}
    evaluator = SpeedEvaluator()
    with ScriptedChatServer(script) as server:
        cfg = config(server, tmp_path / "run")
        summary = run_agent(cfg, evaluator=CallableEvaluator(evaluator), progress=False)
        assert summary["failed"] == 1 and "HTTP 400" in summary["errors"][0]
        assert len(server.requests("02_leaky_relu", 1)) == 1  # a 400 is not retried
        assert not (tmp_path / "run" / "trajectories.jsonl").exists()
        script["02_leaky_relu"][1] = [Reply(code("speed=1.1"))]
        summary = run_agent(cfg, evaluator=CallableEvaluator(evaluator), progress=False)
        assert summary["finished"] == 1
        assert len(server.requests("02_leaky_relu", 0)) == 1
    assert evaluator.calls.count("wrong\n") == 1  # the journaled turn was not evaluated again
    (trajectory,) = read(tmp_path / "run" / "trajectories.jsonl")
    assert [t["status"] for t in trajectory["turns"]] == ["incorrect", "ok"]


def test_an_evaluator_failure_stops_only_its_own_trajectory(tmp_path):
    from tritongym.errors import EvaluatorError

    def evaluate(problem, code):
        if problem.name == "01_scaled_add":
            raise EvaluatorError("the candidate worker could not start")
        return SpeedEvaluator()(problem, code)

    script = {name: [[Reply(code("speed=1.1"))], [Reply(code("speed=1.2"))]]
              for name in ("01_scaled_add", "02_leaky_relu")}
    with ScriptedChatServer(script) as server:
        cfg = config(server, tmp_path / "run", only=["01_scaled_add", "02_leaky_relu"])
        summary = run_agent(cfg, evaluator=CallableEvaluator(evaluate), progress=False)
    assert (summary["finished"], summary["failed"]) == (1, 1)
    assert "could not start" in summary["errors"][0]
    assert [t["problem"] for t in read(tmp_path / "run" / "trajectories.jsonl")] == ["02_leaky_relu"]


def test_a_prompt_over_the_context_length_ends_the_trajectory(tmp_path):
    too_long = "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."
    script = {"02_leaky_relu": [[Reply(code("speed=1.1"))], [Reply(too_long, status=400)]]}
    with ScriptedChatServer(script) as server:
        cfg = config(server, tmp_path / "run", turns=3)
        summary = run_agent(cfg, evaluator=CallableEvaluator(SpeedEvaluator()), progress=False)
        assert (summary["finished"], summary["failed"]) == (1, 0)
        assert len(server.requests("02_leaky_relu", 1)) == 1
    (trajectory,) = read(tmp_path / "run" / "trajectories.jsonl")
    assert trajectory["stop_reason"] == "context_length" and len(trajectory["turns"]) == 1
    assert trajectory["recheck"]["selection"]["speedup"] == 1.1
