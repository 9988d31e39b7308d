"""The whole training loop learns (issue 26): a shortened `benchmarks/learning.py` with fixed seeds.

A small Qwen2-style policy is pretrained in-process on conversations made from real verdicts
(honest and wrong first answers, the environment's real feedback, the honest second answer), then
trained with RL through `run_trl_training` (multi-turn `KernelRollout`, the sandboxed evaluator,
TRLOO). The trained policy's own first replies that the evaluator passed must have gained
log-probability relative to those it failed, by a margin every run of the variance check cleared
(docs/training.md, "Does the loop learn?"), and no turn may be rewarded while carrying an integrity
violation. Also: the trainer's ``advantage`` switch (the
benchmark's ablation) against `turn_grpo_advantages` on a constructed batch.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")

import torch  # noqa: E402

from tritongym.integrations.trl import KernelRollout, TrlTrainConfig, turn_token_advantages  # noqa: E402
from tritongym.rl import trloo_advantages, turn_grpo_advantages  # noqa: E402

from .trl_support import REPO, make_trainer  # noqa: E402


def _benchmark():
    spec = importlib.util.spec_from_file_location("tritongym_learning_benchmark", REPO / "benchmarks" / "learning.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


# 4 rows = 2 prompts × num_generations 2; ragged turns.
TURN_REWARDS = [[0.0, 0.5], [0.5, 0.5], [0.0], [0.5, 0.0]]
SPANS = [[[0, 2], [4, 6]], [[0, 3], [5, 8]], [[0, 4]], [[0, 2], [3, 6]]]


def _batch():
    inputs = [{"prompt": "p", "turn_rewards": r, "turn_spans": s, "turn_keep_prob": [1.0] * len(r)}
              for r, s in zip(TURN_REWARDS, SPANS, strict=True)]
    output = {"completion_ids": torch.ones(4, 8, dtype=torch.long),
              "completion_mask": torch.ones(4, 8, dtype=torch.long), "advantages": torch.zeros(4)}
    return inputs, output


def _expected(estimator):
    rewards = torch.zeros(4, 2, dtype=torch.float64)
    mask = torch.zeros(4, 2, dtype=torch.bool)
    for i, row in enumerate(TURN_REWARDS):
        rewards[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
        mask[i, : len(row)] = True
    return turn_token_advantages(estimator(rewards, mask, torch.arange(4) // 2), SPANS, 8)


@pytest.mark.parametrize(("advantage", "estimator"), [("trloo", trloo_advantages),
                                                     ("turn_grpo", turn_grpo_advantages)])
def test_the_advantage_switch_selects_the_estimator(problem, evaluator, tmp_path, advantage, estimator):
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator)
    trainer = make_trainer(rollout, tmp_path, num_generations=2, advantage=advantage)
    trainer.model.train()
    result = trainer._apply_turn_advantages(*_batch())
    assert torch.allclose(result["advantages"], _expected(estimator), atol=1e-6)
    # The two differ on this batch (a self-included mean shrinks every advantage): the switch matters.
    assert not torch.allclose(_expected(trloo_advantages), _expected(turn_grpo_advantages))


def test_an_unknown_advantage_is_refused(problem, evaluator, tmp_path):
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator)
    with pytest.raises(ValueError, match="advantage must be one of"):
        make_trainer(rollout, tmp_path, advantage="gae")
    with pytest.raises(ValueError, match="advantage must be"):
        TrlTrainConfig(model="tiny-random", out=str(tmp_path / "run"), advantage="gae")


def test_the_corpus_feedback_is_the_evaluators_real_verdict(evaluator):
    learning = _benchmark()
    from tritongym.tasks import builtin_suite

    problem = next(p for p in builtin_suite() if p.name == "02_leaky_relu")
    corpus = learning.build_corpus([problem], evaluator)
    status = {v.kind: v.status for v in corpus.variants}
    assert status["honest"] == "ok"
    assert status["missing_activation"] == "incorrect"
    assert status["torch_fallback"] == "integrity_violation"
    assert status["syntax_error"] == "compile_error"
    assert all(v.reward == 0 for v in corpus.variants if v.kind != "honest")
    # Each conversation: prompt, first answer, that answer's feedback message, the honest answer.
    honest = learning.reply_of((learning.SOLUTIONS / "02_leaky_relu.py").read_text())
    for conversation in corpus.conversations:
        assert conversation[-1] == {"role": "assistant", "content": honest}
        first = conversation[-3]["content"]
        variant = next(v for v in corpus.variants if learning.reply_of(v.code) == first)
        assert conversation[-2] == {"role": "user", "content": variant.feedback}


#: The shortened run (docs/training.md, "Does the loop learn?"): two problems, 20 pretraining epochs,
#: honest first answers twice per problem (a third of them), RL at a learning rate high enough to learn
#: in a handful of steps. The margin (nats) is what every run of the variance check cleared (the docs
#: give the runs: the smallest gap was 1.6, in a run whose reward curve did not rise).
SHORT_PROBLEMS = ("01_scaled_add", "02_leaky_relu")
SHORT_EPOCHS, SHORT_STEPS, SHORT_LR, HONEST_WEIGHT = 20, 5, 2e-4, 2
MARGIN_NATS = 1.0


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """The benchmark's pretrained policy on the short run's problems (pretraining seed 0).

    The corpus's verdicts come from an evaluator with a fixed master seed: the feedback messages quote
    mismatch counts that depend on the trial inputs, the tokenizer and so the pretrained policy depend
    on those texts, and the policy's starting reward must not drift from run to run (a start near the
    maximum leaves no room to learn). The seed only fixes this corpus; RL's verdicts use secret seeds.
    """
    learning = _benchmark()
    from tritongym import EvalOptions
    from tritongym.env import PoolEvaluator
    from tritongym.tasks import builtin_suite

    torch.set_num_threads(1)
    problems = [p for p in builtin_suite() if p.name in SHORT_PROBLEMS]
    with PoolEvaluator(EvalOptions(device="cpu", seed=0), max_workers=2) as evaluator:
        corpus = learning.build_corpus(problems, evaluator, honest_weight=HONEST_WEIGHT)
    folder = tmp_path_factory.mktemp("pretrained")
    report = learning.pretrain(corpus, folder, size=learning.ModelSize(), epochs=SHORT_EPOCHS, lr=3e-3, seed=0,
                               log=lambda _message: None)
    return learning, folder, [p.problem_id for p in problems], report


def test_rl_moves_the_policy_toward_its_passing_replies_through_rollout_evaluation_trloo_and_updates(
        pretrained, tmp_path):
    """The loop learns: after the RL steps, the policy's own first replies that the evaluator passed are
    more likely than before, relative to those it failed (`first_reply_shift`).

    Not the reward curve: over 5 steps its rise depends on where the pretrained policy starts (a start
    near the maximum of 1.0 leaves no room; in the variance check four of six pretrained policies
    started at 0.875 or above), while the policy gradient's direction shows from any start.
    """
    learning, folder, problem_ids, report = pretrained
    # RL's verdicts under a fixed master seed too: feedback quotes values that depend on the trial
    # inputs, and the second turn is sampled after that feedback (the test is about learning, not
    # about the draw of feedback texts).
    settings = learning.RLSettings(steps=SHORT_STEPS, learning_rate=SHORT_LR,
                                   max_new_tokens=report["reply_tokens_max"] + 32, eval_seed=0)
    run = learning.run_rl(folder, tmp_path / "rl", problem_ids, advantage="trloo", seed=0, settings=settings)
    curve = run["curve"]
    assert [point["step"] for point in curve] == list(range(SHORT_STEPS))
    assert all(point["trajectories"] == settings.num_generations * settings.prompts_per_step for point in curve)
    shift = run["shift"]
    assert shift["ok_replies"] + shift["other_replies"] == SHORT_STEPS * settings.num_generations \
        * settings.prompts_per_step
    assert shift["ok_replies"] > 0 and shift["other_replies"] > 0, (shift, curve)
    # The failed replies lost probability, and by MARGIN_NATS more than the passing ones.
    assert shift["other_shift"] < 0, (shift, curve)
    assert shift["ok_shift"] - shift["other_shift"] > MARGIN_NATS, (shift, curve)
    # Not one turn was rewarded while the evaluator found an integrity violation in it.
    assert [hack for point in curve for hack in point["hacks"]] == []
    assert run["summary"]["parameter_change_l1"] > 0
