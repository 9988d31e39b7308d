"""Tests for tritongym.evaluator.options: `EvalOptions` validation messages and tolerance presets."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from tritongym.errors import OptionsError, TritongymError
from tritongym.evaluator.options import TOLERANCE_PRESETS, EvalOptions, Tolerance
from tritongym.evaluator.result import ViolationCode
from tritongym.evaluator.reward import RewardConfig


def test_defaults_are_the_protective_kernelbench_ones():
    options = EvalOptions()
    assert options.device == "auto" and options.sandbox == "auto"
    assert options.num_trials == 5
    assert options.tolerance == "kernelbench" and options.atol is None and options.rtol is None
    assert options.seed is None  # secret seeds from OS entropy unless asked otherwise
    assert options.disabled_checks == frozenset()
    assert options.timeout > 0


def test_options_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EvalOptions().timeout = 1  # type: ignore[misc]


def test_options_error_is_a_value_error_and_a_tritongym_error():
    assert issubclass(OptionsError, ValueError) and issubclass(OptionsError, TritongymError)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device": "gpu"}, "device must be auto, cpu, cuda or cuda:N (N a device index), got 'gpu'"),
        ({"sandbox": "docker"}, "sandbox must be one of auto, bwrap, none, got 'docker'"),
        ({"tolerance": "loose"}, "tolerance must be one of kernelbench, strict, got 'loose'; set atol/rtol"),
        ({"timeout": 0}, "timeout must be a positive number, got 0"),
        ({"timeout": -5.0}, "timeout must be a positive number, got -5.0"),
        ({"timeout": math.inf}, "timeout must be a positive number, got inf"),
        ({"timeout": math.nan}, "timeout must be a positive number, got nan"),
        ({"timeout": "60"}, "timeout must be a positive number, got '60'"),
        ({"reference_timeout": 0}, "reference_timeout must be a positive number"),
        ({"memory_limit_gb": -1}, "memory_limit_gb must be a positive number"),
        ({"warmup_ms": 0}, "warmup_ms must be a positive number"),
        ({"atol": -1e-3}, "atol must be a number >= 0, got -0.001"),
        ({"rtol": math.nan}, "rtol must be a number >= 0, got nan"),
        ({"atol": "0.1"}, "atol must be a number >= 0, got '0.1'"),
        ({"num_trials": 0}, "num_trials must be an integer >= 1, got 0"),
        ({"num_trials": 2.0}, "num_trials must be an integer >= 1, got 2.0"),
        ({"num_trials": True}, "num_trials must be an integer >= 1, got True"),
        ({"timing_reps": 0}, "timing_reps must be an integer >= 1"),
        ({"timing_blocks": 0}, "timing_blocks must be an integer >= 1"),
        ({"max_processes": 4}, "max_processes must be an integer >= 8, got 4"),
        (
            {"timing_reps": 2, "timing_blocks": 3},
            "timing_blocks cannot exceed timing_reps; lower timing_blocks",
        ),
        ({"reward": {"correct_weight": 1.0}}, "reward must be a RewardConfig"),
    ],
    ids=lambda value: str(value) if isinstance(value, dict) else "",
)
def test_invalid_options_raise_options_error_with_a_useful_message(kwargs, message):
    with pytest.raises(OptionsError) as info:
        EvalOptions(**kwargs)
    assert message in str(info.value)


def test_replace_revalidates():
    with pytest.raises(OptionsError, match="num_trials"):
        dataclasses.replace(EvalOptions(), num_trials=0)


def test_valid_edge_values_are_accepted():
    options = EvalOptions(
        timeout=0.5,
        atol=0.0,
        rtol=0,
        num_trials=1,
        max_processes=8,
        timing_reps=1,
        timing_blocks=1,
        device="cpu",
        sandbox="none",
        tolerance="strict",
        seed=0,
    )
    assert options.atol == 0.0 and options.seed == 0


def test_disabled_checks_are_normalised_to_code_strings():
    options = EvalOptions(disabled_checks={ViolationCode.INPUT_MUTATION, "pytorch_fallback"})
    assert options.disabled_checks == frozenset({"input_mutation", "pytorch_fallback"})
    assert all(type(code) is str for code in options.disabled_checks)


# -- tolerance presets -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_kernelbench_preset_is_one_percent_for_every_dtype(dtype):
    assert EvalOptions().tolerance_for(dtype) == Tolerance(1e-2, 1e-2)


def test_strict_preset_is_per_precision():
    strict = EvalOptions(tolerance="strict")
    assert strict.tolerance_for(torch.float32) == Tolerance(1e-4, 1e-4)
    assert strict.tolerance_for(torch.float16) == Tolerance(1e-2, 1e-2)
    assert strict.tolerance_for(torch.bfloat16) == Tolerance(1e-2, 1e-2)
    assert strict.tolerance_for(torch.float64).atol < strict.tolerance_for(torch.float32).atol


def test_dtypes_outside_a_preset_fall_back_to_its_float32_entry():
    for name in TOLERANCE_PRESETS:
        options = EvalOptions(tolerance=name)
        assert options.tolerance_for(torch.complex64) == options.tolerance_for(torch.float32)


def test_atol_and_rtol_override_the_preset_independently():
    assert EvalOptions(atol=0.5).tolerance_for(torch.float32) == Tolerance(0.5, 1e-2)
    assert EvalOptions(tolerance="strict", rtol=0.25).tolerance_for(torch.float32) == Tolerance(1e-4, 0.25)
    both = EvalOptions(tolerance="strict", atol=1, rtol=2)
    assert both.tolerance_for(torch.float16) == Tolerance(1.0, 2.0)
    assert isinstance(both.tolerance_for(torch.float16).atol, float)


def test_reward_config_validation():
    with pytest.raises(OptionsError, match=r"RewardConfig.speedup_cap must be a finite number >= 0, got -1"):
        RewardConfig(speedup_cap=-1)
    with pytest.raises(OptionsError, match="RewardConfig.correct_weight"):
        RewardConfig(correct_weight=math.inf)
    assert EvalOptions(reward=RewardConfig(speedup_weight=0.0)).reward.speedup_weight == 0.0
