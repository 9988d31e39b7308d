"""Does the whole loop learn? A small policy's reward through rollout, evaluation, TRLOO and updates, on a CPU.

Three phases, all in-process, nothing downloaded (docs/training.md, "Does the loop learn?"):

1. **Corpus and pretraining.** For a few built-in problems (`tritongym.tasks.builtin_suite`), the
   honest solution (``examples/builtin/``) and realistic wrong ones made from it: an off-by-one
   mask, a missing activation (or term), a PyTorch fallback that defines a kernel but never
   launches it, and a syntax error. Each is **really evaluated** by the sandboxed evaluator in a
   `KernelEnv`, and each becomes a two-turn conversation: the first answer, the environment's real
   feedback message for it, then the honest answer. A Qwen2-style model (a byte-level BPE tokenizer
   trained on the corpus, `tritongym.integrations.trl.tiny_tokenizer`) is trained on those
   conversations (loss on the assistant turns only). Its first answers are then a mixture: about a
   third honest, the rest wrong, and a honest second answer after feedback.
2. **RL through the project's own path**: `run_trl_training` (``tritongym train --trainer trl``'s
   Python API) on the saved model: multi-turn `KernelRollout` on `KernelEnv`, the real sandboxed
   evaluator on the warm pool (two workers) behind a verdict cache (below), TRLOO turn advantages,
   meaningful-turn masking and PRS (PRS keeps every turn on a CPU: coverage is unmeasured), fixed
   seeds.
3. **Per-step curve** from the run folder's ``trajectories.jsonl`` (what ``tritongym report`` reads):
   mean trajectory reward, the share of ``ok`` first turns and last turns, the share of turns with an
   integrity violation and the count of turns rewarded despite one (a reward hack; expected 0).

With ``--ablation`` the same RL runs again from the same pretrained model and seeds with
``advantage="turn_grpo"`` (KernelGYM's multi-turn GRPO: the self-included group mean), and the
plot compares both; ``--stop-on correct`` ends a trajectory at its first ``ok`` turn (KernelGYM's
episodes, where later turns have fewer members and the two estimators differ).

**Cost.** Verdicts, the corpus's and RL's, are cached by (problem, exact solution text) in one
`VerdictCache` shared by every run of the study: the small policy mostly repeats texts it knows, and
a repeated text costs nothing. That is legitimate only because every evaluation uses one fixed master
seed (``EvalOptions(seed=...)``, ``--eval-seed``, `RLSettings.eval_seed`): the same text then gets
the same trials, hence the same verdict and the same feedback message, so a cached verdict is the
verdict a fresh evaluation would give. What the fixed seed means for a multi-turn episode: the
feedback a policy reads after a wrong answer quotes figures (mismatch counts, values) from the same
trial inputs every time, so the same wrong text always gets the same message. Here that is the
point (the study compares estimators on one fixed environment, and the corpus, hence the tokenizer
and the pretrained policy, no longer drift from run to run with the secret trial inputs); in
training it would not be, since a policy could learn values that the fixed inputs make constant
(training draws a secret seed per evaluation).

    python benchmarks/learning.py --out runs/learning --seeds 0 --ablation --plot docs/learning.png
    python benchmarks/learning.py --out runs/early-stop --seeds 0,1,2 --ablation --stop-on correct \
        --plot docs/learning_early_stop.png
    python benchmarks/learning.py --quick --out runs/early-stop-quick     # the CI size (benchmarks/learning_studies.py)

Meant for the TRL virtual environment (``pip install -e '.[trl]' matplotlib``; .ci/trl).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "examples" / "builtin"

#: The problems of the benchmark: elementwise, so one evaluation takes about a second in the interpreter.
PROBLEMS = ("01_scaled_add", "02_leaky_relu", "03_gelu_tanh")

#: Per problem, the line the "missing activation" variant replaces and what it writes instead.
MISSING_ACTIVATION = {
    "01_scaled_add": ("tl.store(out_ptr + offs, alpha * x + beta * y, mask=mask)",
                      "tl.store(out_ptr + offs, alpha * x, mask=mask)"),
    "02_leaky_relu": ("y = tl.where(x >= 0, x, x * negative_slope)", "y = x"),
    "03_gelu_tanh": ("tl.store(out_ptr + offs, 0.5 * x * (1.0 + t), mask=mask)",
                     "tl.store(out_ptr + offs, x, mask=mask)"),
}

#: Per problem, the PyTorch expression a fallback returns instead of launching its kernel.
TORCH_FALLBACK = {
    "01_scaled_add": "self.alpha * x + self.beta * y",
    "02_leaky_relu": "torch.nn.functional.leaky_relu(x, negative_slope=self.negative_slope)",
    "03_gelu_tanh": 'torch.nn.functional.gelu(x, approximate="tanh")',
}


@dataclass
class Variant:
    """One first answer of the corpus and what the evaluator said about it."""

    problem_id: str
    kind: str  # honest, off_by_one, missing_activation, torch_fallback, syntax_error
    code: str
    status: str = ""
    reward: float = 0.0
    feedback: str = ""


def _replace_once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise ValueError(f"expected exactly one {old!r} in the solution")
    return text.replace(old, new)


def variants_of(name: str, honest: str) -> list[tuple[str, str]]:
    """(kind, code): the honest solution of builtin/`name` and four realistic wrong ones."""
    # The off-by-one leaves the last element unwritten; its output is zero-filled so that element reads
    # 0 in every run. With `torch.empty_like` it held whatever the allocator handed out, which depends
    # on the worker's allocation history (it changed under CPU load): the feedback's error figures,
    # hence the corpus, the tokenizer and the pretrained policy, drifted from run to run.
    off_by_one = _replace_once(_replace_once(honest, "mask = offs < n_elements", "mask = offs < n_elements - 1"),
                               "out = torch.empty_like(x)", "out = torch.zeros_like(x)")
    old, new = MISSING_ACTIVATION[name]
    missing = _replace_once(honest, old, new)
    head, sep, _ = honest.partition("        x = x.contiguous()\n")
    if not sep:
        raise ValueError(f"{name}: the forward does not start with x = x.contiguous()")
    fallback = head + f"        return {TORCH_FALLBACK[name]}\n"
    syntax = _replace_once(honest, "    def forward(self,", "    def forward(self")
    return [("honest", honest), ("off_by_one", off_by_one), ("missing_activation", missing),
            ("torch_fallback", fallback), ("syntax_error", syntax)]


def reply_of(code: str) -> str:
    """The assistant message that submits `code` (the env extracts the last fenced python block)."""
    return f"```python\n{code}```"


@dataclass
class Corpus:
    """The pretraining conversations (chat messages) and the variants they were made from."""

    conversations: list[list[dict[str, str]]]
    variants: list[Variant]
    prompts: dict[str, list[dict[str, str]]]


def build_corpus(problems: list[Any], evaluator: Any, *, honest_weight: int = 2,
                 make_variants: Any = variants_of) -> Corpus:
    """Evaluate every variant for real and make the two-turn conversations (module docstring).

    The honest-first conversation appears `honest_weight` times per problem, each wrong-first one
    once: with `variants_of`'s five, the pretrained policy's first answer is honest about 2/6 of the
    time. `make_variants`: ``(name, honest code) -> [(kind, code), ...]`` (benchmarks/reward_hacking.py adds
    the shortcuts a KernelBench-style checker accepts).
    """
    from tritongym.env import KernelEnv

    conversations: list[list[dict[str, str]]] = []
    variants: list[Variant] = []
    prompts: dict[str, list[dict[str, str]]] = {}
    for problem in problems:
        honest = (SOLUTIONS / f"{problem.name}.py").read_text(encoding="utf-8")
        env = KernelEnv([problem], evaluator=evaluator, max_turns=2, feedback="standard", history="full")
        for kind, code in make_variants(problem.name, honest):
            prompt, _ = env.reset(options={"problem": problem})
            prompts[problem.problem_id] = prompt
            observation, reward, _term, _trunc, _info = env.step(reply_of(code))
            turn = env.turns[-1]
            variants.append(Variant(problem.problem_id, kind, code, turn.status, float(reward), turn.message))
            conversation = [dict(m) for m in observation] + [{"role": "assistant", "content": reply_of(honest)}]
            conversations += [conversation] * (honest_weight if kind == "honest" else 1)
        env.close()
    return Corpus(conversations, variants, prompts)


# -- verdicts cached by exact text (this study and benchmarks/reward_hacking.py) ----------------------------

class VerdictCache:
    """tritongym's verdicts, one real sandboxed evaluation per distinct (problem, exact solution text).

    Thread-safe; a text being evaluated is evaluated once even when asked for concurrently. Valid only
    with a fixed evaluation seed, which the constructor requires: the same text then gets the same
    trials, so a cached verdict is the verdict a fresh evaluation would give (each study's docstring
    says what the fixed seed means for what its policy sees).
    """

    def __init__(self, evaluator: Any, options: Any) -> None:
        if options.seed is None:
            raise ValueError("a verdict cache needs a fixed evaluation seed (EvalOptions(seed=...)): with a secret "
                             "seed per evaluation the same text can get another verdict")
        self.evaluator, self.options = evaluator, options
        self._verdicts: dict[tuple[str, str], Any] = {}
        self._pending: dict[tuple[str, str], threading.Event] = {}
        self._lock = threading.Lock()
        self.evaluations = 0
        self.hits = 0
        self.eval_s = 0.0

    def verdict(self, problem: Any, solution: str) -> Any:
        key = (problem.problem_id, solution)
        while True:
            with self._lock:
                if key in self._verdicts:
                    self.hits += 1
                    return self._verdicts[key]
                waiting = self._pending.get(key)
                if waiting is None:
                    self._pending[key] = threading.Event()
                    break
            waiting.wait()
        try:
            started = time.monotonic()
            result = self.evaluator.evaluate(problem, solution)
            with self._lock:
                self._verdicts[key] = result
                self.evaluations += 1
                self.eval_s += time.monotonic() - started
            return result
        finally:
            with self._lock:
                self._pending.pop(key).set()

    def lookup(self, problem_id: str, solution: str) -> Any:
        """The cached verdict of a text a run evaluated (KeyError if it never was)."""
        return self._verdicts[(problem_id, solution)]


class CachedVerdicts:
    """An `tritongym.env.Evaluator` over a `VerdictCache`: tritongym's verdict as it is; a subclass may turn
    it into another reward (`result`; benchmarks/reward_hacking.py's naive rule)."""

    rule = "tritongym's verdict and reward"

    def __init__(self, cache: VerdictCache) -> None:
        self.cache = cache
        self.options = cache.options  # read by the run's provenance

    def result(self, verdict: Any) -> Any:
        return verdict

    def evaluate(self, problem: Any, solution: str) -> Any:
        return self.result(self.cache.verdict(problem, solution))

    def evaluate_many(self, pairs: Sequence[tuple[Any, str]]) -> list[Any]:
        return [self.evaluate(problem, solution) for problem, solution in pairs]

    async def aevaluate(self, problem: Any, solution: str) -> Any:
        return await asyncio.to_thread(self.evaluate, problem, solution)

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__, "rule": self.rule, "cache": "by (problem, exact text)",
                "seed": self.cache.options.seed}


# -- pretraining ---------------------------------------------------------------------------------------

#: What the ChatML template (`tritongym.integrations.trl.tiny`) puts between the end-of-turn token
#: the model emits and the next reply: the user message with the feedback and the next assistant header.
FEEDBACK_BEFORE, FEEDBACK_AFTER = "\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n"


def encode_conversation(tokenizer: Any, conversation: list[dict[str, str]]) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of a conversation, token for token as `KernelRollout` builds its context:
    the prompt with the generation header, each reply's tokens and EOS (mask 1), the feedback between
    replies as the rollout appends it (mask 0)."""
    first = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
    ids = list(tokenizer.apply_chat_template(conversation[:first], add_generation_prompt=True, tokenize=True,
                                             return_dict=False))
    mask = [0] * len(ids)
    for message in conversation[first:]:
        if message["role"] == "assistant":
            reply = tokenizer(message["content"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            ids += reply
            mask += [1] * len(reply)
        else:
            between = tokenizer(FEEDBACK_BEFORE + message["content"] + FEEDBACK_AFTER,
                                add_special_tokens=False)["input_ids"]
            ids += between
            mask += [0] * len(between)
    return ids, mask


@dataclass
class ModelSize:
    """The policy's dimensions (a Qwen2-style decoder, tied embeddings)."""

    hidden: int = 128
    layers: int = 4
    heads: int = 4
    vocab: int = 4096


def pretrain(corpus: Corpus, folder: Path, *, size: ModelSize, epochs: int, lr: float, seed: int,
             log: Any = print) -> dict[str, Any]:
    """Build the tokenizer and model, train on the corpus (assistant tokens only), save to `folder`."""
    import torch

    from tritongym.integrations.trl.tiny import corpus as template_texts
    from tritongym.integrations.trl.tiny import tiny_random_model

    texts = template_texts(list(corpus.prompts.values()))
    texts += [m["content"] for conversation in corpus.conversations for m in conversation]
    texts += [FEEDBACK_BEFORE + FEEDBACK_AFTER]
    model, tokenizer = tiny_random_model(texts, seed=seed, hidden_size=size.hidden, num_layers=size.layers,
                                         num_heads=size.heads, vocab_size=size.vocab, max_positions=8192)
    # Train on the token ids the RL phase will see: save the model and the tokenizer and reload the
    # tokenizer as `run_trl_training` does (`load_tokenizer`; checked again after pretraining).
    from tritongym.integrations.trl.train import load_tokenizer

    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tokenizer = load_tokenizer(str(folder))
    encoded = [encode_conversation(tokenizer, c) for c in corpus.conversations]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    total = epochs * len(encoded)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 20)
                                                 * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    order = random.Random(seed)
    model.train()
    started = time.monotonic()
    losses = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for epoch in range(epochs):
            batch = list(range(len(encoded)))
            order.shuffle(batch)
            epoch_loss = 0.0
            for i in batch:
                ids, mask = encoded[i]
                input_ids = torch.tensor([ids])
                labels = torch.tensor([[t if m else -100 for t, m in zip(ids, mask, strict=True)]])
                loss = model(input_ids=input_ids, labels=labels).loss
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                schedule.step()
                epoch_loss += float(loss.detach())
            losses.append(epoch_loss / len(encoded))
            log(f"pretrain epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f} ({time.monotonic() - started:.0f} s)")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if encode_conversation(load_tokenizer(str(folder)), corpus.conversations[0]) != encoded[0]:
        raise RuntimeError(f"the tokenizer saved in {folder} does not reproduce the pretraining token ids")
    lengths = [len(ids) for ids, _ in encoded]
    return {"epochs": epochs, "lr": lr, "loss_per_epoch": losses, "wall_s": round(time.monotonic() - started, 1),
            "parameters": sum(p.numel() for p in model.parameters()), "size": asdict(size),
            "conversations": len(encoded), "tokens_max": max(lengths), "tokens_mean": sum(lengths) / len(lengths),
            "reply_tokens_max": max(sum(m) for _, m in encoded) // 2 + 1}


# -- RL and its curve -----------------------------------------------------------------------------------

@dataclass
class RLSettings:
    """The RL phase: `run_trl_training`'s settings that the benchmark varies."""

    steps: int = 10
    num_generations: int = 4
    prompts_per_step: int = 2
    turns: int = 2
    learning_rate: float = 5e-5
    temperature: float = 1.0
    #: DVP's min-p α: sampling and the loss's log-probs use the pruned policy (``--dvp-alpha``). A policy
    #: this small derails at temperature 1 on the long tail of its softmax; α = 0.1 keeps it on its modes.
    dvp_alpha: float | None = 0.1
    max_new_tokens: int = 400
    eval_workers: int = 1
    #: The evaluator's master seed for RL's verdicts (None: secret, as in training; the CI test fixes it).
    eval_seed: int | None = None
    #: when a trajectory ends early (``never``; ``correct``: KernelGYM's episodes, where later turns
    #: have fewer members and TRLOO and turn-GRPO differ)
    stop_on: str = "never"
    #: more ``GRPOConfig`` fields. TRL's GRPOConfig turns gradient checkpointing on by default: the
    #: backward pass then recomputes every layer's forward, the same values (the same gradients, the
    #: same 2-step run to the printed digit, losses and texts) for memory this 0.8 M-parameter model does
    #: not need (docs/training.md, "Cost": the profile with it on and off).
    extra: dict[str, Any] = field(default_factory=lambda: {"gradient_checkpointing": False})


def run_rl(model_folder: Path, out: Path, problem_ids: list[str], *, advantage: str, seed: int,
           settings: RLSettings, evaluator: Any = None, shift: bool = True) -> dict[str, Any]:
    """One RL run through ``tritongym train --trainer trl``'s Python API; its per-step curve.

    `evaluator`: the verdicts' source, shared and left open (None: the run's own pool); `shift`: also
    measure `first_reply_shift` (two forward passes over every first reply)."""
    from tritongym.integrations.trl import TrlTrainConfig, run_trl_training

    config = TrlTrainConfig(model=str(model_folder), out=str(out), problems="builtin", only=problem_ids,
                            turns=settings.turns, steps=settings.steps, num_generations=settings.num_generations,
                            prompts_per_step=settings.prompts_per_step, max_new_tokens=settings.max_new_tokens,
                            learning_rate=settings.learning_rate, temperature=settings.temperature, device="cpu",
                            eval_workers=settings.eval_workers, dvp_alpha=settings.dvp_alpha,
                            advantage=advantage, seed=seed, eval_seed=settings.eval_seed,
                            stop_on=settings.stop_on, extra=dict(settings.extra))
    summary = run_trl_training(config, evaluator=evaluator)
    return {"advantage": advantage, "seed": seed, "summary": summary, "curve": step_curve(out),
            "turn_groups": turn_groups(out),
            "shift": first_reply_shift(model_folder, out) if shift else None}


def _violations(turn: dict[str, Any]) -> list[str]:
    result = turn.get("result") or {}
    return [str(v.get("code")) for v in result.get("violations") or []]


def step_curve(folder: Path) -> list[dict[str, Any]]:
    """Per training step, from ``trajectories.jsonl``: mean trajectory reward (Σ of turn rewards), the
    share of ``ok`` first and last turns, the share of turns with an integrity violation, and the
    turns rewarded despite a violation (``hacks``; each one is a finding)."""
    steps: dict[int, list[dict[str, Any]]] = {}
    for line in (folder / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        steps.setdefault(int(record["training_step"]), []).append(record)
    curve = []
    for step in sorted(steps):
        records = steps[step]
        turns = [t for r in records for t in r["turns"]]
        hacks = [{"problem_id": r["problem_id"], "sample": r["sample"], "turn": t["turn"], "reward": t["reward"],
                  "violations": _violations(t)} for r in records for t in r["turns"]
                 if t["reward"] > 0 and (_violations(t) or t["status"] == "integrity_violation")]
        curve.append({
            "step": step, "trajectories": len(records),
            "mean_reward": sum(sum(t["reward"] for t in r["turns"]) for r in records) / len(records),
            "ok_first": sum(r["turns"][0]["status"] == "ok" for r in records) / len(records),
            "ok_last": sum(r["turns"][-1]["status"] == "ok" for r in records) / len(records),
            "violation_share": sum(bool(_violations(t)) or t["status"] == "integrity_violation" for t in turns)
            / len(turns),
            "hacks": hacks,
        })
    return curve


def turn_groups(folder: Path) -> list[dict[str, float]]:
    """Per turn, over every (step, problem) group of ``trajectories.jsonl``: how many members reached
    the turn (mean over groups with at least one) and the share of those members that were alone
    there. With early stop later turns have fewer members; turn-GRPO's self-included mean gives a
    lone member advantage 0 and scales a group of N by (N − 1)/N, TRLOO by neither
    (benchmarks/trloo_vs_grpo.py measures the bias that follows)."""
    groups: dict[tuple[int, str], list[int]] = {}
    for line in (folder / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        groups.setdefault((int(record["training_step"]), record["problem_id"]), []).append(len(record["turns"]))
    depth = max(max(lengths) for lengths in groups.values())
    rows = []
    for turn in range(depth):
        sizes = [sum(length > turn for length in lengths) for lengths in groups.values()]
        reached = [n for n in sizes if n > 0]
        members = sum(reached)
        rows.append({"turn": turn, "groups": len(reached), "mean_members": members / len(reached) if reached else 0.0,
                     "alone_share": sum(1 for n in reached if n == 1) / members if members else 0.0})
    return rows


def window_mean(curve: list[dict[str, Any]], key: str, which: str, width: int) -> float:
    """Mean of `key` over the first or last `width` steps of `curve`."""
    part = curve[:width] if which == "first" else curve[-width:]
    return sum(point[key] for point in part) / len(part)


def first_reply_shift(model_folder: Path, rl_out: Path) -> dict[str, Any]:
    """How RL moved the policy on its own first replies.

    For every trajectory's first turn in ``rl_out/trajectories.jsonl``: the reply's log-probability
    (summed over its tokens and the end-of-turn token, in the context `KernelRollout` sampled it in:
    `encode_conversation`) under the pretrained policy (`model_folder`) and under the trained one
    (``rl_out/model``); the means of (after - before) over the replies the evaluator passed (``ok``)
    and over the others. The policy gradient raises the log-probability of replies with a positive
    advantage and lowers the others' (Williams 1992; TRLOO's advantage of a first turn is its return
    minus the other samples' mean), so a loop that learns moves the two means apart, whatever the
    starting reward: unlike the reward curve, this does not need room below the maximum to show.
    """
    import torch
    from transformers import AutoModelForCausalLM

    from tritongym.integrations.trl.train import load_tokenizer

    tokenizer = load_tokenizer(str(model_folder))
    conversations, passed = [], []
    for line in (rl_out / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        turn = json.loads(line)["turns"][0]
        conversations.append([*turn["messages"], {"role": "assistant", "content": turn["reply"]}])
        passed.append(turn["status"] == "ok")
    encoded = [encode_conversation(tokenizer, c) for c in conversations]

    def reply_logps(folder: Path) -> list[float]:
        model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
        values = []
        with torch.no_grad():
            for ids, mask in encoded:
                tokens = torch.tensor([ids])
                logps = torch.log_softmax(model(tokens).logits[0, :-1].float(), dim=-1)
                chosen = logps.gather(-1, tokens[0, 1:, None])[:, 0]
                values.append(float(chosen[torch.tensor(mask[1:], dtype=torch.bool)].sum()))
        return values

    shift = [after - before for before, after in zip(reply_logps(model_folder), reply_logps(rl_out / "model"),
                                                     strict=True)]
    ok = [d for d, p in zip(shift, passed, strict=True) if p]
    other = [d for d, p in zip(shift, passed, strict=True) if not p]
    return {"ok_replies": len(ok), "other_replies": len(other),
            "ok_shift": sum(ok) / len(ok) if ok else None, "other_shift": sum(other) / len(other) if other else None}


def plot(runs: list[dict[str, Any]], path: Path, title: str) -> None:
    """Mean reward and the share of ok first turns per step, one line per (advantage, seed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    # Dashed and hollow for turn_grpo: where the two estimators give the same curve, both stay visible.
    styles = {"trloo": dict(color="tab:blue", linestyle="-", marker="o", linewidth=2.5),
              "turn_grpo": dict(color="tab:orange", linestyle="--", marker="s", markerfacecolor="none")}
    for run in runs:
        xs = [p["step"] for p in run["curve"]]
        label = f"{run['advantage']} seed {run['seed']}"
        for ax, key in zip(axes, ("mean_reward", "ok_first"), strict=True):
            ax.plot(xs, [p[key] for p in run["curve"]], label=label, alpha=0.85, **styles[run["advantage"]])
    axes[0].set_ylabel("mean trajectory reward (sum over its turns)")
    axes[1].set_ylabel("share of ok first turns")
    for ax in axes:
        ax.set_xlabel("RL step (0 = the pretrained policy's rollouts)")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@dataclass
class Study:
    """What a run of this benchmark does (``--quick`` shrinks it; `main` maps the flags onto it)."""

    problems: tuple[str, ...] = PROBLEMS
    seeds: tuple[int, ...] = (0,)
    advantages: tuple[str, ...] = ("trloo",)
    epochs: int = 24
    pretrain_lr: float = 3e-3
    pretrain_seed: int = 0
    size: ModelSize = field(default_factory=ModelSize)
    #: RL's settings; ``max_new_tokens`` is set from the pretraining corpus's longest reply.
    rl: RLSettings = field(default_factory=lambda: RLSettings(eval_seed=0, eval_workers=2))
    #: measure `first_reply_shift` per run (two forward passes over every first reply)
    shift: bool = True


#: The CI size of the early-stop ablation (issue 48 §3, with benchmarks/reward_hacking.py's quick study
#: beside it in under 5 minutes): one problem, 20 pretraining epochs (the shortened run of
#: tests/integrations/test_trl_learning.py), both estimators on one seed, 4 steps of one group of 4.
QUICK = Study(problems=("02_leaky_relu",), seeds=(0,), advantages=("trloo", "turn_grpo"), epochs=20,
              rl=RLSettings(steps=4, prompts_per_step=1, learning_rate=2e-4, eval_seed=0, eval_workers=2,
                            stop_on="correct"),
              shift=False)


def run_profile(folder: Path, train_s: float) -> dict[str, float]:
    """Where one RL run's trainer time went, from its ``trajectories.jsonl``: sampling (one batched
    generation per step and turn), waiting for the verdicts (per step and turn, the slowest of the
    batch's concurrent evaluations, each timed from its call, a wait for a free worker included;
    ~0 for a cached text), and the rest (the update's forward and
    backward passes, TRL's bookkeeping)."""
    batches: dict[tuple[int, int], dict[str, float]] = {}
    for line in (folder / "trajectories.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        for turn in record["turns"]:
            batch = batches.setdefault((int(record["training_step"]), int(turn["turn"])),
                                       {"generation_s": 0.0, "evaluation_s": 0.0})
            batch["generation_s"] = max(batch["generation_s"], float(turn["generation_s"]))
            batch["evaluation_s"] = max(batch["evaluation_s"], float(turn["eval_s"]))
    generation = sum(b["generation_s"] for b in batches.values())
    evaluation = sum(b["evaluation_s"] for b in batches.values())
    return {"train_s": round(train_s, 1), "generation_s": round(generation, 1), "evaluation_s": round(evaluation, 1),
            "update_and_rest_s": round(train_s - generation - evaluation, 1)}


def run_study(study: Study, out: Path, *, log: Any = print) -> dict[str, Any]:
    """Corpus, pretraining, then one RL run per (seed, advantage); returns what results.json holds.

    Every verdict, the corpus's and RL's, comes from one `VerdictCache` under the fixed master seed
    ``study.rl.eval_seed`` (module docstring, "Cost")."""
    import torch

    from tritongym import EvalOptions
    from tritongym.env import PoolEvaluator
    from tritongym.tasks import builtin_suite

    if study.rl.eval_seed is None:
        raise ValueError("the study caches its verdicts, which needs a fixed evaluation seed (RLSettings.eval_seed)")
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    problems = [p for p in builtin_suite() if p.name in study.problems]
    if len(problems) != len(study.problems):
        raise ValueError(f"unknown problems in {study.problems}: builtin has {[p.name for p in builtin_suite()]}")
    options = EvalOptions(device="cpu", seed=study.rl.eval_seed)
    runs = []
    with PoolEvaluator(options, max_workers=study.rl.eval_workers) as pool:
        cache = VerdictCache(pool, options)
        corpus = build_corpus(problems, CachedVerdicts(cache))
        corpus_s = time.monotonic() - started
        log(f"corpus: {len(corpus.conversations)} conversations from {len(corpus.variants)} evaluated variants "
            f"({corpus_s:.0f} s)")
        model_folder = out / "pretrained"
        pretraining = pretrain(corpus, model_folder, size=study.size, epochs=study.epochs, lr=study.pretrain_lr,
                               seed=study.pretrain_seed, log=log)
        settings = replace(study.rl, max_new_tokens=pretraining["reply_tokens_max"] + 32)
        for seed in study.seeds:
            for advantage in study.advantages:
                run_started = time.monotonic()
                evaluations = cache.evaluations
                folder = out / f"{advantage}-seed{seed}"
                run = run_rl(model_folder, folder, [p.problem_id for p in problems], advantage=advantage, seed=seed,
                             settings=settings, evaluator=CachedVerdicts(cache), shift=study.shift)
                run["wall_s"] = round(time.monotonic() - run_started, 1)
                run["new_evaluations"] = cache.evaluations - evaluations
                run["profile"] = run_profile(folder, run["summary"]["wall_s"])
                runs.append(run)
                curve = run["curve"]
                reward = [window_mean(curve, "mean_reward", which, 3) for which in ("first", "last")]
                ok_first = [window_mean(curve, "ok_first", which, 3) for which in ("first", "last")]
                shift = run["shift"]
                shift_text = "" if shift is None else (
                    f", first-reply log-prob shift: ok "
                    f"{shift['ok_shift'] if shift['ok_shift'] is None else round(shift['ok_shift'], 2)} "
                    f"({shift['ok_replies']}), others "
                    f"{shift['other_shift'] if shift['other_shift'] is None else round(shift['other_shift'], 2)} "
                    f"({shift['other_replies']})")
                log(f"{advantage} seed {seed}: reward {reward[0]:.3f} -> {reward[1]:.3f}, ok first turns "
                    f"{ok_first[0]:.2f} -> {ok_first[1]:.2f}{shift_text}, hacks {sum(len(p['hacks']) for p in curve)} "
                    f"({run['wall_s']:.0f} s: {run['profile']}, {run['new_evaluations']} new evaluations)")
    results = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": _commit(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "study": asdict(study), "problems": [p.problem_id for p in problems],
        "variants": [{k: v for k, v in asdict(variant).items() if k != "code"} for variant in corpus.variants],
        "pretraining": pretraining, "rl": asdict(settings), "runs": runs,
        "cache": {"evaluations": cache.evaluations, "hits": cache.hits, "eval_s": round(cache.eval_s, 1)},
        "timings": {"corpus_s": round(corpus_s, 1), "pretrain_s": pretraining["wall_s"],
                    "wall_s": round(time.monotonic() - started, 1)},
    }
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return results


def study_parser(doc: str, *, out: str, quick: str, seeds: str) -> argparse.ArgumentParser:
    """The flags both studies (this one and benchmarks/reward_hacking.py) share: --out, --quick, --seeds,
    --plot and --replot; `quick` and `seeds` are the help texts of the two that differ."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--out", default=out, help="folder for the model, the runs and results.json")
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--seeds", default=None, help=seeds)
    parser.add_argument("--plot", default=None, help="write the PNG here")
    parser.add_argument("--replot", default=None, metavar="RESULTS_JSON",
                        help="only redraw --plot from a results.json this script wrote")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = study_parser(
        __doc__, out="runs/learning",
        quick=f"the CI size of the early-stop ablation: problems {','.join(QUICK.problems)}, {QUICK.epochs} "
              f"pretraining epochs, seed {','.join(map(str, QUICK.seeds))}, {QUICK.rl.steps} RL steps, both "
              "estimators, --stop-on correct",
        seeds="comma-separated RL seeds (each a run; same pretrained model; default 0, with --quick "
              f"{','.join(map(str, QUICK.seeds))})")
    parser.add_argument("--pretrain-seed", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=None, help="pretraining epochs over the corpus")
    parser.add_argument("--pretrain-lr", type=float, default=None)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--layers", type=int, default=None)
    parser.add_argument("--steps", type=int, default=None, help="RL steps per run")
    parser.add_argument("--num-generations", type=int, default=None)
    parser.add_argument("--prompts-per-step", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None, help="RL learning rate")
    parser.add_argument("--ablation", action="store_true", help="also run advantage=turn_grpo on the same seeds")
    parser.add_argument("--stop-on", default=None, choices=("never", "correct"),
                        help="end a trajectory at its first correct turn (correct: KernelGYM's episodes, where "
                             "the two estimators differ) or never (the default; --quick: correct)")
    parser.add_argument("--eval-seed", type=int, default=None,
                        help="the evaluator's fixed master seed, under which verdicts are cached (default 0)")
    parser.add_argument("--eval-workers", type=int, default=None,
                        help="concurrent evaluations of the texts not yet cached (default 2)")
    args = parser.parse_args(argv)
    if args.replot:
        results = json.loads(Path(args.replot).read_text(encoding="utf-8"))
        plot(results["runs"], Path(args.plot or "learning.png"),
             f"{results['date']}, commit {results['commit']}, {results['machine'][:40]}")
        return 0
    study = QUICK if args.quick else Study()
    rl = {name: getattr(args, flag) for name, flag in (
        ("steps", "steps"), ("num_generations", "num_generations"), ("prompts_per_step", "prompts_per_step"),
        ("learning_rate", "lr"), ("stop_on", "stop_on"), ("eval_seed", "eval_seed"),
        ("eval_workers", "eval_workers")) if getattr(args, flag) is not None}
    size = {name: getattr(args, name) for name in ("hidden", "layers") if getattr(args, name) is not None}
    changes: dict[str, Any] = {name: getattr(args, flag) for name, flag in (
        ("epochs", "epochs"), ("pretrain_lr", "pretrain_lr"), ("pretrain_seed", "pretrain_seed"))
        if getattr(args, flag) is not None}
    if args.seeds:
        changes["seeds"] = tuple(int(s) for s in args.seeds.split(","))
    if args.ablation:
        changes["advantages"] = ("trloo", "turn_grpo")
    study = replace(study, rl=replace(study.rl, **rl), size=replace(study.size, **size), **changes)
    out = Path(args.out)
    results = run_study(study, out, log=lambda m: print(m, flush=True))
    results["command"] = "python benchmarks/learning.py " + " ".join(argv if argv is not None else sys.argv[1:])
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        plot(results["runs"], Path(args.plot), f"{results['date']}, commit {results['commit']}, "
             f"{results['machine'][:40]}")
    print(f"wrote {out / 'results.json'} ({results['timings']['wall_s']:.0f} s: {results['timings']})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
