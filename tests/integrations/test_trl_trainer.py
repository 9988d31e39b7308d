"""`TRLOOGRPOTrainer` (TRLOO turn advantages, PRS as a loss mask) and the TRL callbacks, with TRL
really installed: the hook against `trloo_advantages` on a constructed batch, real GRPO steps on
scripted replies judged by the real evaluator, and the response-length LR decay callback."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")

import torch  # noqa: E402
from transformers import TrainerControl, TrainerState, TrainingArguments  # noqa: E402

from tritongym.env.store import load_trajectories  # noqa: E402
from tritongym.integrations.trl.rollout import KernelRollout  # noqa: E402
from tritongym.integrations.trl.trainer import ResponseLengthLRCallback, RunLogCallback  # noqa: E402
from tritongym.rl import ResponseLengthLRDecay  # noqa: E402

from . import released_drkernel as released  # noqa: E402
from .trl_support import HONEST_REPLY, VOID_REPLY, ScriptedGenerator, make_trainer  # noqa: E402

# 6 rows = 2 prompts × num_generations 3; ragged turns; spans inside a completion of width 12.
TURN_REWARDS = [[0.0, 0.5, 1.0], [0.5], [0.0, 0.0], [0.5, 0.5], [0.0, 1.0, 0.5], [1.0]]
SPANS = [[[0, 2], [4, 6], [8, 10]], [[0, 3]], [[0, 2], [5, 7]], [[0, 4], [6, 9]], [[0, 1], [3, 5], [7, 12]],
         [[0, 5]]]


def _batch(keep=None):
    inputs = [{"prompt": "p", "turn_rewards": r, "turn_spans": s,
               "turn_keep_prob": keep[i] if keep else [1.0] * len(r)}
              for i, (r, s) in enumerate(zip(TURN_REWARDS, SPANS, strict=True))]
    env_mask = torch.zeros(6, 12, dtype=torch.long)
    for i, spans in enumerate(SPANS):
        for start, end in spans:
            env_mask[i, start:end] = 1
    output = {"completion_ids": torch.ones(6, 12, dtype=torch.long),
              "completion_mask": torch.ones(6, 12, dtype=torch.long), "tool_mask": env_mask.clone(),
              "advantages": torch.zeros(6), "num_items_in_batch": env_mask.sum()}
    return inputs, output


def _expected_token_advantages(dropped=(), turn_rewards=TURN_REWARDS, mask_void_turn=True):
    """Token advantages by KernelGYM's released rules (``released_drkernel``); ``dropped``: PRS-rejected turns."""
    table = released.turn_advantages([("ab"[i // 3], r) for i, r in enumerate(turn_rewards)], set(dropped),
                                     mask_void_turn)
    expected = torch.zeros(6, 12)
    for i, spans in enumerate(SPANS):
        for k, (start, end) in enumerate(spans):
            expected[i, start:end] = float(table[(i, k)])
    return expected


@pytest.fixture(scope="module")
def trloo_trainer(problem, evaluator, tmp_path_factory):
    rollout = KernelRollout([problem], turns=3, evaluator=evaluator)
    trainer = make_trainer(rollout, tmp_path_factory.mktemp("trloo"), num_generations=3)
    trainer.model.train()
    return trainer


def test_trloo_hook_equals_trloo_advantages_on_a_constructed_batch(trloo_trainer):
    inputs, output = _batch()
    result = trloo_trainer._apply_turn_advantages(inputs, output)
    expected = _expected_token_advantages()
    assert result["advantages"].shape == (6, 12)
    assert torch.allclose(result["advantages"], expected, atol=1e-6)
    # Row 0, turn 2: G = 0.5 + 1.0; of the others in its group only row 2 reached turn 2 (G = 0.0).
    assert result["advantages"][0, 4] == pytest.approx(1.5 - 0.0)
    # Row 1, turn 1: G = 0.5; the others' turn-1 returns are 1.5 (row 0) and 0.0 (row 2).
    assert result["advantages"][1, 0] == pytest.approx(0.5 - (1.5 + 0.0) / 2)
    assert bool((result["advantages"][result["tool_mask"] == 0] == 0).all())  # feedback tokens carry none
    assert torch.equal(result["tool_mask"], output["tool_mask"])  # every keep probability 1: nothing dropped


def test_prs_drops_rejected_turns_from_the_loss_and_keeps_their_rewards(trloo_trainer):
    keep = [[1.0] * len(r) for r in TURN_REWARDS]
    keep[0][1] = 0.0  # row 0, turn 2 rejected with certainty
    keep[4][2] = 0.0
    inputs, output = _batch(keep)
    env_mask = output["tool_mask"].clone()
    result = trloo_trainer._apply_turn_advantages(inputs, output)
    dropped = env_mask.clone()
    dropped[0, 4:6] = 0
    dropped[4, 7:12] = 0
    assert torch.equal(result["tool_mask"], dropped)
    assert int(result["num_items_in_batch"]) == int(dropped.sum())
    assert trloo_trainer._metrics["train"]["tritongym/prs_rejected_turns"][-1] == 2.0
    # Released: a rejected turn keeps its reward in its peers' baselines and its trajectory's reward-to-go.
    expected = _expected_token_advantages(dropped={(0, 1), (4, 2)})
    assert torch.allclose(result["advantages"], expected, atol=1e-6)
    # Row 0, turn 1: G = 0.0 + 0.5 (turn 2, rejected, reward kept) + 1.0; peers' turn-1 returns 0.5 and 0.0.
    assert result["advantages"][0, 0] == pytest.approx(1.5 - (0.5 + 0.0) / 2)


@pytest.fixture(scope="module")
def pair_trainer(problem, evaluator, tmp_path_factory):
    """num_generations 2: the issue's worked examples are one prompt with two trajectories."""
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator)
    trainer = make_trainer(rollout, tmp_path_factory.mktemp("pair"), num_generations=2)
    trainer.model.train()
    return trainer


def _rows(rewards, keep, spans=([[0, 2], [4, 6]], [[0, 3], [5, 7]])):
    return [{"prompt": "p", "turn_rewards": r, "turn_spans": sp, "turn_keep_prob": k}
            for r, k, sp in zip(rewards, keep, spans, strict=True)]


def test_a_rejected_turn_keeps_its_reward_worked_example(pair_trainer):
    # One prompt, gamma 1: A = [0.5, 2.0] with turn 2 rejected by PRS, B = [0.5, 1.0]. Released: A turn 1
    # = +1, B = [-1, -1]; zeroing A's turn 2 (the old rule) would give A turn 1 = -1 and B = [+1, +1].
    result = _score(pair_trainer, _rows([[0.5, 2.0], [0.5, 1.0]], [[1.0, 0.0], [1.0, 1.0]]))
    table = released.turn_advantages([("w", [0.5, 2.0]), ("w", [0.5, 1.0])], drop={(0, 1)})
    assert [table[(0, 0)], table[(1, 0)], table[(1, 1)]] == pytest.approx([1.0, -1.0, -1.0])
    assert result["advantages"][0].tolist() == pytest.approx([1.0, 1.0, 0, 0, 0, 0, 0, 0])
    assert result["advantages"][1].tolist() == pytest.approx([-1.0] * 3 + [0, 0] + [-1.0] * 2 + [0])
    assert result["tool_mask"][0].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]


def test_meaningful_turn_masking_worked_example(pair_trainer):
    # A = [1, 0], B = [0, 1]: released masks A's turn 2 and gives B's turn 2 +1 (its group is B alone);
    # without the masking A's turn 2 would train at -1.
    result = _score(pair_trainer, _rows([[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]))
    assert result["advantages"][0].tolist() == pytest.approx([0.0] * 8)
    assert result["advantages"][1].tolist() == pytest.approx([0.0] * 5 + [1.0, 1.0, 0.0])
    assert result["tool_mask"][0].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]  # A's turn 2 leaves the loss
    assert pair_trainer._metrics["train"]["tritongym/not_meaningful_turns"][-1] == 1.0
    pair_trainer.meaningful_turns = False
    try:
        control = _score(pair_trainer, _rows([[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]))
    finally:
        pair_trainer.meaningful_turns = True
    table = released.turn_advantages([("v", [1.0, 0.0]), ("v", [0.0, 1.0])], mask_void_turn=False)
    assert control["advantages"][0, 4].item() == pytest.approx(table[(0, 1)]) == pytest.approx(-1.0)



def test_a_masked_turn_leaves_its_peers_baselines_in_groups_of_three(trloo_trainer):
    # Two prompts x num_generations 3. Prompt a: A = [1, -0.5] has its turn 2 masked (after a scoring
    # turn, nothing), so turn 2's group is {B, C}: B 0.5 - 1 = -0.5, C 1 - 0.5 = +0.5. Left in the group
    # (reward zeroed) it would pull both baselines down: B 0.5 - (0 + 1) / 2 = 0, C 1 - (0 + 0.5) / 2 = 0.75.
    # Groups of two cannot show this: the masked turn's one peer is alone either way.
    rewards = [[1.0, -0.5], [0.0, 0.5], [0.0, 1.0], [0.5, 0.5], [1.0, 0.0], [0.0, -1.0]]
    spans = [[[0, 2], [4, 6]]] * 6
    inputs = _rows(rewards, [[1.0, 1.0]] * 6, spans)
    result = _score(trloo_trainer, inputs)
    table = released.turn_advantages([("ab"[i // 3], r) for i, r in enumerate(rewards)])
    for i in range(6):
        assert result["advantages"][i, 0].item() == pytest.approx(table[(i, 0)]), i
        assert result["advantages"][i, 4].item() == pytest.approx(table[(i, 1)]), i
    assert [result["advantages"][i, 4].item() for i in range(3)] == pytest.approx([0.0, -0.5, 0.5])
    assert [result["advantages"][i, 0].item() for i in range(3)] == pytest.approx([0.25, -0.5, 0.25])
    assert result["tool_mask"][0].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]  # A's turn 2 leaves the loss
    assert result["tool_mask"][4].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]  # so does [1, 0]'s
    assert trloo_trainer._metrics["train"]["tritongym/not_meaningful_turns"][-1] == 2.0


def _score(trainer, inputs, width=8):
    env_mask = torch.zeros(len(inputs), width, dtype=torch.long)
    for i, row in enumerate(inputs):
        for start, end in row["turn_spans"]:
            env_mask[i, start:end] = 1
    output = {"completion_ids": torch.ones(len(inputs), width, dtype=torch.long),
              "completion_mask": torch.ones(len(inputs), width, dtype=torch.long), "tool_mask": env_mask,
              "advantages": torch.zeros(len(inputs)), "num_items_in_batch": env_mask.sum()}
    return trainer._apply_turn_advantages(inputs, output)


def test_group_filter_uses_last_turn_rewards_after_meaningful_masking(trloo_trainer):
    # Prompt b's raw last-turn rewards differ (-0.5, 0, -1), but each follows a scoring turn and is masked
    # (loss_mask 0 zeroes it): as KernelGYM's filter sees them they are all 0, so the group leaves the loss.
    # Prompt a's last-turn rewards 0, 0, 0.0019 have an unbiased std of 1.1e-3 >= 1e-3: kept (the population
    # std, 9e-4, would have dropped it). PRS rejections change no reward, so they do not move the filter.
    rewards = [[0.0, 0.0, 0.0], [0.0], [0.0, 0.0019], [1.0, -0.5], [0.0, 0.0, 0.0], [0.5, -1.0]]
    spans = [[[0, 2], [4, 6], [8, 10]], [[0, 3]], [[0, 2], [5, 7]], [[0, 4], [6, 9]], [[0, 1], [3, 5], [7, 12]],
             [[0, 5], [7, 9]]]
    keep = [[1.0] * len(r) for r in rewards]
    keep[2][1] = 0.0  # PRS rejects the 0.0019 turn: its reward still counts in the filter
    inputs = [{"prompt": "p", "turn_rewards": r, "turn_spans": sp, "turn_keep_prob": k}
              for r, sp, k in zip(rewards, spans, keep, strict=True)]
    trajectories = [("ab"[i // 3], r) for i, r in enumerate(rewards)]
    assert released.filtered_groups(trajectories) == {"b"}
    trloo_trainer.group_filter_std = 1e-3
    try:
        result = _score(trloo_trainer, inputs, width=12)
    finally:
        trloo_trainer.group_filter_std = None
    assert not result["tool_mask"][3:].any() and not result["advantages"][3:].any()
    assert result["tool_mask"][:3].sum() == 2 + 2 + 2 + 3 + 2  # prompt a: all turns but the rejected one
    assert trloo_trainer._metrics["train"]["tritongym/filtered_groups"][-1] == 1.0
    table = released.turn_advantages(trajectories, drop={(2, 1)})
    for i in range(3):
        for k, (start, end) in enumerate(spans[i]):
            assert result["advantages"][i, start:end].tolist() == pytest.approx([table[(i, k)]] * (end - start))
    # Every group filtered: nothing left to learn from, and the loss's divisor stays finite.
    flat = [{"prompt": "p", "turn_rewards": [0.5], "turn_spans": [[0, 2]], "turn_keep_prob": [1.0]}] * 6
    trloo_trainer.group_filter_std = 1e-3
    try:
        result = _score(trloo_trainer, flat)
    finally:
        trloo_trainer.group_filter_std = None
    assert not result["tool_mask"].any() and int(result["num_items_in_batch"]) == 1


def test_trloo_hook_needs_the_rollout_fields(trloo_trainer):
    with pytest.raises(ValueError, match="KernelRollout"):
        trloo_trainer._apply_turn_advantages([{"prompt": "p"}] * 3, {})


def test_grpo_steps_with_trloo_change_parameters_on_scripted_replies(problem, evaluator, tmp_path):
    # Row 0 writes the honest kernel in turn 1, row 1 never writes code: real verdicts (ok vs void)
    # give non-zero TRLOO advantages, so two real optimizer steps must move the weights.
    generator = ScriptedGenerator([[HONEST_REPLY, VOID_REPLY], [VOID_REPLY, VOID_REPLY]])
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator, generator=generator, out=str(tmp_path / "run"))
    trainer = make_trainer(rollout, tmp_path, steps=2, callbacks=[RunLogCallback(tmp_path / "run")])
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 2
    change = sum(float((p.detach() - b).abs().sum()) for p, b in zip(trainer.model.parameters(), before, strict=True))
    assert change > 0

    tokenizer = trainer.processing_class
    reply = len(tokenizer(HONEST_REPLY, add_special_tokens=False)["input_ids"]) + 1
    void = len(tokenizer(VOID_REPLY, add_special_tokens=False)["input_ids"]) + 1
    logs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [entry for entry in logs if "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2]
    for entry in steps:
        assert entry["reward"] == pytest.approx(0.25)  # returns 0.5 and 0 (TrajectoryReward's sum)
        assert entry["tritongym/turn_1/reward"] == pytest.approx(0.25)
        assert entry["tritongym/turn_1/correct"] == pytest.approx(0.5)
        assert entry["tritongym/turn_2/void"] == pytest.approx(1.0)
        # |±0.5| on turn 1; row 0's turn 2 (0 after 0.5) is not meaningful and leaves the groups, row 1's is 0.
        assert entry["tritongym/trloo_advantage_abs"] == pytest.approx(0.5 * 2 / 3)
        assert entry["tritongym/not_meaningful_turns"] == 1.0
        # TRL counts only env_mask-1 tokens as the response length: the feedback is not the model's.
        assert entry["completions/mean_length"] == pytest.approx((reply + void + 2 * void) / 2)
        assert entry["grad_norm"] > 0
    trajectories = load_trajectories(tmp_path / "run")
    assert len(trajectories) == 4
    assert sorted(t["training_step"] for t in trajectories) == [0, 0, 1, 1]
    assert sorted(t["turns"][0]["status"] for t in trajectories) == ["ok", "ok", "void", "void"]


def _drive(lengths, tmp_path, via_callback):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    scheduler = ResponseLengthLRDecay(optimizer, baseline_window=2, surge_factor=2.0, period_factor=1.0,
                                      warmup_steps=0, min_lr_ratio=0.1)
    callback = ResponseLengthLRCallback()
    args = TrainingArguments(output_dir=str(tmp_path), logging_steps=1, report_to="none", use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    if via_callback:
        callback.on_train_begin(args, state, control, lr_scheduler=scheduler)
    lrs = []
    for length in lengths:
        optimizer.step()
        if via_callback:  # what transformers' Trainer does after each optimizer step, then the step's log
            scheduler.step()
            state.global_step += 1
            callback.on_log(args, state, control, logs={"loss": 0.0, "completions/mean_length": length})
        else:  # ResponseLengthLRDecay's own documented use
            scheduler.step(length)
        lrs.append(optimizer.param_groups[0]["lr"])
    return lrs, scheduler.surge_step


def test_length_lr_callback_matches_the_scheduler_fed_directly(tmp_path):
    lengths = [10, 10, 12, 40, 11, 11, 11, 11, 11, 11]
    direct, surge = _drive(lengths, tmp_path, via_callback=False)
    fed, surge_cb = _drive(lengths, tmp_path, via_callback=True)
    assert surge == surge_cb == 3  # 40 > 2 × mean(10, 10)
    assert fed == direct
    # fed[j] is the LR set after step j, i.e. that of step j + 1: halved at steps 6 and 9 (period 3 from 3).
    assert fed == [1.0] * 5 + [0.5] * 3 + [0.25] * 2


def test_length_lr_callback_refuses_a_setup_it_cannot_serve(tmp_path):
    weight = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([weight], lr=1.0)
    state, control = TrainerState(), TrainerControl()
    args = TrainingArguments(output_dir=str(tmp_path), logging_steps=1, report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match="ResponseLengthLRDecay"):
        ResponseLengthLRCallback().on_train_begin(args, state, control,
                                                  lr_scheduler=torch.optim.lr_scheduler.StepLR(optimizer, 1))
    args5 = TrainingArguments(output_dir=str(tmp_path), logging_steps=5, report_to="none", use_cpu=True)
    with pytest.raises(ValueError, match="logging_steps=1"):
        ResponseLengthLRCallback().on_train_begin(args5, state, control,
                                                  lr_scheduler=ResponseLengthLRDecay(optimizer))


class KeepProbabilityOverride:
    """A `KernelRollout` whose PRS keep probabilities are set per (row, turn): the stand-in for a GPU's
    profile (on a CPU coverage is unmeasured, so every keep probability is 1)."""

    def __init__(self, rollout, keep):
        self.rollout, self.keep, self.__name__ = rollout, keep, "keep_override"

    def dataset_rows(self):
        return self.rollout.dataset_rows()

    def __call__(self, prompts, trainer):
        out = self.rollout(prompts, trainer)
        out["turn_keep_prob"] = [list(k) for k in self.keep]
        return out


def _score_through_trl(problem, evaluator, tmp_path, script, keep=None):
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator, generator=ScriptedGenerator(script))
    trainer = make_trainer(rollout if keep is None else KeepProbabilityOverride(rollout, keep), tmp_path)
    trainer.model.train()
    inputs = [dict(row) for row in [rollout.dataset_rows()[0]] * 2]
    output = trainer._generate_and_score_completions(inputs)  # TRL's own scoring step, then the hook
    return inputs, output, trainer


def _check_turns(inputs, output, table):
    for i, row in enumerate(inputs):
        for k, (start, end) in enumerate(row["turn_spans"]):
            got = output["advantages"][i, start:end].tolist()
            assert got == pytest.approx([table[(i, k)]] * (end - start), abs=1e-6), (i, k)


def test_trls_scoring_step_masks_a_regressing_turn(problem, evaluator, tmp_path):
    # Real verdicts: A writes the honest kernel then nothing (0.5, 0), B nothing then the kernel (0, 0.5).
    inputs, output, trainer = _score_through_trl(problem, evaluator, tmp_path,
                                                 [[HONEST_REPLY, VOID_REPLY], [VOID_REPLY, HONEST_REPLY]])
    assert [row["turn_rewards"] for row in inputs] == [[0.5, 0.0], [0.0, 0.5]]
    table = released.turn_advantages([("p", r["turn_rewards"]) for r in inputs])
    assert [table[(0, 1)], table[(1, 1)]] == pytest.approx([0.0, 0.5])  # A's turn 2 masked, B's alone: +0.5
    _check_turns(inputs, output, table)
    start, end = inputs[0]["turn_spans"][1]
    assert not output["tool_mask"][0, start:end].any()
    assert trainer._metrics["train"]["tritongym/not_meaningful_turns"][-1] == 1.0


def test_trls_scoring_step_keeps_a_prs_rejected_turns_reward(problem, evaluator, tmp_path):
    # A = honest twice (0.5, 0.5) with turn 2 rejected by PRS, B = nothing twice (0, 0). Released: A turn 1
    # = 1.0 - 0 = +1, B = [-1, 0 - 0.5 = -0.5]; zeroing A's turn 2 would give +0.5, [-0.5, 0].
    inputs, output, trainer = _score_through_trl(
        problem, evaluator, tmp_path, [[HONEST_REPLY, HONEST_REPLY], [VOID_REPLY, VOID_REPLY]],
        keep=[[1.0, 0.0], [1.0, 1.0]])
    assert [row["turn_rewards"] for row in inputs] == [[0.5, 0.5], [0.0, 0.0]]
    table = released.turn_advantages([("p", r["turn_rewards"]) for r in inputs], drop={(0, 1)})
    assert [table[(0, 0)], table[(1, 0)], table[(1, 1)]] == pytest.approx([1.0, -1.0, -0.5])
    _check_turns(inputs, output, table)
    start, end = inputs[0]["turn_spans"][1]
    assert not output["tool_mask"][0, start:end].any()
    assert int(output["num_items_in_batch"]) == int((output["completion_mask"] * output["tool_mask"]).sum())


def test_two_processes_on_gloo_when_only_one_rank_drops_turns(tmp_path):
    # PRS rejects turns on rank 0's rows only. Every collective of the hook must run on both ranks; a
    # gather under a per-rank condition fails on gloo ("collective mismatch"; on GPUs it would hang).
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("trl_two_process.py")
    env = dict(os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1")
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                          str(script), str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2] and [r["global_step"] for r in ranks] == [1, 1]
    # Both ranks divide by the same global count of loss tokens; rank 0 lost its rows' second turns.
    assert ranks[0]["num_items_in_batch"] == ranks[1]["num_items_in_batch"] == sum(r["local_tokens"] for r in ranks)
    assert 2 * ranks[0]["local_tokens"] == ranks[1]["local_tokens"]
    assert [r["prs_rejected_turns"] for r in ranks] == [2.0, 2.0]  # the batch's count, gathered
