"""End-to-end: autotuned candidates on the CPU tier (issue 12): they run without a GPU driver, every
config left after pruning is checked on the trials (one per trial, in rotation), and a wrong
config is an `incorrect` verdict that names it."""

from __future__ import annotations

import re

import tritongym
from tritongym import Status

from .helpers import TINY_RELU, candidate


def evaluate(name: str, trials: int):
    return tritongym.evaluate(TINY_RELU, candidate(name), device="cpu", num_trials=trials, timeout=120)


def test_several_configs_run_without_a_gpu_and_all_are_checked():
    result = evaluate("autotune_relu", 3)
    assert result.status == Status.OK, (result.status, result.error)
    assert not [n for n in result.notices if n.code == "autotune_partial"]  # 3 pruned configs, 6 calls


def test_a_wrong_config_among_right_ones_is_found_and_named():
    result = evaluate("autotune_relu_wrong_config", 3)
    assert result.status == Status.INCORRECT, (result.status, result.error)
    failed = [t for t in result.trials if not t.passed]
    assert failed and all("BLOCK=256" in t.message and "(config 2 of 3)" in t.message for t in failed)
    passed = [t for t in result.trials if t.passed]
    assert passed, "the right configs pass their trials"


def test_config_pre_hooks_and_heuristics_are_honoured():
    result = evaluate("autotune_pre_hook_atomic", 3)
    assert result.status == Status.OK, (result.status, result.error)


def test_configs_beyond_the_trials_are_named_in_a_notice():
    result = tritongym.evaluate(TINY_RELU, candidate("autotune_relu"), device="cpu", num_trials=1,
                                input_families=(), timeout=120)
    assert result.status == Status.OK
    (notice,) = [n for n in result.notices if n.code == "autotune_partial"]
    assert re.search(r"checked 1 of its 3 configs", notice.message), notice.message


def test_the_rotation_runs_over_the_configs_left_after_pruning():
    result = tritongym.evaluate(TINY_RELU, candidate("autotune_pruned_tail"), device="cpu", num_trials=2,
                                input_families=(), timeout=120)
    assert result.status == Status.OK, (result.status, result.error)
    assert not [n for n in result.notices if n.code == "autotune_partial"], result.notices


def test_a_config_run_only_on_task_inputs_gets_a_perturbed_trial_too():
    """Issue 20, family 7: a config right only on the task's distribution (|x| for ReLU on [0, 1))
    would pass if the rotation ran it on task trials alone; an added trial runs it on a family."""
    from pathlib import Path

    problem = Path(__file__).resolve().parents[1] / "adversarial" / "problems" / "relu_uniform.py"
    result = tritongym.evaluate(problem, candidate("autotune_relu_sign_bug"), device="cpu", num_trials=2,
                                timeout=120)
    assert result.status == Status.INCORRECT, (result.status, result.error)
    failed = [t for t in result.trials if not t.passed]
    assert failed and all(t.family == "negated" and "(config 2 of 4)" in t.message for t in failed), failed
    assert len(result.trials) > 5, "an extra trial was added for the config"


def test_honest_autotuned_kernel_gets_every_config_on_a_family_and_stays_ok():
    result = evaluate("autotune_relu", 2)
    assert result.status == Status.OK, (result.status, result.error)
    assert not [n for n in result.notices if n.code == "autotune_partial"]


def _configs_ran(result) -> list[int]:
    """tiny_relu's autotuned fixtures rotate their 3 configs by trial index."""
    return [t.index % 3 for t in result.trials]


def test_every_trial_gets_a_peer_that_ran_the_same_configs():
    """Logs are compared between trials that ran the same configs (issue 20); with 2 task trials
    and no families, configs 0 and 1 run once each, so a peer trial is added for each."""
    result = tritongym.evaluate(TINY_RELU, candidate("autotune_relu"), device="cpu", num_trials=2,
                                input_families=(), timeout=120)
    assert result.status == Status.OK, (result.status, result.error)
    ran = _configs_ran(result)
    assert len(ran) == 4 and all(ran.count(config) == 2 for config in ran), [t.index for t in result.trials]


def test_host_data_in_an_autotuned_grid_is_judged_by_what_it_carries():
    """100 grid values computed on the host, one per launch, that only duplicate programs: the logs
    vary between trials of one config (each trial has a peer that ran its configs), so the clean
    room replays them on fresh inputs, where they still compute the answer: what varies carries
    none of it, and the clean room alone (candidate filters off) gives `ok` (issue 43's rule). The
    candidate-side filter still refuses the numpy reads themselves when it is on."""
    result = tritongym.evaluate(TINY_RELU, candidate("autotune_relu_grid_host_data"), device="cpu",
                                num_trials=2, input_families=(), timeout=300, candidate_checks=False,
                                disabled_checks=["forbidden_construct"])
    assert result.status == Status.OK, (result.status, result.error)
    ran = _configs_ran(result)
    assert all(ran.count(config) == 2 for config in ran), [t.index for t in result.trials]
    filtered = tritongym.evaluate(TINY_RELU, candidate("autotune_relu_grid_host_data"), device="cpu",
                                  num_trials=2, input_families=(), timeout=300)
    assert filtered.reward == 0 and "host_compute" in [v.code for v in filtered.violations], filtered.error
