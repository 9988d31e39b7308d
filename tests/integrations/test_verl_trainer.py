"""The ``tritongym`` V1 trainer mode: Dr.Kernel's PRS per turn inside verl's own advantage step.

The rows go through the path a real run takes: ``KernelAgentLoopOutput.as_dict()`` (what verl's
V1 agent-loop worker stores), a real TransferQueue on a local Ray instance, and verl's own
``PPOTrainer._compute_advantage`` (KL-in-reward switch, rollout correction, the registered ``trloo``
estimator), called on a `KernelPPOTrainer` whose config is composed from verl's ``ppo_trainer``.
Expected values come from float64 loops written from KernelGYM @3a84417's released rules (``released_drkernel``).
"""

from __future__ import annotations

import math
import os

import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[verl]'; see .ci/trainers)")
pytest.importorskip("transfer_queue", reason="TransferQueue is not installed (part of the verl extra)")

import ray  # noqa: E402
import transfer_queue as tq  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls  # noqa: E402
from verl.utils.tensordict_utils import list_of_dict_to_tensordict  # noqa: E402
from verl.workers.utils.padding import response_to_nested  # noqa: E402

from tritongym.integrations.verl.advantages import explicit_turns, trloo_advantage_return, turn_numbers  # noqa: E402
from tritongym.integrations.verl.agent_loop import (  # noqa: E402
    TURN_KEEP_PROBABILITY,
    TURN_NUMBERS,
    KernelAgentLoopOutput,
)
from tritongym.integrations.verl.trainer import (  # noqa: E402
    KernelPPOTrainer,
    TurnRejection,
    mrs_turn_drop,
    prs_turn_drop,
)
from tritongym.rl import mrs_mask, trloo_advantages  # noqa: E402

from . import released_drkernel as released  # noqa: E402

# Trajectories: (uid, tokens per turn, feedback tokens after each turn but the last, turn rewards,
# PRS keep probabilities). Probabilities are 0 or 1 so the draws are known; 0 is a correct but lazy
# kernel (coverage ≤ 0.3).
TRAJECTORIES = [
    ("p", [3, 2, 2], 2, [0.5, 1.5, 1.0], [1.0, 0.0, 1.0]),
    ("p", [2, 3, 1], 1, [0.0, 1.0, 1.5], [1.0, 1.0, 1.0]),
    ("p", [4, 2], 3, [1.0, 0.5], [0.0, 1.0]),
    ("q", [2, 2, 2], 2, [0.0, 0.0, 1.5], [1.0, 1.0, 1.0]),
    ("q", [3, 1, 2], 1, [1.5, 1.5, 1.5], [1.0, 1.0, 0.0]),
]


def _output(turn_tokens, feedback, rewards, keep) -> KernelAgentLoopOutput:
    mask: list[int] = []
    for i, n in enumerate(turn_tokens):
        mask += [1] * n
        if i < len(turn_tokens) - 1:
            mask += [0] * feedback
    records = [{"turn": i + 1, "status": "ok", "reward": r, "prs_keep_probability": p}
               for i, (r, p) in enumerate(zip(rewards, keep, strict=True))]
    return KernelAgentLoopOutput(
        prompt_ids=[1, 2, 3], response_ids=list(range(10, 10 + len(mask))), response_mask=mask,
        response_logprobs=[-0.5] * len(mask), reward_score=float(sum(rewards)), num_turns=2 * len(rewards), metrics={},
        extra_fields={"turn_scores": list(rewards), "tritongym_turns": records})


@pytest.fixture(scope="module")
def store():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    storage = {"total_storage_size": 1000, "num_data_storage_units": 1}
    tq.init(OmegaConf.create({"enable": True, "metrics": {"enabled": False, "port": 0},
                              "backend": {"storage_backend": "SimpleStorage", "SimpleStorage": storage}}))
    yield
    tq.close()
    ray.shutdown()


def _config(estimator: str = "trloo", extra: tuple[str, ...] = ()):
    import verl

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[
            f"algorithm.adv_estimator={estimator}", "trainer.v1.trainer_mode=tritongym", "data.seed=7",
            "actor_rollout_ref.rollout.n=3", *extra])


def _put(prefix: str, trajectories, shifts=None):
    keys, fields = [], []
    for i, (uid, tokens, feedback, rewards, keep) in enumerate(trajectories):
        field = _output(tokens, feedback, rewards, keep).as_dict()
        field.pop("extra_fields")
        field["uid"] = uid
        field["old_log_probs"] = field["rollout_log_probs"].clone()  # the step before writes these (π_old = π_rollout)
        for (row, position), delta in (shifts or {}).items():
            if row == i:
                field["old_log_probs"][position] += delta
        keys.append(f"{prefix}{uid}_{i}_0")  # verl's {uid}_{session}_{index} key layout
        fields.append(field)
    return tq.kv_batch_put(keys=keys, partition_id="train", fields=list_of_dict_to_tensordict(fields),
                           tags=[{} for _ in keys])


def _run(trainer_cls, prefix: str, estimator: str = "trloo", trajectories=TRAJECTORIES, extra=(), shifts=None):
    trainer = trainer_cls.__new__(trainer_cls)  # only the advantage step: no workers, no models
    trainer.config = _config(estimator, extra)
    trainer.global_steps = 1
    batch = _put(prefix, trajectories, shifts)
    metrics: dict = {}
    trainer._compute_advantage(batch, metrics)
    data = tq.kv_batch_get(keys=batch.keys, partition_id="train",
                           select_fields=["advantages", "response_mask", "rm_scores", TURN_NUMBERS])
    return data.to_padded_tensor(), metrics


def _released_turn_advantages(trajectories, drop=(), mask_void_turn=True, gamma=1.0):
    """Per-turn advantages by KernelGYM's released rules (``released_drkernel``: plain loops)."""
    return released.turn_advantages([(t[0], t[3]) for t in trajectories], set(drop), mask_void_turn, gamma)


def _expected(trajectories=TRAJECTORIES):
    """Released per-turn advantages, the turns with keep probability 0 dropped by PRS."""
    drop = {(i, k) for i, t in enumerate(trajectories) for k, p in enumerate(t[4]) if p == 0}
    return _released_turn_advantages(trajectories, drop)


def _check_against_released(padded, trajectories, expected):
    """Every model token carries its turn's released advantage; dropped turns' tokens carry none."""
    for i, (_, _, _, rewards, _) in enumerate(trajectories):
        for k in range(len(rewards)):
            tokens = padded[TURN_NUMBERS][i] == k + 1
            want = [expected[(i, k)]] * int(tokens.sum())
            assert padded["advantages"][i][tokens].tolist() == pytest.approx(want, abs=1e-6), (i, k)


def test_trainer_mode_is_registered_on_import_verl():
    assert get_trainer_cls("tritongym") is KernelPPOTrainer
    assert issubclass(KernelPPOTrainer, PPOTrainerSync)


def test_prs_drops_whole_turns_by_their_keep_probability():
    numbers = torch.tensor([[1, 1, 0, 2, 2, 0, 3], [1, 0, 2, 2, 2, 0, 0]])
    prob = torch.tensor([[1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    drop, dropped, turns = prs_turn_drop(numbers, prob, torch.Generator().manual_seed(0))
    assert (dropped, turns) == (2, 5)
    assert drop.tolist() == [[False, False, False, True, True, False, False],
                             [True, False, False, False, False, False, False]]
    # Feedback tokens (0) are never dropped, whatever value they carry.
    assert not prs_turn_drop(numbers, torch.zeros_like(prob))[0][numbers == 0].any()
    # p = 0.5: each turn is one draw (its tokens go together); the rate is near one half.
    many = torch.tensor([[1, 1, 2, 2, 2]] * 4000)
    drop, dropped, turns = prs_turn_drop(many, torch.full(many.shape, 0.5), torch.Generator().manual_seed(1))
    assert turns == 8000 and abs(dropped / turns - 0.5) < 0.03
    assert bool((drop[:, 0] == drop[:, 1]).all() and (drop[:, 2] == drop[:, 4]).all())
    with pytest.raises(ValueError, match="equal"):
        prs_turn_drop(numbers, prob[:, :3])


def test_explicit_turns_keep_a_masked_turn_in_its_peers_baselines():
    # Two trajectories of one prompt; row 0's turn 2 is masked out of the loss. Read off the mask,
    # row 0's turn 3 would become "turn 2" and be compared with row 1's turn 2.
    mask = torch.tensor([[1, 0, 0, 0, 1], [1, 0, 1, 0, 1]])
    numbers = torch.tensor([[1, 0, 2, 0, 3], [1, 0, 2, 0, 3]])
    scores = torch.tensor([[1.0, 0, 0.0, 0, 2.0], [0.5, 0, 1.0, 0, 0.0]])
    index = ["u", "u"]
    with explicit_turns(numbers):
        adv, _ = trloo_advantage_return(scores, mask, index=index)
    table = torch.tensor([[1.0, 0.0, 2.0], [0.5, 1.0, 0.0]], dtype=torch.float64)
    expected = trloo_advantages(table, torch.ones(2, 3, dtype=torch.bool), torch.tensor([0, 0])).tolist()
    assert adv[0].tolist() == pytest.approx([expected[0][0], 0, 0, 0, expected[0][2]])
    assert adv[1].tolist() == pytest.approx([expected[1][0], 0, expected[1][1], 0, expected[1][2]])
    plain, _ = trloo_advantage_return(scores, mask, index=index)  # the mask alone: renumbered turns
    assert plain[0, 4].item() != pytest.approx(expected[0][2])
    with pytest.raises(ValueError, match="explicit turns"), explicit_turns(numbers[:, :3]):
        trloo_advantage_return(scores, mask, index=index)


def test_as_dict_carries_the_turn_layout_and_keep_probabilities():
    out = _output([2, 1], 2, [0.5, 1.0], [0.25, None])
    fields = out.as_dict()
    assert fields[TURN_NUMBERS].tolist() == [1, 1, 0, 0, 2]
    assert fields[TURN_KEEP_PROBABILITY].tolist() == [0.25, 0.25, 1.0, 1.0, 1.0]  # None: unmeasured, kept
    assert turn_numbers(torch.tensor([[0, 1, 1, 0, 1]])).tolist() == [[0, 1, 1, 0, 2]]
    out.extra_fields["tritongym_turns"] = out.extra_fields["tritongym_turns"][:1]
    with pytest.raises(ValueError, match="1 turn records for 2 model turns"):
        out.as_dict()


def test_verl_advantage_step_with_prs_drops_lazy_turns_and_keeps_their_rewards_in_baselines(store):
    padded, metrics = _run(KernelPPOTrainer, "prs")
    assert metrics["tritongym/prs_rejected_turns"] == 3.0
    assert metrics["tritongym/prs_rejected_fraction"] == pytest.approx(3 / 14)
    assert metrics["tritongym/not_meaningful_turns"] == 0.0 and metrics["tritongym/skipped_steps"] == 0.0
    for i, (_, _, _, rewards, keep) in enumerate(TRAJECTORIES):
        numbers = padded[TURN_NUMBERS][i]
        for k, (r, p) in enumerate(zip(rewards, keep, strict=True)):
            tokens = numbers == k + 1
            # Dropped or not, the turn keeps its reward (KernelGYM zeroes rewards only where loss_mask is 0).
            assert padded["rm_scores"][i][tokens].sum().item() == pytest.approx(r)
            if p == 0:  # dropped: out of the loss, no advantage
                assert padded["response_mask"][i][tokens].sum() == 0
                assert padded["advantages"][i][tokens].abs().sum() == 0
            else:
                assert padded["response_mask"][i][tokens].all()
    _check_against_released(padded, TRAJECTORIES, _expected())


def test_a_rejected_turns_reward_decides_its_peers_signs(store):
    # The worked example: one prompt, gamma 1; A = [0.5, 2.0] with turn 2 rejected by PRS,
    # B = [0.5, 1.0]. Released: A turn 1 = +1, B = [-1, -1] (zeroing A's turn 2 would give -1 and [+1, +1]).
    pair = [("w", [2, 2], 1, [0.5, 2.0], [1.0, 0.0]), ("w", [3, 1], 2, [0.5, 1.0], [1.0, 1.0])]
    padded, metrics = _run(KernelPPOTrainer, "worked1", trajectories=pair)
    assert metrics["tritongym/prs_rejected_turns"] == 1.0
    expected = _released_turn_advantages(pair, drop={(0, 1)})
    assert [expected[(0, 0)], expected[(1, 0)], expected[(1, 1)]] == pytest.approx([1.0, -1.0, -1.0])
    _check_against_released(padded, pair, expected)
    assert padded["advantages"][0][padded[TURN_NUMBERS][0] == 1][0].item() == pytest.approx(1.0)


def test_meaningful_turn_masking_takes_a_regressing_turn_out_of_its_group(store):
    # The second example: A = [1, 0], B = [0, 1]. Released (mask_void_turn=True) masks A's
    # turn 2 (after a scoring turn, it scores 0): no gradient, reward 0, out of B's baseline, so B's
    # turn 2 gets +1; turn 1 returns are equal (1, 1): advantage 0.
    pair = [("v", [2, 2], 1, [1.0, 0.0], [1.0, 1.0]), ("v", [2, 3], 1, [0.0, 1.0], [1.0, 1.0])]
    padded, metrics = _run(KernelPPOTrainer, "worked2", trajectories=pair)
    assert metrics["tritongym/not_meaningful_turns"] == 1.0
    assert metrics["tritongym/not_meaningful_fraction"] == pytest.approx(1 / 4)
    expected = _released_turn_advantages(pair)
    assert [expected[(0, 0)], expected[(0, 1)], expected[(1, 0)], expected[(1, 1)]] == pytest.approx([0, 0, 0, 1])
    _check_against_released(padded, pair, expected)
    masked = padded[TURN_NUMBERS][0] == 2
    assert padded["response_mask"][0][masked].sum() == 0 and padded["response_mask"][1].sum() == 5
    # The control: with the masking off (and in KernelGYM with mask_void_turn=False) A's turn 2 trains at -1.
    off, metrics = _run(KernelPPOTrainer, "worked2off", trajectories=pair,
                        extra=("+tritongym.meaningful_turns.enable=False",))
    assert "tritongym/not_meaningful_turns" not in metrics
    control = _released_turn_advantages(pair, mask_void_turn=False)
    assert [control[(0, 1)], control[(1, 1)]] == pytest.approx([-1.0, 1.0])
    _check_against_released(off, pair, control)


def test_random_batches_match_the_released_rules(store):
    # Ragged trajectories of 3 prompts, rewards in {-0.5, 0, 0.5, 1, 2} (regressions included) and PRS
    # keep probabilities 0 or 1, through verl's own _compute_advantage: every token against the loops.
    gen = torch.Generator().manual_seed(11)
    for batch in range(3):
        trajectories = []
        for j in range(9):
            turns = int(torch.randint(1, 4, (), generator=gen))
            tokens = [int(x) for x in torch.randint(1, 4, (turns,), generator=gen)]
            rewards = [float(x) for x in torch.tensor([-0.5, 0.0, 0.5, 1.0, 2.0])[
                torch.randint(0, 5, (turns,), generator=gen)]]
            keep = [float(x) for x in (torch.rand(turns, generator=gen) > 0.25)]
            trajectories.append((f"r{batch}{j % 3}", tokens, 1 + j % 2, rewards, keep))
        padded, _ = _run(KernelPPOTrainer, f"rand{batch}", trajectories=trajectories)
        drop = {(i, k) for i, t in enumerate(trajectories) for k, p in enumerate(t[4]) if p == 0}
        _check_against_released(padded, trajectories, _released_turn_advantages(trajectories, drop))


def test_a_step_with_every_turn_rejected_is_skipped(store):
    # verl's rollout correction would raise "response_mask must contain at least one valid token";
    # the step writes zero advantages, skips the updates and says so in a metric.
    lazy = [("s", [2, 2], 1, [1.0, 1.0], [0.0, 0.0]), ("s", [3], 1, [0.5], [0.0])]
    extra = ("algorithm.rollout_correction.rollout_rs=seq_max_k2",
             "algorithm.rollout_correction.rollout_rs_threshold=1.0")
    padded, metrics = _run(KernelPPOTrainer, "skip", trajectories=lazy, extra=extra)
    assert metrics["tritongym/skipped_steps"] == 1.0 and metrics["tritongym/prs_rejected_turns"] == 3.0
    assert padded["response_mask"].sum() == 0 and padded["advantages"].abs().sum() == 0

    class Unreachable:
        def __getattr__(self, name):
            raise AssertionError(f"the actor was called ({name}) on a skipped step")

    trainer = KernelPPOTrainer.__new__(KernelPPOTrainer)
    trainer.config = _config(extra=extra)
    trainer.global_steps = 1
    trainer.actor_rollout_wg = trainer.critic_wg = Unreachable()
    batch = _put("skip2", lazy)
    trainer._compute_advantage(batch, {})
    assert trainer._update_actor(batch, {}) is batch and trainer._update_critic(batch, {}) is batch
    # The control: verl's plain trainer on the same masks fails in its rollout correction.
    kept = _put("skip3", lazy)
    fields = tq.kv_batch_get(keys=kept.keys, partition_id="train", select_fields=["response_mask"])
    zero = {"response_mask": response_to_nested(torch.zeros_like(fields.to_padded_tensor()["response_mask"]),
                                                fields["response_mask"])}
    tq.kv_batch_put(keys=kept.keys, partition_id="train", fields=TensorDict(zero, batch_size=len(kept)))
    plain = PPOTrainerSync.__new__(PPOTrainerSync)
    plain.config = _config(extra=extra)
    plain.global_steps = 1
    with pytest.raises(ValueError, match="at least one valid token"):
        plain._compute_advantage(kept, {})


def test_without_lazy_turns_the_trainer_equals_verls_plain_sync_trainer(store):
    kept = [(u, t, f, r, [1.0] * len(k)) for u, t, f, r, k in TRAJECTORIES]
    ours, metrics = _run(KernelPPOTrainer, "ours", trajectories=kept)
    plain, _ = _run(PPOTrainerSync, "plain", trajectories=kept)
    assert metrics["tritongym/prs_rejected_turns"] == 0.0
    assert torch.equal(ours["advantages"], plain["advantages"])
    assert torch.equal(ours["response_mask"], plain["response_mask"])
    _check_against_released(ours, kept, _expected(kept))


def test_verls_plain_trainer_would_train_the_lazy_turns(store):
    # The control: verl's own sync trainer on the same rows keeps every turn, lazy ones included, in the loss.
    padded, _ = _run(PPOTrainerSync, "ctl")
    lazy = torch.zeros_like(padded[TURN_NUMBERS], dtype=torch.bool)
    for i, (*_, keep) in enumerate(TRAJECTORIES):
        for k, p in enumerate(keep):
            lazy[i] |= (padded[TURN_NUMBERS][i] == k + 1) & (p == 0)
    assert int(lazy.sum()) == 2 + 4 + 2
    assert bool(padded["response_mask"][lazy].all()) and padded["advantages"][lazy].abs().sum() > 0


def test_grpo_under_the_tritongym_trainer_masks_the_same_turns(store):
    # Another estimator under this trainer: PRS masks, verl's own GRPO computes outcome advantages.
    padded, metrics = _run(KernelPPOTrainer, "grpo", estimator="grpo")
    assert metrics["tritongym/prs_rejected_turns"] == 3.0
    dropped = padded[TURN_NUMBERS].gt(0) & padded["response_mask"].eq(0)
    assert int(dropped.sum()) == 2 + 4 + 2
    assert padded["advantages"][dropped].abs().sum() == 0
    assert padded["advantages"][padded["response_mask"].bool()].abs().sum() > 0


def test_turn_rejection_settings_from_verls_config():
    assert TurnRejection.from_config(_config()) == TurnRejection()  # no section: PRS and meaningful turns on, MRS off
    assert TurnRejection().meaningful_turns and not TurnRejection.from_config(
        _config(extra=("+tritongym.meaningful_turns.enable=False",))).meaningful_turns
    loose = TurnRejection.from_config(_config(extra=("+tritongym.mrs.enable=True", "+tritongym.mrs.lower=0.5",
                                                     "+tritongym.prs.enable=False")))
    assert loose.mrs and loose.mrs_lower == 0.5 and loose.mrs_upper == 1.001 and not loose.prs
    with pytest.raises(ValueError, match=r"unknown settings \['mrs.lowr'\]"):
        TurnRejection.from_config(_config(extra=("+tritongym.mrs.lowr=0.5",)))
    with pytest.raises(ValueError, match="lower <= 1 <= upper"):
        TurnRejection.from_config(_config(extra=("+tritongym.mrs.upper=0.9",)))
    with pytest.raises(ValueError, match="loss_mode=tritongym_ppo"):
        TurnRejection.from_config(_config(extra=(
            "+tritongym.mrs.enable=True", "actor_rollout_ref.actor.policy_loss.loss_mode=tritongym_drkernel")))


def test_mrs_on_turn_rows_vetoes_a_turn_and_bounds_a_trajectory():
    numbers = torch.tensor([[1, 1, 0, 2, 2, 0, 3, 3], [1, 1, 0, 2, 2, 0, 0, 0], [1, 1, 1, 0, 2, 2, 0, 0]])
    mask = (numbers > 0).long()
    rollout = torch.full(numbers.shape, -0.5)
    old = rollout.clone()
    old[0, 3] += math.log(1e-5)  # row 0, turn 2: one token far below the veto threshold 1e-4
    old[1] += 0.01  # row 1: every token's ratio e^0.01 ≈ 1.010, outside [0.999, 1.001]
    loose = TurnRejection(mrs=True, mrs_lower=1e-3, mrs_upper=1e3)
    drop = mrs_turn_drop(old, rollout, mask, numbers, loose)  # the veto alone (the bounds are wide)
    assert drop.tolist() == (numbers == 2).logical_and(torch.tensor([[True], [False], [False]])).tolist()
    drop = mrs_turn_drop(old, rollout, mask, numbers, TurnRejection(mrs=True))  # Dr.Kernel's bounds
    assert drop[0].tolist() == (numbers[0] > 0).tolist()  # the veto token also moves row 0's mean out
    assert drop[1].tolist() == (numbers[1] > 0).tolist() and not drop[2].any()
    assert not mrs_turn_drop(old, rollout, mask, numbers, TurnRejection(mrs=True, mrs_veto_threshold=None,
                                                                          mrs_lower=1e-3, mrs_upper=1e3)).any()


def test_mrs_turn_drop_decides_as_mrs_mask_on_dr_kernels_turn_rows():
    # The reference: every (trajectory, turn) as its own row, rows of one trajectory sharing an id.
    torch.manual_seed(5)
    numbers = torch.tensor([[1, 1, 1, 0, 2, 2, 0, 3], [1, 1, 0, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 0, 2, 2],
                            [1, 0, 2, 0, 3, 3, 3, 3]] * 8)
    mask = numbers > 0
    rollout = -torch.rand(numbers.shape) * 3
    old = rollout + torch.randn(numbers.shape) * 2e-4  # most trajectories inside [0.999, 1.001]
    old[torch.rand(numbers.shape) < 0.03] -= 12.0  # scattered tokens with ratio e^-12 < 1e-4: vetoes
    old[torch.arange(32) % 5 == 0] += 0.01  # some trajectories outside the geometric bounds
    turns = int(numbers.max())
    rows = (numbers[:, None, :] == torch.arange(1, turns + 1)[None, :, None]).reshape(-1, numbers.shape[1])
    old_rows, rollout_rows = (x[:, None, :].expand(-1, turns, -1).reshape(-1, x.shape[1]) for x in (old, rollout))
    drops = []
    for settings in (TurnRejection(mrs=True), TurnRejection(mrs=True, mrs_lower=1e-3, mrs_upper=1e3),
                     TurnRejection(mrs=True, mrs_veto_threshold=None)):
        keep = mrs_mask(old_rows, rollout_rows, rows, torch.arange(32).repeat_interleave(turns),
                        lower=settings.mrs_lower, upper=settings.mrs_upper,
                        veto_threshold=settings.mrs_veto_threshold).view(32, turns)
        want = mask & ~torch.cat([torch.ones(32, 1, dtype=torch.bool), keep], 1).gather(1, numbers)
        got = mrs_turn_drop(old, rollout, mask.long(), numbers, settings)
        assert torch.equal(got, want)
        assert 0 < int(got.sum()) < int(mask.sum())  # some turns dropped, not all
        drops.append(got)
    # Both rules bite, differently, and MRS is their union (veto alone: loose bounds; bounds alone: no veto).
    assert not torch.equal(drops[1], drops[2]) and torch.equal(drops[0], drops[1] | drops[2])


def test_verl_advantage_step_with_mrs_drops_the_vetoed_turn(store):
    # Row 1, turn 2 (positions 3..5, after 2 tokens and 1 feedback token) has a token with π_old/π_rollout = 1e-5.
    kept = [(u, t, f, r, [1.0] * len(k)) for u, t, f, r, k in TRAJECTORIES]
    extra = ("+tritongym.mrs.enable=True", "+tritongym.mrs.lower=1e-3", "+tritongym.mrs.upper=1e3",
             "actor_rollout_ref.actor.policy_loss.loss_mode=tritongym_ppo")
    padded, metrics = _run(KernelPPOTrainer, "mrs", trajectories=kept, extra=extra,
                           shifts={(1, 4): math.log(1e-5)})
    assert metrics["tritongym/mrs_rejected_turns"] == 1.0 and metrics["tritongym/prs_rejected_turns"] == 0.0
    vetoed = padded[TURN_NUMBERS][1] == 2
    assert padded["response_mask"][1][vetoed].sum() == 0 and padded["advantages"][1][vetoed].abs().sum() == 0
    assert padded["rm_scores"][1][vetoed].sum().item() == pytest.approx(TRAJECTORIES[1][3][1])  # reward kept
    # The vetoed turn keeps its reward and its place in its peers' baselines.
    _check_against_released(padded, kept, _released_turn_advantages(kept, drop={(1, 1)}))


def test_verls_group_filter_reads_the_loops_last_turn_reward(store):
    # Dr.Kernel rejects prompt groups whose last-turn rewards do not vary. verl's V1 replay buffer does
    # it (algorithm.filter_groups, metric tritongym/last_reward, as in examples/verl/run_drkernel.sh);
    # here its own classification runs on rows carrying the loop's reward_extra_info.
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer

    from tritongym.integrations.verl.agent_loop import _trajectory_metrics

    groups = {"g1": [[0.0, 1.0], [0.5, 1.5], [1.0, 0.5]],  # last turns differ: kept
              "g2": [[0.0, 1.5], [1.5, 1.5]],              # last turns equal, earlier ones not: filtered
              "g3": [[0.0, 0.0], [0.0, 0.0]]}              # nothing learnable: filtered
    keys, fields = [], []
    for uid, trajectories in groups.items():
        tq.kv_put(key=uid, partition_id="dapo", tag={"is_prompt": True, "status": "finished", "global_steps": 1})
        for session, rewards in enumerate(trajectories):
            records = [{"turn": i + 1, "status": "ok", "reward": r, "eval_s": 0.1} for i, r in enumerate(rewards)]
            field = _output([2] * len(rewards), 1, rewards, [1.0] * len(rewards)).as_dict()
            field["extra_fields"] = {"reward_extra_info": _trajectory_metrics(records)}
            keys.append(f"{uid}_{session}_0")
            fields.append(field)
    tq.kv_batch_put(keys=keys, partition_id="dapo", fields=list_of_dict_to_tensordict(fields),
                    tags=[{"status": "success", "global_steps": 1} for _ in keys])
    buffer = ReplayBuffer("sync", _config(), max_off_policy_threshold=None, max_off_policy_strategy="drop",
                          sampler_kwargs=OmegaConf.create({}), refill_fn=lambda count: None,
                          filter_groups_metric="tritongym/last_reward")
    buffer._sync_metadata_from_transfer_queue()
    filtered, counts = buffer._dapo_filtered_keys("dapo")
    assert filtered == {"g2", "g3"}
    assert counts == {1.5: 1, 0.0: 1}
