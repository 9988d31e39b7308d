"""examples/verl: every override of the Dr.Kernel recipe exists in verl 0.9.1's config schema.

The launch script's argument list is parsed as the shell would, composed onto verl's own
``ppo_trainer`` config with Hydra (an unknown key fails there) and turned into verl's config
dataclasses (a wrong type or value fails there). The training run itself needs GPUs and is not run.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[verl]'; see .ci/trainers)")

from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "verl"


def _overrides(env: dict[str, str]) -> list[str]:
    """The hydra overrides ``run_drkernel.sh`` passes, after the shell's expansion and quoting."""
    script = (RECIPE / "run_drkernel.sh").read_text()
    block = script[script.index("python3 -m verl.trainer.main_ppo"):script.index('"$@"')]
    block = block.replace("\\\n", " ")

    def expand(match: re.Match) -> str:
        name, default = match.group(1) or match.group(3), match.group(2)
        return env.get(name, default if default is not None else "")

    block = re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", expand, block)
    return shlex.split(block)[3:]  # drop "python3 -m verl.trainer.main_ppo"


@pytest.fixture(scope="module")
def recipe_config(tmp_path_factory):
    import verl

    env = {"DATA_DIR": "/data/tritongym", "MODEL_PATH": "/ckpt/sft", "NNODES": "2", "GPUS_PER_NODE": "8",
           "HERE": str(RECIPE), "TRITONGYM_EVAL_URL": "http://evalhost:8000"}
    overrides = _overrides(env)
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return overrides, compose("ppo_trainer", overrides=overrides)


def test_every_override_is_a_verl_key_with_the_recipe_value(recipe_config):
    overrides, cfg = recipe_config
    assert len(overrides) > 40
    for item in overrides:
        key, _, value = item.lstrip("+").partition("=")
        assert OmegaConf.select(cfg, key, throw_on_missing=True) is not None, key
    assert cfg.algorithm.adv_estimator == "trloo" and cfg.algorithm.gamma == 1.0
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "tritongym_ppo"
    assert list(cfg.trainer.logger) == ["console", "wandb"]
    assert cfg.trainer.nnodes == 2
    assert cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path == str(RECIPE / "agent_loops.yaml")
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.TRITONGYM_EVAL_URL == "http://evalhost:8000"
    # The names resolve in verl's own registries (the plug-in registered them on import verl).
    assert core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator).__module__.startswith("tritongym.")
    assert core_algos.get_policy_loss_fn(cfg.actor_rollout_ref.actor.policy_loss.loss_mode) is not None
    from verl.trainer.ppo.v1 import get_trainer_cls

    assert get_trainer_cls(cfg.trainer.v1.trainer_mode).__module__ == "tritongym.integrations.verl.trainer"
    from tritongym.integrations.verl.trainer import TurnRejection

    # MRS (Dr.Kernel's bounds and veto) and PRS, per turn, before the advantages.
    assert TurnRejection.from_config(cfg) == TurnRejection(mrs=True, prs=True, meaningful_turns=True)
    # Dr.Kernel's group filter on last-turn rewards: verl's replay buffer reads this reward_extra_info key.
    assert cfg.algorithm.filter_groups.enable and cfg.algorithm.filter_groups.metric == "tritongym/last_reward"


def test_verl_builds_its_config_dataclasses_from_the_recipe(recipe_config):
    _, cfg = recipe_config
    from verl.trainer.config.algorithm import RolloutCorrectionConfig

    algorithm = omega_conf_to_dataclass(cfg.algorithm)
    assert algorithm.adv_estimator == "trloo"
    assert algorithm.filter_groups.enable and algorithm.filter_groups.metric == "tritongym/last_reward"
    # verl's trainer reads rollout_correction as a mapping; its dataclass checks the fields. As in
    # Dr.Kernel (ROLLOUT_IS=null) no IS weight enters the loss; MRS reads the log-probs in the trainer.
    fields = {k: v for k, v in dict(algorithm.rollout_correction).items() if k != "_target_"}
    correction = RolloutCorrectionConfig(**fields)
    assert correction.rollout_is is None and correction.rollout_rs is None and not correction.bypass_mode
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 3.0)
    # 1000 (KernelGYM's LOSS_SCALE_FACTOR) x 3 turns: verl divides by trajectories, KernelGYM by turn rows.
    assert actor.loss_agg_mode == "seq-mean-token-sum-norm" and actor.loss_scale_factor == 3000
    assert actor.optim.lr == 1e-6 and actor.optim.clip_grad == 1.0
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert rollout.n == 16 and rollout.agent.default_agent_loop == "tritongym_kernel"
    assert rollout.prompt_length == 10240 and rollout.response_length == 28672
    assert rollout.calculate_log_probs


def test_verl_main_ppo_validation_accepts_the_recipe(recipe_config):
    # What verl.trainer.main_ppo.main runs before starting Ray (batch divisibility, lengths, losses).
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    _, cfg = recipe_config
    cfg = cfg.copy()
    OmegaConf.resolve(cfg)
    with pytest.warns(UserWarning, match="Disabled critic"):
        use_critic = need_critic(cfg)
    assert not use_critic and not need_reference_policy(cfg)
    validate_config(config=cfg, use_reference_policy=False, use_critic=False)


def test_agent_loop_entry_matches_the_loop_signature(monkeypatch):
    from tritongym.integrations.verl.agent_loop import KernelAgentLoop, _eval_options

    monkeypatch.setenv("TRITONGYM_EVAL_URL", "http://evalhost:8000")
    (entry,) = OmegaConf.load(RECIPE / "agent_loops.yaml")
    options = OmegaConf.to_container(entry, resolve=True)
    assert options.pop("name") == "tritongym_kernel"
    target = options.pop("_target_")
    assert target == f"{KernelAgentLoop.__module__}.{KernelAgentLoop.__qualname__}"
    parameters = inspect.signature(KernelAgentLoop.__init__).parameters
    assert set(options) <= set(parameters), set(options) - set(parameters)
    assert options["evaluator"] == "http://evalhost:8000" and options["max_turns"] == 3
    eval_options = _eval_options(options["eval_options"])
    assert eval_options.device == "cuda" and eval_options.reward.coverage_weight == 0.5
    monkeypatch.delenv("TRITONGYM_EVAL_URL")
    assert OmegaConf.to_container(OmegaConf.load(RECIPE / "agent_loops.yaml")[0], resolve=True)["evaluator"] == "local"


def test_make_dataset_writes_rows_verl_reads(tmp_path):
    import pandas as pd

    sys.path.insert(0, str(RECIPE))
    try:
        import make_dataset
    finally:
        sys.path.remove(str(RECIPE))
    make_dataset.main(["--problems", "builtin", "--out", str(tmp_path), "--val-fraction", "0.2"])
    train, val = pd.read_parquet(tmp_path / "train.parquet"), pd.read_parquet(tmp_path / "val.parquet")
    assert len(train) + len(val) == 17 and len(val) == 3
    row = train.iloc[0]
    assert row["agent_name"] == "tritongym_kernel"
    assert row["extra_info"]["problem"].startswith("builtin/")
    assert "class Model" in row["extra_info"]["problem_source"]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["extra_info"]["problem"] in row["prompt"][1]["content"]
