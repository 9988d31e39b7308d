"""The TRL reward functions on real candidates through the real evaluator (run in the TRL venv, .ci/trl;
the functions themselves import no TRL)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

trl_utils = pytest.importorskip("trl.trainer.utils", reason="trl is not installed (pip install -e '.[trl]'; "
                                                           "see .ci/trl)")

from tritongym.integrations.trl.rewards import AsyncKernelReward, KernelReward, TrajectoryReward  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
HONEST = (REPO / "examples" / "builtin" / "01_scaled_add.py").read_text()
WRONG = HONEST.replace("alpha * x + beta * y", "alpha * x - beta * y")  # runs, wrong values
PID = "builtin/01_scaled_add"


def _fenced(code: str) -> str:
    return f"Here is my kernel.\n\n```python\n{code}```\n"


# TRL passes conversational completions as [[{"role": "assistant", "content": ...}], ...].
COMPLETIONS = [[{"role": "assistant", "content": _fenced(HONEST)}],
               [{"role": "assistant", "content": _fenced(WRONG)}],
               [{"role": "assistant", "content": "I would write a kernel, but no code block here."}]]


class Recorder:
    """TRL's log_extra / log_metric signatures, recording what the reward logs."""

    def __init__(self) -> None:
        self.columns: dict[str, list] = {}
        self.metrics: dict[str, list[float]] = defaultdict(list)

    def log_extra(self, column: str, values: list) -> None:
        self.columns[column] = list(values)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics[name].append(value)


def _check(rewards: list[float], rec: Recorder) -> None:
    assert rewards == [0.5, 0.0, 0.0]  # ok on a CPU earns the correctness term only
    assert rec.columns["status"] == ["ok", "incorrect", "void"]
    assert rec.columns["correct"] == [True, False, False]
    assert rec.columns["speedup"] == [None, None, None]  # no timing on a CPU
    assert rec.columns["violations"] == ["", "", ""]
    assert rec.metrics["tritongym/correct"] == [pytest.approx(1 / 3)]
    assert rec.metrics["tritongym/void"] == [pytest.approx(1 / 3)]
    assert "tritongym/speedup" not in rec.metrics


def test_kernel_reward_scores_honest_wrong_and_void_completions(evaluator):
    reward = KernelReward("builtin", evaluator=evaluator)
    rec = Recorder()
    rewards = reward(prompts=["p"] * 3, completions=COMPLETIONS, completion_ids=[[1]] * 3,
                     problem_id=[PID] * 3, trainer_state=None, log_extra=rec.log_extra, log_metric=rec.log_metric)
    _check(rewards, rec)


def test_async_kernel_reward_gives_the_same_verdicts(evaluator):
    reward = AsyncKernelReward("builtin", evaluator=evaluator)
    rec = Recorder()
    rewards = asyncio.run(reward(prompts=["p"] * 3, completions=COMPLETIONS, problem_id=[PID] * 3,
                                 log_extra=rec.log_extra, log_metric=rec.log_metric))
    _check(rewards, rec)


def test_kernel_reward_flags_an_integrity_violation(evaluator):
    cheat = ("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
             "    def __init__(self, alpha, beta):\n        super().__init__()\n"
             "        self.alpha, self.beta = alpha, beta\n\n"
             "    def forward(self, x, y):\n        return self.alpha * x + self.beta * y\n")
    rec = Recorder()
    rewards = KernelReward("builtin", evaluator=evaluator)(completions=[_fenced(cheat)], problem_id=[PID],
                                                           log_extra=rec.log_extra, log_metric=rec.log_metric)
    assert rewards == [0.0]
    assert rec.columns["status"] == ["integrity_violation"]
    assert rec.columns["violations"][0]  # the violation codes are logged
    assert rec.metrics["tritongym/violation"] == [1.0]


def test_kernel_reward_needs_a_problem_id_column_and_known_problems(evaluator):
    reward = KernelReward("builtin", evaluator=evaluator)
    with pytest.raises(ValueError, match="problem_id"):
        reward(completions=["x"])
    with pytest.raises(KeyError, match="no_such"):
        reward(completions=["x"], problem_id=["builtin/no_such"])
    with pytest.raises(ValueError, match="2 completions but 1"):
        reward(completions=["x", "y"], problem_id=[PID])


def test_trajectory_reward_returns_the_sum_and_logs_per_turn_means():
    rec = Recorder()
    rewards = TrajectoryReward()(completions=["a", "b", "c"], turn_rewards=[[0.0, 0.5], [0.5, 0.5], [0.0]],
                                 turn_status=[["void", "ok"], ["ok", "ok"], ["incorrect"]],
                                 log_extra=rec.log_extra, log_metric=rec.log_metric)
    assert rewards == [0.5, 1.0, 0.0]
    assert rec.metrics["tritongym/turn_1/reward"] == [pytest.approx(1 / 6)]
    assert rec.metrics["tritongym/turn_1/void"] == [pytest.approx(1 / 3)]
    assert rec.metrics["tritongym/turn_2/reward"] == [0.5]  # only the two trajectories that reached turn 2
    assert rec.metrics["tritongym/turn_2/correct"] == [1.0]
    assert rec.columns["turn_status"] == ["void,ok", "ok,ok", "incorrect"]
    with pytest.raises(ValueError, match="KernelRollout"):
        TrajectoryReward()(completions=["a"])


def test_trl_sees_the_async_reward_as_async_and_names_them():
    sync, coro = KernelReward("builtin"), AsyncKernelReward("builtin")
    try:
        assert not trl_utils.is_async_callable(sync)
        assert trl_utils.is_async_callable(coro)
        assert trl_utils.get_callable_name(sync) == "tritongym_kernel"
        assert trl_utils.get_callable_name(TrajectoryReward()) == "tritongym_trajectory"
    finally:
        sync.close()
        coro.close()
