"""Tests for tritongym.rl.registry and estimators, the public API guard, and the no-trainer-import rule."""

from __future__ import annotations

import ast
import importlib
import pathlib
import pkgutil

import pytest
import torch

import tritongym.rl as rl
from tritongym.rl import (
    ADVANTAGE_ESTIMATORS,
    AdvantageEstimator,
    AdvantageInputs,
    AggregationMode,
    Registry,
    StrEnum,
    compute_advantages,
    otb_advantages,
    trloo_advantages,
)

RL_DIR = pathlib.Path(rl.__file__).parent


def test_all_is_sorted_unique_and_complete():
    assert rl.__all__ == sorted(rl.__all__)
    assert len(set(rl.__all__)) == len(rl.__all__)
    for name in rl.__all__:
        assert hasattr(rl, name), name
    exported_by_modules = set()
    for info in pkgutil.iter_modules([str(RL_DIR)]):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"tritongym.rl.{info.name}")
        exported_by_modules.update(getattr(module, "__all__", ()))
    assert exported_by_modules == set(rl.__all__)


def test_issue_api_signatures():
    """The exact calls the external checks make."""
    rewards = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    out = trloo_advantages(rewards, torch.ones(2, 2, dtype=torch.bool), torch.tensor([0, 0]), gamma=1.0)
    assert out.shape == (2, 2)
    assert rl.rloo_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0])).shape == (2,)


def test_no_trainer_or_heavy_imports_in_library():
    """tritongym.rl imports torch and the standard library only (style guide Part 2 §1)."""
    allowed_roots = {
        "torch",
        "__future__",
        "math",
        "collections",
        "dataclasses",
        "enum",
        "typing",
        "warnings",
    }
    for path in RL_DIR.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                if node.level > 0:
                    continue
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed_roots, (path.name, roots)


def test_registry_conflicts_and_lookup_errors():
    registry: Registry = Registry("thing")

    @registry.register("a", requires=("x",))
    def first():
        return 1

    registry.add("a", first)  # same function again: no-op
    with pytest.raises(ValueError, match="already registered"):
        registry.add("a", lambda: 2)
    with pytest.raises(ValueError, match="expected one of a, got 'b'"):
        registry.get("b")
    assert registry.get("a") is first and registry.requires("a") == {"x"}
    assert "a" in registry and list(registry) == ["a"] and len(registry) == 1
    with pytest.raises(ValueError, match="non-empty"):
        registry.add("", first)


def test_strenum_behaves_as_its_value():
    assert str(AdvantageEstimator.TRLOO) == "trloo"
    assert f"{AggregationMode.TOKEN_MEAN}" == "token-mean"
    assert AggregationMode("seq-mean-token-sum") is AggregationMode.SEQ_MEAN_TOKEN_SUM
    assert issubclass(AdvantageEstimator, StrEnum) and AdvantageEstimator.GRPO == "grpo"
    assert {e.value for e in AdvantageEstimator} <= set(ADVANTAGE_ESTIMATORS.names())


def test_compute_advantages_dispatch_and_requires():
    rewards = torch.tensor([[1.0, 0.5], [0.0, 0.0], [2.0, 1.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]], dtype=torch.bool)
    ids = torch.tensor([0, 0, 0])
    inputs = AdvantageInputs(group_ids=ids, turn_rewards=rewards, turn_mask=mask)
    torch.testing.assert_close(
        compute_advantages("trloo", inputs, gamma=0.5), trloo_advantages(rewards, mask, ids, 0.5)
    )
    with pytest.raises(ValueError, match="missing \\['scores'\\]"):
        compute_advantages(AdvantageEstimator.RLOO, inputs)
    token = AdvantageInputs(
        group_ids=ids,
        token_rewards=rewards,
        response_mask=mask,
        log_probs_old=torch.zeros(3, 2),
        sum_pi_squared=torch.full((3, 2), 0.5),
    )
    torch.testing.assert_close(
        compute_advantages("optimal_token_baseline", token, leave_one_out=True),
        otb_advantages(rewards, mask, ids, torch.zeros(3, 2), torch.full((3, 2), 0.5), leave_one_out=True),
    )
    scores = AdvantageInputs(group_ids=ids, scores=torch.tensor([1.0, 0.0, 0.0]))
    for name in ("grpo", "dr_grpo", "rloo"):
        assert compute_advantages(name, scores).shape == (3,)


def test_plugin_registration_is_visible_to_compute_advantages():
    name = "test_plugin_constant"

    def _constant(inputs, value=1.0):
        return torch.full_like(inputs.scores, value)

    ADVANTAGE_ESTIMATORS.add(name, _constant, requires=("scores",))
    try:
        inputs = AdvantageInputs(group_ids=torch.zeros(2, dtype=torch.long), scores=torch.zeros(2))
        assert compute_advantages(name, inputs, value=3.0).tolist() == [3.0, 3.0]
        with pytest.raises(ValueError, match="already registered"):
            ADVANTAGE_ESTIMATORS.add("trloo", _constant)
    finally:
        ADVANTAGE_ESTIMATORS._entries.pop(name)  # keep the global registry as shipped


# -- every registered name dispatches to its own function, compared by value (issue 14) ---------------
# The inputs make the built-ins disagree (groups of unequal spread and size, γ < 1, padded rows), so a
# name routed to a sibling (grpo → dr_grpo, trloo → turn_grpo, ppo_clip → reinforce) fails by value.

GROUP_IDS = torch.tensor([3, 3, 3, 7, 7, 7, 7])
SCORES = torch.tensor([1.0, 0.0, 0.5, 3.0, 2.0, 0.0, 0.5], dtype=torch.float64)
TURN_REWARDS = torch.tensor([[1.0, 0.5, 0.0], [0.0, 2.0, 1.0], [0.5, 0.0, 0.0],
                             [2.0, 1.0, 3.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.5, 2.0, 2.0]],
                            dtype=torch.float64)
TURN_MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 0, 0]],
                         dtype=torch.bool)


def _token_inputs() -> AdvantageInputs:
    generator = torch.Generator().manual_seed(0)
    mask = torch.ones(7, 5, dtype=torch.bool)
    mask[1, 3:] = mask[4, 2:] = False
    rewards = torch.zeros(7, 5, dtype=torch.float64)
    last = mask.sum(1) - 1
    rewards[torch.arange(7), last] = SCORES
    return AdvantageInputs(
        group_ids=GROUP_IDS, token_rewards=rewards, response_mask=mask,
        log_probs_old=-torch.rand(7, 5, generator=generator, dtype=torch.float64),
        sum_pi_squared=torch.rand(7, 5, generator=generator, dtype=torch.float64) * 0.9 + 0.05,
        rollout_is_weights=torch.rand(7, 5, generator=generator, dtype=torch.float64) + 0.5,
    )


def _advantage_cases():
    scores = AdvantageInputs(group_ids=GROUP_IDS, scores=SCORES)
    turns = AdvantageInputs(group_ids=GROUP_IDS, turn_rewards=TURN_REWARDS, turn_mask=TURN_MASK)
    token = _token_inputs()
    return {
        "grpo": [(scores, {}, lambda: rl.grpo_advantages(SCORES, GROUP_IDS)),
                 (scores, {"norm_by_std": False}, lambda: rl.grpo_advantages(SCORES, GROUP_IDS, norm_by_std=False)),
                 (scores, {"eps": 0.5}, lambda: rl.grpo_advantages(SCORES, GROUP_IDS, eps=0.5))],
        "dr_grpo": [(scores, {}, lambda: rl.dr_grpo_advantages(SCORES, GROUP_IDS))],
        "rloo": [(scores, {}, lambda: rl.rloo_advantages(SCORES, GROUP_IDS))],
        "trloo": [(turns, {}, lambda: rl.trloo_advantages(TURN_REWARDS, TURN_MASK, GROUP_IDS)),
                  (turns, {"gamma": 0.5}, lambda: rl.trloo_advantages(TURN_REWARDS, TURN_MASK, GROUP_IDS, 0.5))],
        "turn_grpo": [(turns, {}, lambda: rl.turn_grpo_advantages(TURN_REWARDS, TURN_MASK, GROUP_IDS)),
                      (turns, {"gamma": 0.5},
                       lambda: rl.turn_grpo_advantages(TURN_REWARDS, TURN_MASK, GROUP_IDS, 0.5))],
        "optimal_token_baseline": [
            (token, {}, lambda: otb_advantages(token.token_rewards, token.response_mask, GROUP_IDS,
                                               token.log_probs_old, token.sum_pi_squared,
                                               rollout_is_weights=token.rollout_is_weights)),
            (token, {"leave_one_out": True},
             lambda: otb_advantages(token.token_rewards, token.response_mask, GROUP_IDS, token.log_probs_old,
                                    token.sum_pi_squared, rollout_is_weights=token.rollout_is_weights,
                                    leave_one_out=True)),
        ],
    }


def test_every_advantage_estimator_name_is_checked_by_value():
    assert set(_advantage_cases()) == set(ADVANTAGE_ESTIMATORS.names())


@pytest.mark.parametrize("name", sorted(_advantage_cases()))
def test_advantage_dispatch_equals_the_direct_function_by_value(name):
    for inputs, options, direct in _advantage_cases()[name]:
        torch.testing.assert_close(compute_advantages(name, inputs, **options), direct(), rtol=0, atol=0)
        torch.testing.assert_close(compute_advantages(AdvantageEstimator(name), inputs, **options), direct(),
                                   rtol=0, atol=0)


def test_the_built_in_advantage_estimators_disagree_on_the_dispatch_inputs():
    # Otherwise the by-value comparison above could not tell one estimator from another.
    scores = AdvantageInputs(group_ids=GROUP_IDS, scores=SCORES)
    turns = AdvantageInputs(group_ids=GROUP_IDS, turn_rewards=TURN_REWARDS, turn_mask=TURN_MASK)
    per_sequence = [rl.grpo_advantages(SCORES, GROUP_IDS), rl.dr_grpo_advantages(SCORES, GROUP_IDS),
                    rl.rloo_advantages(SCORES, GROUP_IDS)]
    for i in range(3):
        for j in range(i):
            assert not torch.allclose(per_sequence[i], per_sequence[j])
    assert not torch.allclose(compute_advantages("trloo", turns), compute_advantages("turn_grpo", turns))
    assert not torch.allclose(compute_advantages("trloo", turns), compute_advantages("trloo", turns, gamma=0.5))
    assert not torch.allclose(compute_advantages("grpo", scores), compute_advantages("grpo", scores, eps=0.5))
    token = _token_inputs()
    assert not torch.allclose(compute_advantages("optimal_token_baseline", token),
                              compute_advantages("optimal_token_baseline", token, leave_one_out=True))


def _loss_inputs() -> rl.PolicyLossInputs:
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[0, 2:] = mask[2, 1:] = False
    log_probs_old = -torch.rand(3, 4, generator=generator, dtype=torch.float64)
    log_probs = log_probs_old + 0.5 * torch.randn(3, 4, generator=generator, dtype=torch.float64)
    return rl.PolicyLossInputs(
        log_probs=log_probs, log_probs_old=log_probs_old, mask=mask,
        advantages=torch.randn(3, 4, generator=generator, dtype=torch.float64),
        weights=torch.rand(3, 4, generator=generator, dtype=torch.float64) + 0.5,
    )


def _direct_token_loss(name: str, inputs: rl.PolicyLossInputs) -> torch.Tensor:
    if name == "ppo_clip":
        return rl.ppo_clip_token_loss(inputs.log_probs, inputs.log_probs_old, inputs.advantages, inputs.mask,
                                      weights=inputs.weights)
    assert name == "reinforce", f"no direct reference for policy loss {name!r}: add one here"
    return rl.reinforce_token_loss(inputs.log_probs, inputs.advantages, inputs.mask, weights=inputs.weights)


def _hand_aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    m = mask.to(loss.dtype)
    masked = loss * m
    rows = int(mask.any(-1).sum())
    if mode == "token-mean":
        return masked.sum() / m.sum()
    if mode == "token-sum":  # verl >= 0.9, no normaliser
        return masked.sum()
    if mode == "seq-mean-token-sum":
        return masked.sum() / rows
    if mode == "seq-mean-token-mean":
        return (masked.sum(-1) / m.sum(-1).clamp_min(1)).sum() / rows
    assert mode == "seq-mean-token-sum-norm", f"no hand formula for aggregation mode {mode!r}: add one here"
    return masked.sum() / rows / mask.shape[-1]


@pytest.mark.parametrize("mode", sorted(rl.AGGREGATION_MODES.names()))
@pytest.mark.parametrize("name", sorted(rl.POLICY_LOSSES.names()))
def test_policy_loss_dispatch_equals_the_direct_functions_by_value(name, mode):
    inputs = _loss_inputs()
    token_loss = _direct_token_loss(name, inputs)
    got = rl.compute_policy_loss(name, inputs, mode=mode)
    torch.testing.assert_close(got, rl.aggregate_loss(token_loss, inputs.mask, mode), rtol=0, atol=0)
    torch.testing.assert_close(got, _hand_aggregate(token_loss, inputs.mask, mode))


def test_the_policy_losses_and_aggregation_modes_disagree_on_the_dispatch_inputs():
    inputs = _loss_inputs()
    ppo, reinforce = (_direct_token_loss(n, inputs) for n in ("ppo_clip", "reinforce"))
    assert not torch.allclose(ppo, reinforce)
    values = [float(_hand_aggregate(ppo, inputs.mask, mode)) for mode in rl.AGGREGATION_MODES.names()]
    assert len(set(values)) == len(values) >= 4


# -- estimator inputs: float64 internals, small groups, argument checks (issue 14 mutation survivors) ------

BIG = float(2 ** 24)  # float32 cannot hold 2^24 + 1: sums near it round


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_sequence_estimators_compute_float32_scores_in_float64(name):
    fn = {"grpo": rl.grpo_advantages, "dr_grpo": rl.dr_grpo_advantages, "rloo": rl.rloo_advantages}[name]
    scores = torch.tensor([BIG, 1.0, 1.0, 3.0, BIG, 1.0])
    ids = torch.tensor([0, 0, 0, 1, 1, 1])
    got = fn(scores, ids)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, fn(scores.double(), ids).float(), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [rl.trloo_advantages, rl.turn_grpo_advantages], ids=["trloo", "turn_grpo"])
def test_turn_estimators_compute_float32_rewards_in_float64(fn):
    # Returns exact in float32 (the returns are rounded to the input's dtype before the baselines);
    # the group sums of the baselines are not.
    rewards = torch.tensor([[BIG, 0.0], [1.0, 1.0], [1.0, 0.0], [3.0, 1.0]])
    mask = torch.ones(4, 2, dtype=torch.bool)
    ids = torch.tensor([0, 0, 0, 0])
    torch.testing.assert_close(fn(rewards, mask, ids), fn(rewards.double(), mask, ids).float(), rtol=0, atol=0)
    rewards = torch.tensor([[1.0, BIG, 1.0], [1.0, 1.0, 1.0], [BIG, 1.0, 3.0]])
    mask = torch.ones(3, 3, dtype=torch.bool)
    returns = rl.turn_returns(rewards, mask)
    assert returns[0, 0].item() == BIG + 2  # 1 + 2^24 + 1, exact in float64 and in float32
    torch.testing.assert_close(returns, rl.turn_returns(rewards.double(), mask).float(), rtol=0, atol=0)


def test_grpo_uses_the_unbiased_std_in_a_group_of_two():
    # std of {0, 2} with n − 1 = 1: √2, so the advantages are ∓1/√2
    got = rl.grpo_advantages(torch.tensor([0.0, 2.0]), torch.tensor([5, 5]), eps=0.0)
    torch.testing.assert_close(got, torch.tensor([-2 ** -0.5, 2 ** -0.5]))


def test_estimator_inputs_are_checked_and_named():
    ids = torch.tensor([0, 0])
    with pytest.raises(ValueError, match=r"^scores: expected shape \[n\], got \(2, 1\)"):
        rl.grpo_advantages(torch.zeros(2, 1), ids)
    with pytest.raises(ValueError, match=r"^scores: expected shape \[n\], got \(2, 1\)"):
        rl.rloo_advantages(torch.zeros(2, 1), ids)
    with pytest.raises(ValueError, match=r"^rewards: expected shape \[n, T\], got \(2,\)"):
        rl.turn_returns(torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match=r"^rewards: expected shape \[n, T\], got \(2,\)"):
        rl.trloo_advantages(torch.zeros(2), torch.ones(2), ids)
    with pytest.raises(ValueError, match=r"^turn_mask: expected shape \(2, 3\), got \(1, 3\)"):
        rl.turn_returns(torch.zeros(2, 3), torch.ones(1, 3))  # would broadcast over the batch
    with pytest.raises(ValueError, match=r"^turn_mask: expected shape \(2, 3\), got \(1, 3\)"):
        rl.trloo_advantages(torch.zeros(2, 3), torch.ones(1, 3), ids)
    with pytest.raises(ValueError, match=r"^values: expected shape \[B\], got \(2, 1\)"):
        rl.broadcast_to_tokens(torch.zeros(2, 1), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^mask: expected shape \[B, L\], got \(2,\)"):
        rl.broadcast_to_tokens(torch.zeros(2), torch.ones(2))
    with pytest.raises(ValueError, match="^mask: expected 3 rows, got 2$"):
        rl.broadcast_to_tokens(torch.zeros(3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="^mask: expected a torch.Tensor"):
        rl.broadcast_to_tokens(torch.zeros(2), [[1, 0], [1, 1]])
