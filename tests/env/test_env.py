"""KernelEnv: the Gymnasium-shaped contract, void turns, success and turn budget, sequential scaling,
history in the observation, async steps on a shared evaluator, and the env's own overhead.

The evaluator here is a function returning real `EvalResult`s (the real evaluator runs in
test_agent.py); what is under test is the environment around it.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import pytest

from tritongym.env import CallableEvaluator, EpisodeError, KernelEnv, PromptTemplates
from tritongym.evaluator.result import EvalResult, KernelLaunches, Notice, Status, TrialReport

GOOD = "```python\nclass ModelNew: pass  # good\n```"
BAD = "```python\nclass ModelNew: pass  # bad\n```"


def verdict(code: str) -> EvalResult:
    ok = "good" in code
    trials = [TrialReport(index=i, family="get_inputs", passed=ok, max_abs_error=0.0 if ok else 0.5,
                          max_rel_error=0.0 if ok else 1.0, mismatch_fraction=0.0 if ok else 0.25,
                          message=None if ok else "output: 16 of 64 elements (25.0%) differ beyond atol=0.01, "
                                                  "rtol=0.01; first at (0, 3): expected 0.5, got 1")
              for i in range(8)]
    return EvalResult(status=Status.OK if ok else Status.INCORRECT, reward=0.5 if ok else 0.0, trials=trials,
                      error=None if ok else "1 of 8 trials failed",
                      triton_launches=[KernelLaunches("k", True, 8, "(4,)")],
                      notices=[Notice("timing_unavailable", "no GPU")])


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[str, str]] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, problem, code):
        with self.lock:
            self.calls.append((problem.name, code))
        if self.delay:
            time.sleep(self.delay)
        return verdict(code)


@pytest.fixture(scope="module")
def problems(builtin_problems):
    return builtin_problems[:3]


def test_reset_gives_system_and_task_messages(problems):
    env = KernelEnv(problems, evaluator=Recorder())
    messages, info = env.reset(seed=1, options={"problem": problems[1].name})
    assert [m["role"] for m in messages] == ["system", "user"]
    assert problems[1].source.strip() in messages[1]["content"]
    assert problems[1].problem_id in messages[1]["content"]
    assert info == {"problem_id": problems[1].problem_id, "turn": 0, "turn_budget": 3}
    # Unnamed problems come from the seeded generator: the same seed picks the same problem.
    picks = {KernelEnv(problems, evaluator=Recorder()).reset(seed=7)[1]["problem_id"] for _ in range(3)}
    assert len(picks) == 1


def test_step_evaluates_the_extracted_code_and_feeds_back(problems):
    recorder = Recorder()
    env = KernelEnv(problems, evaluator=recorder, max_turns=3)
    env.reset(options={"problem": 0})
    obs, reward, terminated, truncated, info = env.step("thinking...\n" + BAD)
    assert recorder.calls == [(problems[0].name, "class ModelNew: pass  # bad\n")]
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert isinstance(info["result"], EvalResult) and info["status"] == "incorrect" and not info["void"]
    assert [m["role"] for m in obs] == ["system", "user", "assistant", "user"]
    assert obs[2]["content"] == "thinking...\n" + BAD
    assert "Status: incorrect" in obs[3]["content"] and "attempt 1 of 3" in obs[3]["content"]
    assert "0.5" not in obs[3]["content"].split("max abs error")[0]  # the expected value was scrubbed


def test_void_turn_is_not_evaluated_and_says_what_was_expected(problems):
    recorder = Recorder()
    env = KernelEnv(problems, evaluator=recorder, max_turns=2)
    env.reset(options={"problem": 0})
    obs, reward, terminated, truncated, info = env.step("I will think about it.")
    assert recorder.calls == []
    assert (reward, info["void"], info["status"], info["result"]) == (0.0, True, "void", None)
    assert "no code to evaluate" in obs[-1]["content"] and "```python" in obs[-1]["content"]


def test_turn_budget_truncates_and_stepping_after_the_end_fails(problems):
    env = KernelEnv(problems, evaluator=Recorder(), max_turns=2)
    with pytest.raises(EpisodeError):
        env.step(GOOD)
    env.reset(options={"problem": 0})
    assert env.step(BAD)[2:4] == (False, False)
    _, _, terminated, truncated, info = env.step(GOOD)
    assert (terminated, truncated) == (False, True)
    assert info["best_turn"] == 1 and info["best_reward"] == 0.5
    with pytest.raises(EpisodeError):
        env.step(GOOD)


def test_the_terminal_observation_is_the_whole_conversation(problems):
    # The last step's observation holds every reply and its feedback (no empty "next iteration").
    env = KernelEnv(problems, evaluator=Recorder(), max_turns=2)
    env.reset(options={"problem": 0})
    env.step(BAD)
    obs, _, _, truncated, _ = env.step(GOOD)
    assert truncated
    assert [m["content"] for m in obs if m["role"] == "assistant"] == [BAD, GOOD]
    assert obs[-1]["role"] == "user" and obs[-1]["content"] == env.turns[-1].message
    ended = KernelEnv(problems, evaluator=Recorder(), max_turns=3, success="correct")
    ended.reset(options={"problem": 0})
    obs, _, terminated, *_ = ended.step(GOOD)
    assert terminated and [m["content"] for m in obs if m["role"] == "assistant"] == [GOOD]


def test_success_rule_terminates(problems):
    env = KernelEnv(problems, evaluator=Recorder(), max_turns=5, success="correct")
    env.reset(options={"problem": 0})
    assert env.step(BAD)[2] is False
    _, _, terminated, truncated, _ = env.step(GOOD)
    assert (terminated, truncated) == (True, False)
    speed = KernelEnv(problems, evaluator=Recorder(), max_turns=5, success="speedup:1.2")
    speed.reset(options={"problem": 0})
    assert speed.step(GOOD)[2] is False  # correct, but no speedup was measured


def test_history_policy_shapes_the_observation(problems):
    env = KernelEnv(problems, evaluator=Recorder(), max_turns=4, history="strip-think,last:1")
    env.reset(options={"problem": 0})
    env.step("<think>plan A</think>" + BAD)
    obs, *_ = env.step("<think>plan B</think>" + GOOD)
    assistants = [m["content"] for m in obs if m["role"] == "assistant"]
    assert assistants == [GOOD]


def test_sequential_scaling_restarts_from_the_best_attempts(problems):
    env = KernelEnv(problems, evaluator=Recorder(), max_turns=3, iterations=3, keep_best=1)
    assert env.turn_budget == 3 + 2 * 2
    env.reset(options={"problem": 0})
    replies = [BAD + "\na", GOOD + "\nb", BAD + "\nc"]
    for reply in replies:
        obs, *_ = env.step(reply)
    # Iteration 1 starts: the context holds the best earlier attempt only.
    assert [m["content"] for m in obs if m["role"] == "assistant"] == [GOOD + "\nb"]
    obs, *_ = env.step(BAD + "\nd")
    assert env.turns[-1].iteration == 1
    assert [m["content"] for m in obs if m["role"] == "assistant"] == [GOOD + "\nb", BAD + "\nd"]
    obs, *_ = env.step(BAD + "\ne")
    assert env.turns[-1].iteration == 1 and env.iteration_of(5) == 2  # T - K = 2 new turns per iteration
    assert [m["content"] for m in obs if m["role"] == "assistant"] == [GOOD + "\nb"]
    obs, *_ = env.step(BAD + "\nf")
    obs, _, _, truncated, _ = env.step(BAD + "\ng")  # the last turn: its own iteration's context
    assert truncated and [m["content"] for m in obs if m["role"] == "assistant"] == [GOOD + "\nb", BAD + "\nf",
                                                                                      BAD + "\ng"]


def test_reset_can_continue_from_earlier_turns(problems):
    env = KernelEnv(problems, evaluator=Recorder(), max_turns=3)
    env.reset(options={"problem": 0})
    env.step(BAD)
    earlier = list(env.turns)
    resumed = KernelEnv(problems, evaluator=Recorder(), max_turns=3)
    obs, info = resumed.reset(options={"problem": 0, "turns": earlier})
    assert info["turn"] == 1 and obs == env.observation()
    _, _, _, _, info = resumed.step(GOOD)
    assert info["turn"] == 1


def test_astep_shares_one_evaluator_pool_across_environments(problems):
    recorder = Recorder(delay=0.3)
    shared = CallableEvaluator(recorder, max_workers=4)
    envs = [KernelEnv(problems, evaluator=shared, max_turns=1) for _ in range(4)]
    for env in envs:
        env.reset(options={"problem": 0})

    async def all_steps():
        return await asyncio.gather(*(env.astep(GOOD) for env in envs))

    started = time.perf_counter()
    results = asyncio.run(all_steps())
    elapsed = time.perf_counter() - started
    shared.close()
    assert len(recorder.calls) == 4 and all(r[1] == 0.5 and r[3] for r in results)
    assert elapsed < 1.0, f"4 evaluations of 0.3 s took {elapsed:.2f} s: they did not run concurrently"


def test_env_overhead_per_step_is_under_5_ms(problems):
    """The env's own work per step (extraction, feedback, history, observation), evaluation excluded."""
    result = verdict("bad")
    env = KernelEnv(problems, evaluator=lambda problem, code: result, max_turns=10, history="full",
                    feedback="full")
    overheads = []
    for _ in range(10):
        env.reset(options={"problem": 0})
        for _ in range(10):
            started = time.perf_counter()
            _, _, _, _, info = env.step("<think>" + "x" * 20000 + "</think>\n" + BAD)
            overheads.append(time.perf_counter() - started - info["eval_s"])
            assert info["env_s"] <= overheads[-1] + 1e-4
    median = statistics.median(overheads)
    assert median < 0.005, f"median env overhead {median * 1e3:.2f} ms per step"


def test_templates_are_overridable_by_folder(problems, tmp_path):
    (tmp_path / "system.md").write_text("Custom rules.", encoding="utf-8")
    templates = PromptTemplates.load(tmp_path)
    assert templates.system == "Custom rules."
    assert templates.task == PromptTemplates.load().task
    assert templates.hashes()["system"] != PromptTemplates.load().hashes()["system"]
    env = KernelEnv(problems, evaluator=Recorder(), templates=str(tmp_path), few_shot=True)
    messages, _ = env.reset(options={"problem": 0})
    assert messages[0]["content"] == "Custom rules."
    assert "Example of the expected format" in messages[1]["content"]
    (tmp_path / "feedback.md").write_text("$nonexistent", encoding="utf-8")
    broken = KernelEnv(problems, evaluator=Recorder(), templates=str(tmp_path))
    broken.reset(options={"problem": 0})
    with pytest.raises(ValueError, match="nonexistent"):
        broken.step(GOOD)


def test_best_turn_breaks_reward_ties_by_how_far_the_turn_got(problems):
    """Every turn at reward 0 (a run's first steps): the best is the wrong kernel that ran, not the
    first compile error; an integrity violation is never the best; equal progress → the earliest."""
    statuses = {"compile": Status.COMPILE_ERROR, "cheat": Status.INTEGRITY_VIOLATION, "wrong": Status.INCORRECT,
                "raises": Status.RUNTIME_ERROR, "wrong2": Status.INCORRECT}

    def by_marker(problem, code):
        marker = code.split("# ")[1].strip()
        return EvalResult(status=statuses[marker], reward=0.0, error=marker)

    def run(*markers: str) -> dict:
        env = KernelEnv(problems, evaluator=by_marker, max_turns=len(markers))
        env.reset(options={"problem": 0})
        for marker in markers:
            *_, info = env.step(f"```python\nclass ModelNew: pass  # {marker}\n```")
        return info

    assert run("compile", "cheat", "raises", "wrong", "wrong2")["best_turn"] == 3
    assert run("compile", "cheat", "raises")["best_turn"] == 2
    assert run("cheat", "compile")["best_turn"] == 1
    info = run("cheat")
    assert (info["best_turn"], info["best_reward"]) == (0, 0.0)  # the only evaluated turn is still reported


def test_a_higher_reward_still_wins_over_progress(problems):
    def verdicts(problem, code):
        return (EvalResult(status=Status.INTEGRITY_VIOLATION, reward=0.1) if "first" in code
                else EvalResult(status=Status.INCORRECT, reward=0.0))

    env = KernelEnv(problems, evaluator=verdicts, max_turns=2)
    env.reset(options={"problem": 0})
    env.step("```python\nclass ModelNew: pass  # first\n```")
    *_, info = env.step("```python\nclass ModelNew: pass  # second\n```")
    assert (info["best_turn"], info["best_reward"]) == (0, 0.1)
