"""`KernelRollout` as TRL's rollout_func: masks, reward positions, turn counts, token-in/token-out,
trajectories; with a real GRPOTrainer, a tiny-random model and the real evaluator."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")

from tritongym.env.core import VOID_REASON  # noqa: E402
from tritongym.env.export import turn_rows  # noqa: E402
from tritongym.env.store import load_trajectories  # noqa: E402
from tritongym.evaluator import Status  # noqa: E402
from tritongym.integrations.trl.rollout import KernelRollout  # noqa: E402

from .trl_support import HONEST, HONEST_REPLY, PID, VOID_REPLY, ScriptedGenerator, make_trainer  # noqa: E402


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def test_scripted_rollout_masks_feedback_and_places_turn_rewards(evaluator, problem, tmp_path):
    script = [[VOID_REPLY, HONEST_REPLY], [VOID_REPLY, VOID_REPLY]]
    generator = ScriptedGenerator(script)
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator, generator=generator, out=str(tmp_path / "run"))
    trainer = make_trainer(rollout, tmp_path)
    tokenizer = trainer.processing_class
    prompt = rollout.prompt(problem)
    out = rollout([prompt, prompt], trainer)  # TRL hands each prompt over num_generations times

    assert {k: len(v) for k, v in out.items() if v is not None} == dict.fromkeys(
        ["prompt_ids", "completion_ids", "env_mask", "turn_rewards", "turn_status", "turn_spans",
         "turn_keep_prob"], 2)
    assert out["logprobs"] is None  # the scripted generator gives none; TRL then recomputes them
    expected_prompt = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                                    return_dict=False)
    assert out["prompt_ids"] == [expected_prompt, expected_prompt]
    assert out["turn_status"] == [["void", "ok"], ["void", "void"]]
    assert out["turn_rewards"] == [[0.0, 0.5], [0.0, 0.0]]
    assert out["turn_keep_prob"] == [[1.0, 1.0], [1.0, 1.0]]  # no coverage on a CPU: PRS keeps every turn

    completion, mask, spans = out["completion_ids"][0], out["env_mask"][0], out["turn_spans"][0]
    (s0, e0), (s1, e1) = spans
    assert s0 == 0 and e0 < s1 and e1 == len(completion) == len(mask)
    assert completion[s0:e0] == _ids(tokenizer, VOID_REPLY)
    assert completion[s1:e1] == _ids(tokenizer, HONEST_REPLY)
    assert mask == [1] * e0 + [0] * (s1 - e0) + [1] * (e1 - s1)
    feedback = tokenizer.decode(completion[e0:s1])
    assert feedback.startswith("\n<|im_start|>user\n") and feedback.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert VOID_REASON.split(" (")[0] in feedback
    # Token in, token out: turn 2 was generated from exactly the prompt and turn 1's tokens + feedback.
    assert generator.contexts[1][0] == expected_prompt + completion[:s1]
    # The second row has no code in either turn: void feedback after turn 1, none after the last turn.
    assert out["env_mask"][1].count(0) == s1 - e0 and out["env_mask"][1][-1] == 1

    trajectories = sorted(load_trajectories(tmp_path / "run"), key=lambda t: t["sample"])
    assert [(t["problem_id"], t["sample"], t["turn_budget"]) for t in trajectories] == [(PID, 0, 2), (PID, 1, 2)]
    rows = turn_rows(trajectories)  # the agent runner's export reads a training run
    assert [(r["sample"], r["turn"], r["status"], r["reward"]) for r in rows] == [
        (0, 0, "void", 0.0), (0, 1, "ok", 0.5), (1, 0, "void", 0.0), (1, 1, "void", 0.0)]
    second = trajectories[0]["turns"][1]
    assert second["code"] == HONEST and second["result"]["status"] == "ok"
    assert second["messages"][-2] == {"role": "assistant", "content": VOID_REPLY}
    assert trajectories[0]["best_turn"] == 1 and trajectories[0]["provenance"]["trainer"] == "trl"

    # A later rollout into the same folder continues the sample numbering.
    generator.calls = 0
    rollout([prompt, prompt], trainer)
    assert sorted(t["sample"] for t in load_trajectories(tmp_path / "run")) == [0, 1, 2, 3]


def test_sampled_rollout_from_the_tiny_model(evaluator, problem, tmp_path):
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator, extract="whole", max_new_tokens=8)
    trainer = make_trainer(rollout, tmp_path, num_generations=3)
    tokenizer = trainer.processing_class
    prompt = rollout.prompt(problem)
    out = rollout([prompt] * 3, trainer)

    verdicts = {str(s) for s in Status}
    for i in range(3):
        completion, mask, logps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        spans = out["turn_spans"][i]
        assert len(spans) == 2 and len(out["turn_rewards"][i]) == 2
        assert len(completion) == len(mask) == len(logps)
        model_tokens = {t for s, e in spans for t in range(s, e)}
        assert [int(t in model_tokens) for t in range(len(mask))] == mask
        for s, e in spans:
            assert 1 <= e - s <= 8
            assert all(math.isfinite(lp) and lp <= 0.0 for lp in logps[s:e])
        (_, e0), (s1, _) = spans
        assert all(lp == 0.0 for lp in logps[e0:s1])
        feedback = completion[e0:s1]
        ended = completion[e0 - 1] == tokenizer.eos_token_id
        # A reply cut at max_new_tokens gets its end-of-turn token from the env (masked), once.
        assert (feedback[0] == tokenizer.eos_token_id) != ended
        assert "<|im_start|>user" in tokenizer.decode(feedback)
        # "whole" extraction: every non-empty reply reaches the evaluator and gets a real verdict.
        for status in out["turn_status"][i]:
            assert status in verdicts or status == "void"
        assert out["turn_rewards"][i] == [0.0, 0.0]


def test_a_prompt_the_rollout_did_not_render_is_refused(evaluator, problem, tmp_path):
    rollout = KernelRollout([problem], turns=1, evaluator=evaluator)
    trainer = make_trainer(rollout, tmp_path)
    with pytest.raises(ValueError, match="dataset_rows"):
        rollout([[{"role": "user", "content": "something else"}]] * 2, trainer)
    with pytest.raises(ValueError, match="turns"):
        KernelRollout([problem], turns=0, evaluator=evaluator)


def test_sampling_stops_at_the_chat_templates_turn_tokens(evaluator, problem, tmp_path):
    # Dr.Kernel's rollout stops at the template's turn tokens, not EOS only. Make <|im_start|> (the token
    # that opens a new message) the model's overwhelming choice: the reply must end right after it.

    from tritongym.integrations.chat_stops import chat_template_stop_ids
    from tritongym.integrations.trl.rollout import sample_with_model

    rollout = KernelRollout([problem], turns=1, evaluator=evaluator)
    trainer = make_trainer(rollout, tmp_path)
    tokenizer = trainer.processing_class
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert chat_template_stop_ids(tokenizer) == [tokenizer.eos_token_id, im_start]
    head = trainer.accelerator.unwrap_model(trainer.model).lm_head

    def favour(module, inputs, output):
        output[..., im_start] += 1e3
        return output

    hook = head.register_forward_hook(favour)
    try:
        generations = sample_with_model(trainer, [[5, 6, 7], [8, 9]], max_new_tokens=6)
    finally:
        hook.remove()
    assert [g.token_ids for g in generations] == [[im_start], [im_start]]


class _PerCallGenerator:
    """``replies[k]``: the texts of the k-th call, one per context still active (early stop shrinks them)."""

    def __init__(self, replies: list[list[str]]) -> None:
        self.replies, self.sizes = replies, []

    def __call__(self, trainer, contexts, max_new_tokens):
        from tritongym.integrations.trl.rollout import Generation

        tokenizer = trainer.processing_class
        texts = self.replies[len(self.sizes)]
        self.sizes.append(len(contexts))
        assert len(texts) == len(contexts), (texts, len(contexts))
        return [Generation(tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
                for t in texts]


def test_stop_on_correct_ends_a_trajectory_at_its_first_ok_turn_and_later_turns_have_fewer_members(
        evaluator, problem, tmp_path):
    # KernelGYM's episodes stop at the first correct kernel: the setting where TRLOO and turn-GRPO differ.
    generator = _PerCallGenerator([[HONEST_REPLY, VOID_REPLY], [HONEST_REPLY]])
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator, generator=generator, success="correct",
                            out=str(tmp_path / "run"))
    trainer = make_trainer(rollout, tmp_path)
    prompt = rollout.prompt(problem)
    out = rollout([prompt, prompt], trainer)
    assert generator.sizes == [2, 1]  # the second turn is generated for the unsolved row alone
    assert out["turn_status"] == [["ok"], ["void", "ok"]]
    assert out["turn_rewards"] == [[0.5], [0.0, 0.5]]
    assert len(out["turn_spans"][0]) == 1 and out["env_mask"][0] == [1] * len(out["completion_ids"][0])
    stops = {t["sample"]: t["stop_reason"] for t in load_trajectories(tmp_path / "run")}
    assert stops == {0: "success", 1: "success"}

    with pytest.raises(ValueError, match="success rule"):
        KernelRollout([problem], turns=2, evaluator=evaluator, success="sometimes")


def test_the_training_config_checks_its_stop_rule():
    from tritongym.integrations.trl.train import TrlTrainConfig

    assert TrlTrainConfig(model="m", out="o", stop_on="correct").stop_on == "correct"
    assert TrlTrainConfig(model="m", out="o").stop_on == "never"
    with pytest.raises(ValueError, match="success rule"):
        TrlTrainConfig(model="m", out="o", stop_on="always")
