"""The verl plug-in with verl 0.9.1 really installed (``.ci/trainers`` builds that venv; skipped elsewhere)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[verl]'; see .ci/trainers)")

from tensordict import TensorDict  # noqa: E402  (verl's dependency)
from verl import DataProto  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402

from tritongym.rl import trloo_advantages  # noqa: E402


def test_entry_point_registers_trloo_on_import_verl():
    # Registered by the `verl.plugins` entry point alone: this test never imports the plug-in module.
    fn = core_algos.get_adv_estimator_fn("trloo")
    assert fn.__module__ == "tritongym.integrations.verl.advantages"


def _batch():
    # 5 trajectories, 2 prompts (uids a, b); response length 9; model turns are runs of mask 1,
    # feedback tokens (mask 0) between them; each turn's reward sits on its last model token.
    masks = [
        [1, 1, 0, 0, 1, 1, 0, 1, 1],  # 3 turns
        [1, 1, 1, 0, 0, 1, 1, 0, 0],  # 2 turns
        [1, 1, 1, 1, 0, 0, 0, 0, 0],  # 1 turn
        [1, 0, 0, 1, 1, 1, 1, 0, 0],  # 2 turns
        [1, 1, 0, 1, 0, 1, 1, 1, 0],  # 3 turns
    ]
    turn_rewards = [[0.1, 0.0, 1.0], [0.3, 0.5, 0.0], [0.2, 0.0, 0.0], [0.0, 0.7, 0.0], [0.4, 0.4, 0.9]]
    uids = ["a", "a", "a", "b", "b"]
    mask = torch.tensor(masks, dtype=torch.float32)
    token_rewards = torch.zeros_like(mask)
    turn_mask = torch.zeros(5, 3, dtype=torch.bool)
    for i, row in enumerate(masks):
        ends = [t for t in range(9) if row[t] == 1 and (t == 8 or row[t + 1] == 0)]
        for k, t in enumerate(ends):
            token_rewards[i, t] = turn_rewards[i][k]
            turn_mask[i, k] = True
    return mask, token_rewards, torch.tensor(turn_rewards, dtype=torch.float64), turn_mask, uids


def test_verl_compute_advantage_with_trloo_equals_trloo_advantages():
    mask, token_rewards, rewards, turn_mask, uids = _batch()
    data = DataProto(
        batch=TensorDict({"token_level_rewards": token_rewards, "response_mask": mask}, batch_size=[5]),
        non_tensor_batch={"uid": np.array(uids, dtype=object)},
    )
    out = compute_advantage(data, adv_estimator="trloo", config=AlgoConfig(adv_estimator="trloo"))
    expected_turns = trloo_advantages(rewards, turn_mask, torch.tensor([0, 0, 0, 1, 1]))
    expected = torch.zeros(5, 9, dtype=torch.float64)
    for i in range(5):
        turn = -1
        for t in range(9):
            if mask[i, t] == 1 and (t == 0 or mask[i, t - 1] == 0):
                turn += 1
            if mask[i, t] == 1:
                expected[i, t] = expected_turns[i, turn]
    torch.testing.assert_close(out.batch["advantages"].double(), expected, atol=1e-6, rtol=0)
    # Hand check of one entry: turn 2 is reached only by rows 0 (uid a) — baseline 0, A = G = 1.0;
    # row 4's turn 2 is alone in uid b too.
    assert out.batch["advantages"][0, 7].item() == pytest.approx(1.0)
    # Turn 0 of row 2 (uid a): G = 0.2, peers' G = 1.1 and 0.8 → A = 0.2 − 0.95.
    assert out.batch["advantages"][2, 0].item() == pytest.approx(0.2 - 0.95)
    assert (out.batch["advantages"][mask == 0] == 0).all()
    assert out.batch["returns"][0, 0].item() == pytest.approx(1.1)  # reward-to-go of turn 0
