"""verl 0.9.1 really installed: the ``tritongym_drkernel`` policy loss, ``rloo`` as grpo_loo, the LR hook.

Every function is reached through verl's own lookup (``get_policy_loss_fn``, ``get_adv_estimator_fn``)
and fed what verl itself produces (``compute_rollout_correction_and_add_to_batch`` for the IS weights),
then compared with ``tritongym.rl``'s own functions.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[verl]'; see .ci/trainers)")

from verl import DataProto  # noqa: E402
from verl.trainer.config.algorithm import RolloutCorrectionConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch  # noqa: E402
from verl.utils.torch_functional import get_constant_schedule_with_warmup  # noqa: E402
from verl.workers.config import ActorConfig  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

from tritongym.integrations.verl import lr_decay  # noqa: E402
from tritongym.integrations.verl.policy_loss import MRSOptions, TRMOptions, make_policy_loss  # noqa: E402
from tritongym.rl import (  # noqa: E402
    ResponseLengthLRDecay,
    aggregate_loss,
    apply_row_mask,
    mrs_mask,
    ppo_clip_token_loss,
    rloo_advantages,
    trm_mask,
)

B, L = 5, 7


def _actor_config(mode: str = "seq-mean-token-sum") -> ActorConfig:
    return ActorConfig(strategy="fsdp", ppo_mini_batch_size=B, ppo_micro_batch_size_per_gpu=B, rollout_n=1,
                       clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg_mode=mode,
                       policy_loss=PolicyLossConfig(loss_mode="tritongym_drkernel"))


def _batch(seed: int = 0):
    """Five trajectories: rows 0, 1, 4 within MRS bounds, row 2 out of the geometric bound, row 3 vetoed."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, L)
    mask[1, 5:] = 0
    mask[4, 3:] = 0
    rollout = -torch.rand(B, L, generator=g) * 2 - 0.1
    delta = (torch.rand(B, L, generator=g) - 0.5) * 1e-4  # |mean Δ| ≪ log 1.001: kept
    delta[2] += 0.01  # geometric mean e^0.01 ≈ 1.01 > 1.001: rejected
    delta[3, 2], delta[3, 3] = -10.0, 10.0  # mean ≈ 0 but one token ratio e^-10 < 1e-4: vetoed
    old = rollout + delta
    log_prob = (old + (torch.rand(B, L, generator=g) - 0.5) * 0.8).requires_grad_()
    advantages = torch.randn(B, L, generator=g)
    return mask, rollout, old, log_prob, advantages


def _verl_is_weights(old, rollout, mask):
    data = DataProto.from_single_dict({"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask})
    out, _ = compute_rollout_correction_and_add_to_batch(
        data, RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold=1e9))
    return out.batch["rollout_is_weights"]


def test_entry_point_registers_the_loss_on_import_verl():
    fn = core_algos.get_policy_loss_fn("tritongym_drkernel")
    assert fn.__module__ == "tritongym.integrations.verl.policy_loss"


@pytest.mark.parametrize("mode", ["seq-mean-token-sum", "token-mean"])
def test_drkernel_loss_equals_tritongym_mrs_and_ppo_clip(mode):
    mask, rollout, old, log_prob, advantages = _batch()
    weights = _verl_is_weights(old, rollout, mask)
    fn = core_algos.get_policy_loss_fn("tritongym_drkernel")
    loss, metrics = fn(old_log_prob=old, log_prob=log_prob, advantages=advantages, response_mask=mask.bool(),
                       loss_agg_mode=mode, config=_actor_config(mode), rollout_is_weights=weights)
    keep = mrs_mask(old, rollout, mask)
    assert keep.tolist() == [True, True, False, False, True]
    kept = apply_row_mask(mask.bool(), keep)
    token_loss = ppo_clip_token_loss(log_prob, old, advantages, kept, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    # verl's seq-mean counts only rows with a token left; tritongym's default counts every row.
    expected = aggregate_loss(token_loss, kept, mode, num_sequences=int(keep.sum()))
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    assert metrics["tritongym/mrs_keep_fraction"] == pytest.approx(3 / 5)
    (grad,) = torch.autograd.grad(loss, log_prob)
    assert torch.all(grad[2] == 0) and torch.all(grad[3] == 0) and grad[0].abs().sum() > 0


def test_without_mrs_the_loss_is_verls_vanilla_ppo():
    # tritongym_ppo (registered on import verl) is this loss: the trainer mode's MRS replaces the loss's.
    mask, rollout, old, log_prob, advantages = _batch(1)
    config = _actor_config()
    ours, _ = core_algos.get_policy_loss_fn("tritongym_ppo")(old, log_prob, advantages, mask.bool(),
                                                            "seq-mean-token-sum", config, None)
    vanilla, metrics = core_algos.get_policy_loss_fn("vanilla")(
        old_log_prob=old, log_prob=log_prob, advantages=advantages, response_mask=mask.bool(),
        loss_agg_mode="seq-mean-token-sum", config=config, rollout_is_weights=None)
    torch.testing.assert_close(ours, vanilla, rtol=1e-6, atol=1e-7)


def test_trm_option_equals_tritongym_trm_mask():
    mask, rollout, old, log_prob, advantages = _batch(2)
    old = old.clone()
    old[0, 1] = rollout[0, 1] + 0.5  # ½·0.5² = 0.125 > max_k2 0.05: row 0 leaves the trust region
    weights = _verl_is_weights(old, rollout, mask)
    fn = make_policy_loss(mrs=None, trm=TRMOptions())
    loss, metrics = fn(old, log_prob, advantages, mask.bool(), "seq-mean-token-sum", _actor_config(), weights)
    keep = trm_mask(old, rollout, mask)
    assert not keep[0] and keep[1]
    kept = apply_row_mask(mask.bool(), keep)
    token_loss = ppo_clip_token_loss(log_prob, old, advantages, kept, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    expected = aggregate_loss(token_loss, kept, "seq-mean-token-sum", num_sequences=int(keep.sum()))
    torch.testing.assert_close(loss, expected, rtol=1e-6, atol=1e-7)
    assert metrics["tritongym/trm_keep_fraction"] == pytest.approx(keep.double().mean().item())


def test_missing_or_icepop_weights_raise_with_the_settings_to_use():
    mask, rollout, old, log_prob, advantages = _batch()
    fn = core_algos.get_policy_loss_fn("tritongym_drkernel")
    with pytest.raises(ValueError, match="rollout_is=token"):
        fn(old, log_prob, advantages, mask.bool(), "token-mean", _actor_config(), None)
    data = DataProto.from_single_dict({"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask})
    icepop, _ = compute_rollout_correction_and_add_to_batch(
        data, RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold="0.5_2.0"))
    with pytest.raises(ValueError, match="zeros on valid tokens"):
        fn(old, log_prob, advantages, mask.bool(), "token-mean", _actor_config(), icepop.batch["rollout_is_weights"])
    with pytest.raises(ValueError, match="lower <= 1 <= upper"):
        MRSOptions(lower=1.01)


def test_verl_rloo_is_the_leave_one_out_grpo_baseline():
    # grpo_loo is not registered: verl's rloo already is tritongym.rl.rloo_advantages (groups of one too).
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.3, 0.7, 2.0])
    uids = np.array(["a", "a", "a", "a", "b", "b", "c"], dtype=object)
    mask = torch.ones(7, 4)
    mask[1, 2:] = 0
    token_rewards = torch.zeros(7, 4)
    token_rewards[torch.arange(7), mask.sum(-1).long() - 1] = scores
    adv, _ = core_algos.get_adv_estimator_fn("rloo")(token_level_rewards=token_rewards, response_mask=mask,
                                                    index=uids)
    expected = rloo_advantages(scores, torch.tensor([0, 0, 0, 0, 1, 1, 2]))
    torch.testing.assert_close(adv[:, 0], expected)
    assert adv[0, 0].item() == pytest.approx(4 / 3 * 0.5)  # rl-algorithms.md §1.1 fixture
    assert adv[6, 0].item() == pytest.approx(2.0)  # a group of one: A = R
    assert torch.all(adv[mask == 0] == 0)


@pytest.fixture
def lr_hook():
    hook = lr_decay.install(surge_factor=2.0, baseline_window=3, period_factor=1.0, min_lr_ratio=0.25, warmup_steps=0)
    yield hook
    lr_decay.uninstall()


def test_lr_hook_decays_the_actor_lr_as_response_length_lr_decay_does(lr_hook):
    torch.manual_seed(0)
    actor = torch.nn.Linear(3, 1)
    critic = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(actor.parameters(), lr=1e-3)
    critic_optimizer = torch.optim.SGD(critic.parameters(), lr=5e-4)
    verl_schedule = get_constant_schedule_with_warmup(optimizer, num_warmup_steps=2)  # verl's own warm-up
    reference_optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    reference = ResponseLengthLRDecay(reference_optimizer, surge_factor=2.0, baseline_window=3, period_factor=1.0,
                                      min_lr_ratio=0.25, warmup_steps=0)
    fn = core_algos.get_policy_loss_fn("tritongym_drkernel")
    config = _actor_config()
    lengths = [10, 12, 11, 13, 30, 12, 12, 12, 12, 12, 12, 12]  # surge at step 4 (30 > 2 × 11)
    seen = []
    for step, length in enumerate(lengths):
        critic(torch.randn(2, 3)).sum().backward()
        critic_optimizer.step()  # verl updates the critic first (same process when colocated)
        mask, rollout, old, _, advantages = _batch(step)
        log_prob = actor(torch.randn(B, L, 3)).squeeze(-1)
        config.global_batch_info.update(batch_num_tokens=length * B, global_batch_size=B)
        loss, metrics = fn(old, log_prob, advantages, mask.bool(), "seq-mean-token-sum", config,
                           _verl_is_weights(old, rollout, mask))
        assert metrics["tritongym/mean_response_tokens"] == pytest.approx(length)
        loss.backward()
        factor = reference.get_last_lr()[0]
        optimizer.step()
        seen.append(optimizer.param_groups[0]["lr"])
        assert seen[-1] == pytest.approx(verl_schedule.get_last_lr()[0] * factor)
        reference_optimizer.step()  # no gradient: a no-op, in the order torch expects
        reference.step(length)
        verl_schedule.step()
        optimizer.zero_grad()
    assert critic_optimizer.param_groups[0]["lr"] == 5e-4
    critic(torch.randn(2, 3)).sum().backward()
    lr_hook.record(100, 1)  # even right after a record, another optimizer than the bound one is left alone
    critic_optimizer.step()
    assert critic_optimizer.param_groups[0]["lr"] == 5e-4 and lr_hook.pending_length == 100
    assert lr_hook.schedule.surge_step == 4 and lr_hook.schedule.period == 4
    # Warm-up (verl's) 0.5e-3, then 1e-3 up to the surge, halved every 4 steps after it, floor 0.25.
    assert seen == pytest.approx([0.0, 5e-4, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 1e-3, 5e-4, 5e-4, 5e-4, 5e-4])


def test_lr_hook_options_from_the_environment(monkeypatch):
    assert lr_decay.parse_options("1") == {}
    assert lr_decay.parse_options("surge_factor=2.5,warmup_steps=0") == {"surge_factor": 2.5, "warmup_steps": 0}
    with pytest.raises(ValueError, match="keys baseline_window"):
        lr_decay.parse_options("surge=2")
    with pytest.raises(ValueError, match="must be a number"):
        lr_decay.parse_options("surge_factor=big")
    monkeypatch.setenv(lr_decay.ENV_VAR, "baseline_window=7")
    try:
        hook = lr_decay.install_from_env()
        assert hook is lr_decay.active_hook() and hook.schedule.baseline_window == 7
        with pytest.raises(RuntimeError, match="already installed"):
            lr_decay.install()
    finally:
        lr_decay.uninstall()
    assert lr_decay.record({"batch_num_tokens": 10, "global_batch_size": 2}) == {}  # no hook: nothing recorded


def test_a_mistyped_lr_setting_is_reported_on_import_verl():
    import subprocess

    env = {**os.environ, lr_decay.ENV_VAR: "surge=3"}
    proc = subprocess.run([sys.executable, "-c", "import verl"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert "tritongym: TRITONGYM_VERL_LR_DECAY: expected '1' or 'key=value,...'" in proc.stderr


def _released_aggregate(token_loss, turn_rows, nominal_rows, scale=1000.0):
    """KernelGYM @3a84417's actor aggregation, written from its code (dp_actor.update_policy, agg_loss).

    ``fit()`` removes rows whose mask is all zero; each micro-batch's loss is ``seq-mean-token-sum``
    (token sum per turn row, mean over rows with a valid token) divided by ``loss_scale_factor`` 1000,
    then (``use_dynamic_bsz=True``, the recipe) multiplied by len(micro-batch) / ppo_mini_batch_size,
    where ppo_mini_batch_size is the nominal rows of a mini-batch (train prompts × n × max turns,
    fsdp_workers). Here the whole batch is one micro-batch.
    """
    rows = [(b, m) for b, m in turn_rows if m.any()]  # fit(): drop rows with an all-zero mask
    seq = torch.stack([(token_loss[b] * m).sum() for b, m in rows])
    return seq.mean() / scale * (len(rows) / nominal_rows)


def test_seq_mean_token_sum_norm_at_1000_times_turns_is_the_released_aggregation():
    # Four trajectories of up to T = 3 turns (verl rows), one fully masked (every turn rejected), one
    # with a masked turn; verl's global_batch_size is the nominal mini-batch of trajectories (4).
    T, P, width = 3, 4, 12
    g = torch.Generator().manual_seed(3)
    numbers = torch.tensor([[1, 1, 0, 2, 2, 2, 0, 3, 3, 0, 0, 0],
                            [1, 1, 1, 0, 0, 2, 2, 0, 0, 0, 0, 0],
                            [1, 1, 0, 2, 0, 3, 3, 3, 3, 0, 0, 0],
                            [1, 1, 1, 1, 0, 2, 2, 0, 3, 3, 3, 3]])
    mask = numbers > 0
    mask[1] = False  # MRS rejected the whole trajectory
    mask[2] &= numbers[2] != 2  # PRS dropped turn 2
    old = -torch.rand(P, width, generator=g)
    log_prob = (old + (torch.rand(P, width, generator=g) - 0.5) * 0.6).requires_grad_()
    advantages = torch.randn(P, width, generator=g)
    fn = core_algos.get_policy_loss_fn("tritongym_ppo")
    losses = {}
    for scale in (1000.0 * T, 1000.0):
        config = _actor_config("seq-mean-token-sum-norm")
        config.global_batch_info.update(dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=P,
                                        loss_scale_factor=scale)  # as verl's ppo_loss sets it
        losses[scale], _ = fn(old, log_prob, advantages, mask, "seq-mean-token-sum-norm", config, None)
    token_loss = ppo_clip_token_loss(log_prob, old, advantages, mask, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    turn_rows = [(b, mask[b] & (numbers[b] == k)) for b in range(P) for k in range(1, T + 1)]
    released = _released_aggregate(token_loss.double(), [(b, m.double()) for b, m in turn_rows], nominal_rows=P * T)
    torch.testing.assert_close(losses[1000.0 * T].double(), released, rtol=1e-6, atol=1e-9)
    (ours,) = torch.autograd.grad(losses[1000.0 * T], log_prob, retain_graph=True)
    (theirs,) = torch.autograd.grad(released, log_prob)
    torch.testing.assert_close(ours.double(), theirs.double(), rtol=1e-5, atol=1e-9)
    # loss_scale_factor=1000 on trajectory rows is T times the released scale (the recipe's old setting).
    torch.testing.assert_close(losses[1000.0], losses[1000.0 * T] * T, rtol=1e-6, atol=1e-9)
