"""KernelEnv's values one by one: what the task prompt states, the void message, the step's info,
the async step, an attempt's fields, and the exact errors.

The evaluator is a plain function (the documented ``(problem, solution) -> EvalResult`` form), so
every verdict is known; tests/env/test_env.py covers the episode contract around these.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tritongym.env import EpisodeError, KernelEnv, PromptTemplates
from tritongym.env.core import VOID_REASON, Turn, _tolerance_text
from tritongym.env.history import Attempt
from tritongym.evaluator import EvalOptions
from tritongym.evaluator.result import EvalResult, Status

CODE = "class ModelNew: pass\n"
REPLY = f"<think>t</think>\n```python\n{CODE}```"


def slow_ok(problem, code: str) -> EvalResult:
    time.sleep(0.02)  # a known lower bound on the evaluation's time
    return EvalResult(status=Status.OK, reward=0.5)


@pytest.mark.parametrize(("options", "text"), [
    (None, "atol=rtol=1e-2"),
    (EvalOptions(), "atol=rtol=1e-2"),
    (EvalOptions(tolerance="strict"), "atol=rtol=1e-4 for float32"),
    (EvalOptions(atol=0.001), "atol=0.001, rtol=preset"),
    (EvalOptions(rtol=0.002), "atol=preset, rtol=0.002"),
    (EvalOptions(atol=0.001, rtol=0.002), "atol=0.001, rtol=0.002"),
])
def test_the_task_states_the_tolerance(options, text):
    assert _tolerance_text(options) == text


def test_the_task_prompt_fills_every_value(tmp_path):
    (tmp_path / "task.md").write_text("$problem_id@@$name@@$tolerance@@$few_shot@@$source", encoding="utf-8")
    env = KernelEnv("builtin", evaluator=slow_ok, options=EvalOptions(atol=0.5), templates=str(tmp_path))
    messages, info = env.reset(options={"problem": "02_leaky_relu"})
    problem = env.problem
    assert messages[1] == {"role": "user", "content": f"{problem.problem_id}@@{problem.name}@@atol=0.5, rtol=preset"
                                                      f"@@@@{problem.source.strip()}"}
    assert info == {"problem_id": problem.problem_id, "turn": 0, "turn_budget": 3}
    with_example = KernelEnv("builtin", evaluator=slow_ok, templates=str(tmp_path), few_shot=True)
    messages, _ = with_example.reset(options={"problem": "02_leaky_relu"})
    assert messages[1]["content"].split("@@")[3] == PromptTemplates.load().few_shot
    assert PromptTemplates.load().few_shot.strip()


def test_a_step_reports_its_code_times_and_turn():
    env = KernelEnv("builtin", evaluator=slow_ok, max_turns=2)
    env.reset(options={"problem": 0})
    started = time.perf_counter()
    _, reward, terminated, truncated, info = env.step(REPLY)
    elapsed = time.perf_counter() - started
    assert (reward, terminated, truncated) == (0.5, False, False)
    assert info["code"] == CODE and info["status"] == "ok" and info["void"] is False and info["turn"] == 0
    assert info["iteration"] == 0 and info["best_turn"] == 0 and info["best_reward"] == 0.5
    assert 0.02 <= info["eval_s"] <= elapsed and env.turns[0].eval_s == info["eval_s"]
    assert 0 <= info["env_s"] < elapsed


def test_an_async_step_is_the_same_step():
    env = KernelEnv("builtin", evaluator=slow_ok, max_turns=2)
    env.reset(options={"problem": 0})
    started = time.perf_counter()
    _, reward, _, _, info = asyncio.run(env.astep(REPLY))
    elapsed = time.perf_counter() - started
    assert reward == 0.5 and info["code"] == CODE and not info["void"] and env.turns[0].code == CODE
    assert 0.02 <= info["eval_s"] <= elapsed and env.turns[0].eval_s == info["eval_s"]
    _, reward, _, truncated, info = asyncio.run(env.astep("no code"))
    assert (reward, truncated, info["void"], info["eval_s"], info["code"]) == (0.0, True, True, 0.0, None)


def test_a_void_turn_says_why_in_its_template():
    env = KernelEnv("builtin", evaluator=slow_ok, max_turns=3)
    env.reset(options={"problem": 0})
    observation, _, _, _, info = env.step("prose only")
    expected = env.templates.render("void", reason=VOID_REASON, attempt=1, max_attempts=3).strip()
    assert observation[-1] == {"role": "user", "content": expected}
    assert VOID_REASON in expected and info["feedback"] == VOID_REASON and info["eval_s"] == 0.0
    assert env.turns[0].eval_s == 0.0


def test_an_attempt_carries_the_turns_fields():
    evaluated = Turn(turn=4, iteration=1, reply="r", code="c", result=EvalResult(status=Status.OK, reward=0.5),
                     reward=0.5, feedback="f", message="m")
    # progress: how far the turn got (ok 5 ... void 1), which breaks BestK's reward ties.
    assert evaluated.attempt() == Attempt(turn=4, reply="r", feedback="m", reward=0.5, void=False, progress=5)
    void = Turn(turn=2, iteration=0, reply="x", code=None, result=None, reward=0.0, feedback="f", message="v")
    assert void.attempt() == Attempt(turn=2, reply="x", feedback="v", reward=0.0, void=True, progress=1)
    assert void.status == "void" and evaluated.status == "ok"


def test_resuming_needs_fewer_turns_than_the_budget():
    env = KernelEnv("builtin", evaluator=slow_ok, max_turns=2)
    env.reset(options={"problem": 0})
    env.step(REPLY)
    one = list(env.turns)
    _, info = env.reset(options={"problem": 0, "turns": one})
    assert info["turn"] == 1
    env.step(REPLY)
    with pytest.raises(EpisodeError, match="^2 turns given to resume from; the budget is 2$"):
        env.reset(options={"problem": 0, "turns": list(env.turns)})


def test_the_exact_errors_of_a_misused_episode():
    env = KernelEnv("builtin", evaluator=slow_ok, max_turns=1)
    message = r"^call reset\(\) before step\(\): the episode has not started or has ended$"
    with pytest.raises(EpisodeError, match=message):
        env.step(REPLY)
    env.reset(options={"problem": 0})
    with pytest.raises(TypeError, match="^the action is the model's reply as a string, got list$"):
        env.step(["not", "a", "string"])


def test_the_info_names_the_problem_and_the_feedback_and_env_time_excludes_the_evaluation():
    def slower(problem, code):
        time.sleep(0.15)
        return EvalResult(status=Status.INCORRECT, error="1 of 1 trials failed")

    env = KernelEnv("builtin", evaluator=slower, max_turns=2, feedback="minimal")
    env.reset(options={"problem": "02_leaky_relu"})
    _, _, _, _, info = env.step(REPLY)
    assert info["problem_id"] == env.problem.problem_id and info["iteration"] == 0
    assert info["feedback"] == "Status: incorrect (reward 0).\n\n1 of 1 trials failed" == env.turns[0].feedback
    assert info["eval_s"] >= 0.15 and 0 <= info["env_s"] < 0.15


def test_the_terminal_observation_of_a_scaled_episode_is_its_last_iterations_context():
    rewards = iter([0.2, 0.9, 0.1])

    def scored(problem, code):
        return EvalResult(status=Status.OK, reward=next(rewards))

    env = KernelEnv("builtin", evaluator=scored, max_turns=2, iterations=2, keep_best=1)
    env.reset(options={"problem": 0})
    replies = [f"```python\nx = {i}\n```" for i in range(3)]
    for reply in replies[:2]:
        env.step(reply)
    observation, _, _, truncated, _ = env.step(replies[2])  # turn 2 opened iteration 1, and ended the episode
    assert truncated and env.turn_budget == 3
    # Iteration 1's context: the best earlier attempt (turn 1, reward 0.9), then its own turn 2.
    assert [m["content"] for m in observation[2::2]] == [replies[1], replies[2]]


def test_success_rules_and_unknown_problems():
    from tritongym.env.core import success_rule

    def rule(result):
        return True

    assert success_rule(rule) is rule
    assert success_rule(None) is None and success_rule("never") is None
    with pytest.raises(ValueError, match="success rule must be 'never', 'correct', 'speedup:X' or a callable, got "
                                         "'speedup:fast'"):
        success_rule("speedup:fast")
    env = KernelEnv("builtin", evaluator=slow_ok)
    with pytest.raises(KeyError, match="no problem named 'missing' in this environment"):
        env.reset(options={"problem": "missing"})


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_turns": 0}, "max_turns must be an integer >= 1, got 0"),
    ({"max_turns": "3"}, "max_turns must be an integer >= 1, got '3'"),
    ({"iterations": 0}, "iterations must be an integer >= 1, got 0"),
    ({"iterations": 2.0}, "iterations must be an integer >= 1, got 2.0"),
    ({"iterations": 2, "keep_best": 3}, r"keep_best must be in \[0, max_turns\) with iterations > 1, got 3"),
    ({"iterations": 2, "keep_best": -1}, r"keep_best must be in \[0, max_turns\) with iterations > 1, got -1"),
])
def test_the_constructor_refuses_bad_budgets(kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        KernelEnv("builtin", evaluator=slow_ok, **{"max_turns": 3, **kwargs})


def test_the_constructor_keeps_what_it_is_given():
    from tritongym.env import FeedbackPolicy
    from tritongym.env.evaluators import PoolEvaluator

    plain = KernelEnv("builtin", evaluator=slow_ok)
    assert (plain.max_turns, plain.iterations, plain.keep_best, plain.turn_budget) == (3, 1, 0, 3)
    assert plain.problem is None and plain.turns == [] and plain.observation() == []  # nothing before reset
    assert KernelEnv("builtin", evaluator=slow_ok, iterations=1, keep_best=7).keep_best == 0  # unused: 0
    assert KernelEnv("builtin", evaluator=slow_ok, max_turns=3, iterations=2, keep_best=0).turn_budget == 6
    assert KernelEnv("builtin", evaluator=slow_ok, max_turns=3, iterations=2, keep_best=2).keep_best == 2
    options = EvalOptions(num_trials=3)
    pooled = KernelEnv("builtin", options=options)
    assert isinstance(pooled.evaluator, PoolEvaluator) and pooled.evaluator.options is options
    assert pooled.options is options
    shared = KernelEnv("builtin", evaluator=pooled.evaluator)  # the evaluator's options state the tolerance
    assert shared.options is options
    policy, templates = FeedbackPolicy("full", 900), PromptTemplates.load()
    env = KernelEnv("builtin", evaluator=slow_ok, feedback=policy, templates=templates)
    assert env.feedback is policy and env.templates is templates
    assert KernelEnv("builtin", evaluator=slow_ok, feedback="minimal", feedback_chars=123).feedback.budget == 123


def test_problems_must_be_problems():
    message = "^problems must be a Problem, a non-empty sequence of Problems, or a problem-set spec$"
    with pytest.raises(TypeError, match=message):
        KernelEnv([], evaluator=slow_ok)
    with pytest.raises(TypeError, match=message):
        KernelEnv(["02_leaky_relu"], evaluator=slow_ok)


def test_the_speedup_rule_holds_at_its_threshold():
    from tritongym.env.core import success_rule

    rule = success_rule("speedup:1.5")
    assert rule(EvalResult(status=Status.OK, reward=1.0, speedup=1.5)) is True
    assert rule(EvalResult(status=Status.OK, reward=1.0, speedup=1.49)) is False
    assert rule(EvalResult(status=Status.OK, reward=1.0, speedup=None)) is False
    assert rule(EvalResult(status=Status.INCORRECT, speedup=9.0)) is False
    assert success_rule("correct")(EvalResult(status=Status.OK, reward=0.5)) is True


def test_scaling_keeps_no_best_attempt_unless_asked_and_an_evaluator_without_options_states_none():
    assert KernelEnv("builtin", evaluator=slow_ok, max_turns=3, iterations=2).keep_best == 0

    class Bare:  # an Evaluator with no options attribute
        def evaluate(self, problem, code):
            return slow_ok(problem, code)

        def evaluate_many(self, jobs):
            return [slow_ok(p, c) for p, c in jobs]

        async def aevaluate(self, problem, code):
            return slow_ok(problem, code)

    env = KernelEnv("builtin", evaluator=Bare())
    assert env.options is None
    messages, _ = env.reset(options={"problem": 0})
    assert "atol=rtol=1e-2" in messages[1]["content"]


def test_a_seed_fixes_the_problem_drawn():
    def draws(seed):
        env = KernelEnv("builtin", evaluator=slow_ok)
        return [env.reset(seed=seed + i)[1]["problem_id"] for i in range(6)]

    assert draws(11) == draws(11)
    assert len(set(draws(11))) > 1
