"""``tritongym train --trainer trl``: multi-turn GRPO with TRLOO on the kernel environment.

`run_trl_training` wires the pieces of this package together: the problems as a chat dataset, the
model (a Hugging Face id or path, or ``tiny-random``), a `KernelRollout` on the warm evaluation
pool, `TrajectoryReward`, `TRLOOGRPOTrainer`, the run-log callback and, optionally, the
response-length LR decay. The run folder ends up with::

    run.json              the settings
    trajectories.jsonl    every trajectory, in the agent runner's schema (one line each)
    metrics.jsonl         TRL's log of every step (loss, reward, per-turn metrics, LR, ...)
    summary.json          steps, wall time, parameter change, the last log
    model/                the trained model and tokenizer (save_pretrained)
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tritongym.errors import TritongymError

__all__ = ["TrlTrainConfig", "require_trl", "run_trl_training"]

INSTALL_HINT = "pip install -e '.[trl]' torch==2.13.0 (from the clone, your torch first; see docs/training.md)"


def require_trl() -> None:
    """Raise a `TritongymError` naming the extra when TRL (or what it needs here) is missing."""
    import importlib.util

    # find_spec, not import: the check is instant, and a usage error is reported before any heavy import.
    missing = [m for m in ("trl", "transformers", "datasets", "tokenizers", "accelerate")
               if importlib.util.find_spec(m) is None]
    if missing:
        raise TritongymError(f"the TRL integration needs {', '.join(missing)}: {INSTALL_HINT}")


@dataclass
class TrlTrainConfig:
    """Settings of one TRL training run (the flags of ``tritongym train --trainer trl``)."""

    model: str
    out: str
    problems: str = "builtin"
    only: list[str] | None = None
    turns: int = 2
    steps: int = 2
    num_generations: int = 2
    prompts_per_step: int = 1
    max_new_tokens: int = 64
    learning_rate: float = 1e-5
    temperature: float = 1.0
    feedback: str = "standard"
    extract: str = "last"
    device: str = "auto"
    eval_workers: int = 1
    gamma: float = 1.0
    prs: bool = True
    meaningful_turns: bool = True
    group_filter_std: float | None = None
    dvp_alpha: float | None = None
    length_lr_decay: bool = False
    advantage: str = "trloo"
    #: when a trajectory ends early (`KernelRollout`'s ``success``): ``never``, ``correct`` (KernelGYM's
    #: episodes), ``speedup:X``
    stop_on: str = "never"
    seed: int = 0
    #: The evaluator's master seed (None: secret, fresh per evaluation). For reproducible tests only:
    #: with fixed trial inputs, feedback that quotes expected values could teach a policy those values.
    eval_seed: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("turns", "steps", "num_generations", "prompts_per_step", "max_new_tokens", "eval_workers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.num_generations < 2:
            raise ValueError("num_generations must be >= 2: GRPO and TRLOO compare a prompt's trajectories")
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.group_filter_std is not None and not self.group_filter_std >= 0:
            raise ValueError(f"group_filter_std must be >= 0, got {self.group_filter_std}")
        if self.dvp_alpha is not None and not 0 < self.dvp_alpha <= 1:
            raise ValueError(f"dvp_alpha must be in (0, 1], got {self.dvp_alpha}")
        if self.advantage not in ("trloo", "turn_grpo"):
            raise ValueError(f"advantage must be 'trloo' or 'turn_grpo', got {self.advantage!r}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        from tritongym.env.core import success_rule

        success_rule(self.stop_on)  # never, correct, speedup:X; ValueError otherwise


def _saved_generic_tokenizer(name: str) -> bool:
    """A local folder whose tokenizer was saved as a generic fast tokenizer (its tokenizer.json is the
    whole tokenizer), not as a model family's own class."""
    config = Path(name) / "tokenizer_config.json"
    if not (Path(name) / "tokenizer.json").is_file() or not config.is_file():
        return False
    try:
        saved_class = json.loads(config.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return False
    return saved_class in ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(name: str) -> Any:
    """The tokenizer of a model folder or id, as training loads it.

    A folder saved with a generic fast tokenizer (what `tiny-random` runs write) is loaded as that
    tokenizer: transformers 5 rebuilds a qwen2 folder's tokenizer as Qwen2Tokenizer, whose
    pre-tokenizer splits text other than the trained one does, so the model would continue training
    on ids it never saw.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if _saved_generic_tokenizer(name):
        return PreTrainedTokenizerFast.from_pretrained(name)
    return AutoTokenizer.from_pretrained(name)


def _load_model(name: str, prompts: list[list[dict[str, str]]], seed: int) -> tuple[Any, Any]:
    from tritongym.integrations.trl.tiny import TINY_RANDOM, corpus, tiny_random_model

    if name == TINY_RANDOM:
        return tiny_random_model(corpus(prompts), seed=seed)
    from transformers import AutoModelForCausalLM

    try:
        tokenizer = load_tokenizer(name)
        model = AutoModelForCausalLM.from_pretrained(name)
    except (OSError, ValueError) as exc:  # a missing folder, an unknown id, no network
        raise TritongymError(f"cannot load model {name!r}: {exc}; give a local path, a Hugging Face model id, "
                             "or 'tiny-random'") from exc
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def run_trl_training(config: TrlTrainConfig, *, progress: bool = False, evaluator: Any = None) -> dict[str, Any]:
    """Train `config.model` for `config.steps` GRPO steps; returns the summary written to ``summary.json``.

    `evaluator`: an `tritongym.env.Evaluator` that gives the rollout its verdicts, shared and left open
    (a pool already warm, a remote client, a benchmark's own reward rule); None: a `PoolEvaluator` with
    `config.eval_workers` slots and ``EvalOptions(device=config.device, seed=config.eval_seed)``.
    """
    require_trl()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL 1.16
    import torch
    from datasets import Dataset
    from trl import GRPOConfig

    from tritongym.env.store import TrajectoryStore
    from tritongym.evaluator import EvalOptions
    from tritongym.integrations.trl.rewards import TrajectoryReward
    from tritongym.integrations.trl.rollout import KernelRollout
    from tritongym.integrations.trl.trainer import ResponseLengthLRCallback, RunLogCallback, TRLOOGRPOTrainer
    from tritongym.rl import ResponseLengthLRDecay
    from tritongym.tasks import load_problems, select_problems

    out = Path(config.out)
    problems = select_problems(load_problems(config.problems), config.only, config.problems)
    settings = {k: v for k, v in asdict(config).items() if k not in ("out", "eval_workers")}
    TrajectoryStore(out).check_settings({**settings, "trainer": "trl",
                                         "problem_ids": [p.problem_id for p in problems]})
    cuda = torch.cuda.is_available() and config.device != "cpu"
    options = EvalOptions(device=config.device, seed=config.eval_seed)
    rollout = KernelRollout(problems, turns=config.turns, evaluator=evaluator, options=options,
                            workers=config.eval_workers,
                            feedback=config.feedback, extract=config.extract, max_new_tokens=config.max_new_tokens,
                            out=str(out), provenance={"model": config.model}, success=config.stop_on)
    try:
        rows = rollout.dataset_rows()
        model, tokenizer = _load_model(config.model, [r["prompt"] for r in rows], config.seed)
        before = [p.detach().clone() for p in model.parameters()]
        batch = config.num_generations * config.prompts_per_step
        args = GRPOConfig(
            output_dir=str(out / "trainer"), max_steps=config.steps, per_device_train_batch_size=batch,
            num_generations=config.num_generations, max_completion_length=config.max_new_tokens,
            learning_rate=config.learning_rate, temperature=config.temperature, logging_steps=1,
            save_strategy="no", report_to="none", use_cpu=not cuda, bf16=False, beta=0.0, seed=config.seed,
            disable_tqdm=not progress, min_p=config.dvp_alpha, **config.extra)
        callbacks: list[Any] = [RunLogCallback(out)]
        optimizers: tuple[Any, Any] = (None, None)
        if config.length_lr_decay:
            optimizer = torch.optim.AdamW(model.parameters(), lr=config.learning_rate)
            optimizers = (optimizer, ResponseLengthLRDecay(optimizer))
            callbacks.append(ResponseLengthLRCallback())
        trainer = TRLOOGRPOTrainer(model=model, reward_funcs=[TrajectoryReward()], args=args,
                                   train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                                   rollout_func=rollout, callbacks=callbacks, optimizers=optimizers,
                                   turn_gamma=config.gamma, prs=config.prs, prs_seed=config.seed,
                                   group_filter_std=config.group_filter_std, dvp_alpha=config.dvp_alpha,
                                   meaningful_turns=config.meaningful_turns, advantage=config.advantage)
        started = time.monotonic()
        trainer.train()
        wall_s = time.monotonic() - started
        trained = trainer.accelerator.unwrap_model(trainer.model)
        after = list(trained.parameters())
        change = sum(float((p.detach().cpu() - b).abs().sum()) for p, b in zip(after, before, strict=True))
        trained.save_pretrained(out / "model")
        tokenizer.save_pretrained(out / "model")
        logs = [entry for entry in trainer.state.log_history if "loss" in entry]
        summary = {"steps": trainer.state.global_step, "wall_s": round(wall_s, 2),
                   "parameter_change_l1": change, "last_log": logs[-1] if logs else None,
                   "trajectories": str(out / "trajectories.jsonl"), "metrics": str(out / "metrics.jsonl"),
                   "model": str(out / "model")}
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return summary
    finally:
        rollout.close()
