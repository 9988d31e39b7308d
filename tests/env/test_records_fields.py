"""The trajectory schema field by field: `turn_record`, `trajectory_record`, `run_provenance`.

Each field is asserted by value (not by a word two fields share), on an environment whose
evaluator is a plain function (the documented ``(problem, solution) -> EvalResult`` form), so
every verdict and every text is known.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from tritongym import __version__
from tritongym.env import KernelEnv
from tritongym.env.core import VOID_REASON
from tritongym.env.records import run_provenance, trajectory_record, turn_record
from tritongym.evaluator import EvalOptions
from tritongym.evaluator.result import EvalResult, Status


def judge(problem, code: str) -> EvalResult:
    if "boom" in code:
        return EvalResult(status=Status.RUNTIME_ERROR, error="Traceback\nRuntimeError: boom", device="cpu")
    return EvalResult(status=Status.OK, reward=0.75, device="cpu", speedup=1.5)


def reply(code: str) -> str:
    return f"<think>plan</think>\n```python\n{code}\n```\n"


@pytest.fixture
def env() -> KernelEnv:
    return KernelEnv("builtin", evaluator=judge, max_turns=3, feedback="minimal", history="last:2")


def test_turn_record_carries_each_field_of_the_turn(env):
    observation, _ = env.reset(options={"problem": "02_leaky_relu"})
    _, reward, terminated, truncated, info = env.step(reply("raise RuntimeError('boom')"))
    assert (reward, terminated, truncated) == (0.0, False, False)
    turn = env.turns[0]
    turn.eval_s = 3.456789  # the callable evaluator takes microseconds: a known time shows the rounding
    record = turn_record(turn, observation, info, generation_s=1.234567, wall_s=2.345678,
                         usage={"completion_tokens": 7}, finish_reason="length", reasoning="plan",
                         request_attempts=3)
    feedback = "Status: runtime_error (reward 0).\n\nRuntimeError: boom"
    assert feedback == turn.feedback and turn.message != turn.feedback  # the template wraps the feedback
    assert record == {
        "turn": 0, "iteration": 0, "messages": observation, "reply": reply("raise RuntimeError('boom')"),
        "reasoning": "plan", "code": "raise RuntimeError('boom')\n", "void": False, "status": "runtime_error",
        "result": turn.result.to_dict(), "reward": 0.0, "feedback": feedback, "feedback_message": turn.message,
        "usage": {"completion_tokens": 7}, "finish_reason": "length", "request_attempts": 3,
        "generation_s": 1.2346, "eval_s": 3.4568, "env_s": round(info["env_s"], 6),
        "wall_s": 2.3457,
    }
    assert record["result"]["status"] == "runtime_error"
    assert record["result"]["error"] == "Traceback\nRuntimeError: boom"
    assert list(record) == ["turn", "iteration", "messages", "reply", "reasoning", "code", "void", "status", "result",
                            "reward", "feedback", "feedback_message", "usage", "finish_reason", "request_attempts",
                            "generation_s", "eval_s", "env_s", "wall_s"]
    # The message the model is shown next is the feedback message, after its own reply.
    assert env.observation()[-2:] == [{"role": "assistant", "content": record["reply"]},
                                      {"role": "user", "content": record["feedback_message"]}]
    assert record["feedback_message"] == env.templates.render("feedback", feedback=feedback, attempt=1,
                                                              max_attempts=3).strip()


def test_a_void_turn_record(env):
    observation, _ = env.reset(options={"problem": "02_leaky_relu"})
    _, _, _, _, info = env.step("no code here")
    record = turn_record(env.turns[0], observation, info, generation_s=0.0, wall_s=0.0, usage=None,
                         finish_reason=None)
    assert (record["code"], record["void"], record["status"], record["result"], record["reward"]) == \
        (None, True, "void", None, 0.0)
    assert record["feedback"] == VOID_REASON and record["reasoning"] is None
    assert record["eval_s"] == 0.0 and "request_attempts" not in record


def test_trajectory_record_fields(env):
    problem = env._pick("02_leaky_relu")
    env.reset(options={"problem": problem})
    env.step(reply("raise RuntimeError('boom')"))
    env.step(reply("ok = 1"))
    env.step(reply("ok = 2"))  # ties with turn 1: the earliest best is kept
    provenance = {"marker": "p"}
    before = datetime.now(timezone.utc).replace(microsecond=0)
    record = trajectory_record(problem, env, sample=4, mode="sequential", stop_reason="budget", turns=["t0", "t1"],
                               provenance=provenance, recheck={"turn": 1}, resumed_from_turn=2, training_step=9)
    finished = datetime.fromisoformat(record.pop("finished_at"))
    assert before <= finished <= datetime.now(timezone.utc)
    assert record == {
        "problem": problem.name, "problem_id": problem.problem_id, "level": problem.level,
        "problem_hash": problem.content_hash, "sample": 4, "mode": "sequential", "turn_budget": 3,
        "stop_reason": "budget", "turns": ["t0", "t1"], "best_turn": 1, "best_reward": 0.75, "recheck": {"turn": 1},
        "resumed_from_turn": 2, "training_step": 9, "provenance": provenance,
    }


def test_trajectory_record_without_an_evaluated_turn(env):
    env.reset(options={"problem": 0})
    env.step("prose only")
    record = trajectory_record(env.problem, env, sample=0, mode="single", stop_reason="budget", turns=[],
                               provenance={})
    assert (record["best_turn"], record["best_reward"], record["recheck"], record["resumed_from_turn"]) == \
        (None, 0.0, None, None)


def test_run_provenance_fields(env):
    import platform

    import torch
    import triton

    options = EvalOptions(device="cpu", num_trials=2)

    class Described:
        def __init__(self) -> None:
            self.options = options

        def describe(self) -> dict:
            return {"kind": "described"}

    provenance = run_provenance(env, Described())
    assert provenance["tritongym"] == __version__ and provenance["torch"] == torch.__version__
    assert provenance["triton"] == triton.__version__ and provenance["python"] == platform.python_version()
    assert provenance["platform"] == platform.platform()
    assert provenance["device"] == "cpu" and provenance["device_name"] == platform.processor()
    assert provenance["evaluator"] == {"kind": "described"}
    assert provenance["evaluator_options"]["num_trials"] == 2 and provenance["evaluator_options"]["device"] == "cpu"
    assert provenance["prompt_templates"] == env.templates.hashes()
    assert provenance["template_origins"] == dict(env.templates.origins)
    assert provenance["history"] == "last:2"
    # An evaluator without options or describe(): its class name, the device auto-resolved.
    bare = run_provenance(env, object())
    assert bare["evaluator"] == {"kind": "object"} and bare["evaluator_options"] == {}
    assert bare["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
    # The options' device is recorded as given (no GPU is touched to record "cuda:1").
    indexed = run_provenance(env, type("Indexed", (), {"options": EvalOptions(device="cuda:1")})())
    assert indexed["device"] == "cuda:1" and indexed["device_name"] == platform.processor()
    auto = run_provenance(env, type("Auto", (), {"options": EvalOptions(device="auto")})())
    assert auto["device"] == ("cuda" if torch.cuda.is_available() else "cpu")
