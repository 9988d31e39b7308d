"""Shared pieces of the TRL tests: a tiny-random model, a real GRPOTrainer around a KernelRollout,
and a scripted generator (a stand-in for the model that writes chosen replies as tokens)."""

from __future__ import annotations

import os
from pathlib import Path

from tritongym.integrations.trl.rollout import Generation, KernelRollout
from tritongym.integrations.trl.tiny import corpus, tiny_random_model

REPO = Path(__file__).resolve().parents[2]
HONEST = (REPO / "examples" / "builtin" / "01_scaled_add.py").read_text()
HONEST_REPLY = f"Here it is.\n\n```python\n{HONEST}```\n"
VOID_REPLY = "no code yet"
PID = "builtin/01_scaled_add"


def make_trainer(rollout: KernelRollout, tmp_path: Path, *, num_generations: int = 2, steps: int = 2,
                 max_new_tokens: int = 16, trainer_cls=None, min_p: float | None = None, beta: float = 0.0, **kwargs):
    """A real (TRLOO)GRPOTrainer over `rollout` with a seeded tiny-random model (CPU). With ``beta`` > 0
    the model is saved and passed by path: TRL loads its reference model from the policy's path."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import GRPOConfig

    from tritongym.integrations.trl.rewards import TrajectoryReward
    from tritongym.integrations.trl.trainer import TRLOOGRPOTrainer

    rows = rollout.dataset_rows()
    model, tokenizer = tiny_random_model(corpus([r["prompt"] for r in rows]), seed=0)
    if beta:
        model.save_pretrained(tmp_path / "policy")
        model = str(tmp_path / "policy")
    args = GRPOConfig(output_dir=str(tmp_path / "trainer"), max_steps=steps,
                      per_device_train_batch_size=num_generations, num_generations=num_generations,
                      max_completion_length=max_new_tokens, learning_rate=1e-3,
                      logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, bf16=False, beta=beta,
                      seed=0, disable_tqdm=True, min_p=min_p)
    cls = trainer_cls or TRLOOGRPOTrainer
    return cls(model=model, reward_funcs=[TrajectoryReward()], args=args, train_dataset=Dataset.from_list(rows),
               processing_class=tokenizer, rollout_func=rollout, **kwargs)


class ScriptedGenerator:
    """Replies chosen per (row, turn): ``script[row][turn]`` is the text, tokenized and ended with EOS.

    Every row runs every turn (the env's default success rule never ends an episode early), so
    call k of a rollout is turn k mod T. Records the contexts it was given (token in, token out).
    """

    def __init__(self, script: list[list[str]]) -> None:
        self.script = script
        self.turns = len(script[0])
        self.calls = 0
        self.contexts: list[list[list[int]]] = []

    def __call__(self, trainer, contexts, max_new_tokens):
        tokenizer = trainer.processing_class
        assert len(contexts) == len(self.script), (len(contexts), len(self.script))
        turn = self.calls % self.turns
        self.calls += 1
        self.contexts.append([list(c) for c in contexts])
        return [Generation(tokenizer(row[turn], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id])
                for row in self.script]
