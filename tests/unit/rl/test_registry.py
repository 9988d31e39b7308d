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
