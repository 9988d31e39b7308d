"""A multi-turn ``rollout_func`` for TRL's ``GRPOTrainer`` built on `KernelEnv`.

For each prompt TRL hands over, one trajectory of up to ``turns`` turns::

    generate a reply (token ids, with their sampling log-probabilities)
    → extract the code → evaluate it (the env's evaluator: the warm, sandboxed pool)
    → the env's feedback message, appended as chat-template tokens with env_mask 0
    → generate the next reply from the whole conversation so far, ...

Token in, token out: the context of turn k+1 is exactly ``prompt_ids + completion_ids`` so far, so
the log-probabilities TRL recomputes are those of the tokens the model saw. Returned per row:
``prompt_ids``, ``completion_ids`` (all turns and the feedback between them), ``logprobs`` (0.0
on feedback tokens), ``env_mask`` (1 on the model's tokens, 0 on feedback tokens), and, forwarded
by TRL to the reward functions and kept in the trainer's inputs: ``turn_rewards`` (one per turn),
``turn_status`` (verdict status or ``void``), ``turn_spans`` (each turn's ``[start, end)`` in
``completion_ids``) and ``turn_keep_prob`` (the PRS keep probability of each turn; 1 when coverage
is unknown, i.e. without a GPU's profile).

TRL gotcha (trl 1.16): prompts arrive already repeated ``num_generations`` times, consecutively;
the rollout returns exactly one trajectory per received prompt, and a group is a run of
``num_generations`` rows (what TRL's own advantage code assumes).

With ``out``, every trajectory is also written to ``out/trajectories.jsonl`` in the agent runner's
schema (`tritongym.env.store`), so ``tritongym report`` and the exports read a training run too.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tritongym.env.core import KernelEnv, _load_problems, success_rule
from tritongym.env.evaluators import Evaluator, PoolEvaluator
from tritongym.env.extract import CodeExtractor
from tritongym.env.records import run_provenance, trajectory_record, turn_record
from tritongym.env.store import TrajectoryStore, load_trajectories

if TYPE_CHECKING:
    from tritongym.evaluator import EvalOptions
    from tritongym.tasks import Problem

__all__ = ["Generation", "KernelRollout", "sample_with_model"]


@dataclass
class Generation:
    """One generated reply: its token ids (the end-of-turn token included when the model emitted
    it) and the sampling log-probability of each (None when the generator cannot give them)."""

    token_ids: list[int]
    logprobs: list[float] | None = None


#: ``(trainer, contexts, max_new_tokens) -> one Generation per context``; a context is token ids.
Generator = Callable[[Any, list[list[int]], int], list[Generation]]


def _tokenizer_of(trainer: Any) -> Any:
    processing = trainer.processing_class
    return getattr(processing, "tokenizer", processing)


def sample_with_model(trainer: Any, contexts: list[list[int]], max_new_tokens: int) -> list[Generation]:
    """Sample one reply per context from the trainer's own model (``generate``, no vLLM), with
    the trainer's temperature / top-p / top-k / min-p, stopping at the chat template's turn tokens
    (EOS, and the token that opens a message; `tritongym.integrations.chat_stops`), as Dr.Kernel's
    rollout does.

    Meant for one process or plain data parallelism; with sharded parameters (ZeRO-3, FSDP) or a
    vLLM server, pass `KernelRollout` a ``generator`` that talks to the inference engine."""
    import torch

    tokenizer = _tokenizer_of(trainer)
    model = trainer.accelerator.unwrap_model(trainer.model)
    args = trainer.args
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stops = _stop_ids(tokenizer)
    width = max(len(c) for c in contexts)
    device = next(model.parameters()).device
    input_ids = torch.full((len(contexts), width), pad, dtype=torch.long)
    attention = torch.zeros((len(contexts), width), dtype=torch.long)
    for i, ids in enumerate(contexts):  # left padding
        input_ids[i, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention[i, width - len(ids):] = 1
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = model.generate(input_ids=input_ids.to(device), attention_mask=attention.to(device),
                                 max_new_tokens=max_new_tokens, do_sample=True, temperature=args.temperature,
                                 top_p=args.top_p, top_k=args.top_k or 0, min_p=args.min_p,
                                 pad_token_id=pad, eos_token_id=stops,
                                 output_scores=True, return_dict_in_generate=True)
    finally:
        model.train(was_training)
    new = out.sequences[:, width:]
    # scores: one [B, V] tensor per generated position, after temperature / top-k / top-p / min-p
    logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)  # [B, N, V]
    chosen = logps.gather(-1, new.unsqueeze(-1)).squeeze(-1)  # [B, N]
    generations = []
    for i in range(len(contexts)):
        ids = new[i].tolist()
        end = next((j + 1 for j, token in enumerate(ids) if token in stops), len(ids))  # keep the stop token
        generations.append(Generation(ids[:end], chosen[i, :end].tolist()))
    return generations


def _stop_ids(tokenizer: Any) -> list[int]:
    from tritongym.integrations.chat_stops import chat_template_stop_ids

    try:
        return chat_template_stop_ids(tokenizer)
    except ValueError:  # a template that does not render contents as given: EOS only
        return [tokenizer.eos_token_id]


class KernelRollout:
    """TRL ``rollout_func``: multi-turn kernel-writing episodes on `KernelEnv` (module docstring).

    Args:
        problems: a problem-set spec (``"builtin"``, a path) or `Problem`s; the dataset's prompts
            must be this rollout's `prompt` of them (`dataset_rows` builds such rows).
        turns: turns per trajectory (the env's ``max_turns``).
        evaluator: an `Evaluator` to share (None: a `PoolEvaluator` with `options`, `workers` slots).
        options: `EvalOptions` of the default evaluator.
        workers: concurrent evaluations of the default evaluator.
        feedback: the env's feedback level (``minimal``, ``standard``, ``full``) or policy.
        extract: the env's code extractor (``last``, ``first``, ``whole`` or a callable).
        max_new_tokens: tokens per turn (None: the trainer's ``max_completion_length``).
        generator: how replies are produced (default `sample_with_model`; a scripted generator in
            tests, or a client of an inference server).
        out: a run folder for ``trajectories.jsonl`` (None: not written).
        provenance: extra JSON-ready facts recorded with each trajectory (model name, ...).
        success: when a trajectory ends before `turns`: the env's success rule (``never``,
            ``correct``: KernelGYM's episodes, which stop at the first correct kernel, ``speedup:X``);
            later turns then have fewer members, where TRLOO and turn-GRPO differ.

    The conversation is kept whole (the env's ``full`` history): tokens are only ever appended,
    which is what makes the env mask line up with what the model saw.
    """

    def __init__(self, problems: Sequence[Problem] | str, *, turns: int = 2, evaluator: Evaluator | None = None,
                 options: EvalOptions | None = None, workers: int = 1, feedback: str = "standard",
                 extract: str | CodeExtractor = "last", max_new_tokens: int | None = None,
                 generator: Generator | None = None, out: str | None = None,
                 provenance: dict[str, Any] | None = None, success: str = "never") -> None:
        if not isinstance(turns, int) or turns < 1:
            raise ValueError(f"turns must be an integer >= 1, got {turns!r}")
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        success_rule(success)  # ValueError now for an unknown rule, not at the first rollout
        self.success = success
        self.problems = _load_problems(problems)
        self.turns = turns
        self._owns_evaluator = evaluator is None
        self.evaluator: Evaluator = evaluator if evaluator is not None else PoolEvaluator(options, max_workers=workers)
        self.feedback = feedback
        self.extract = extract
        self.max_new_tokens = max_new_tokens
        self.generator: Generator = generator or sample_with_model
        self.store = TrajectoryStore(out) if out is not None else None
        self.extra_provenance = dict(provenance or {})
        self._samples: dict[str, int] = {}  # the next sample index per problem (continues a run folder)
        if out is not None:
            for record in load_trajectories(out):
                pid = record["problem_id"]
                self._samples[pid] = max(self._samples.get(pid, 0), int(record["sample"]) + 1)
        self._by_prompt = {self._key(self.prompt(p)): p for p in self.problems}
        self._suffix_cache: dict[int, tuple[str, str]] = {}
        self.__name__ = "tritongym_kernel_rollout"

    # -- dataset ----------------------------------------------------------------------------------

    def make_env(self, problem: Problem | None = None) -> KernelEnv:
        return KernelEnv([problem] if problem is not None else self.problems, evaluator=self.evaluator,
                         max_turns=self.turns, feedback=self.feedback, history="full", extract=self.extract,
                         success=self.success)

    def prompt(self, problem: Problem) -> list[dict[str, str]]:
        """The chat messages of `problem`'s first turn (system rules and the task), as the env renders them."""
        messages, _ = self.make_env(problem).reset(options={"problem": problem})
        return messages

    def dataset_rows(self) -> list[dict[str, Any]]:
        """One row per problem: ``prompt`` (chat messages) and ``problem_id``, for ``datasets.Dataset.from_list``."""
        return [{"prompt": self.prompt(p), "problem_id": p.problem_id} for p in self.problems]

    @staticmethod
    def _key(messages: Any) -> str:
        return json.dumps(messages, sort_keys=True, ensure_ascii=False)

    def problem_of(self, prompt: Any) -> Problem:
        try:
            return self._by_prompt[self._key(prompt)]
        except KeyError:
            raise ValueError("a prompt TRL passed is not one this KernelRollout rendered; build the training "
                             "dataset with KernelRollout.dataset_rows() (same problems, templates and "
                             "feedback settings)") from None

    # -- chat-template pieces ---------------------------------------------------------------------

    def _turn_pieces(self, tokenizer: Any) -> tuple[str, str]:
        """(text that closes an assistant turn, text between a user message's content and the next
        assistant reply), read off the tokenizer's own chat template."""
        cached = self._suffix_cache.get(id(tokenizer))
        if cached is not None:
            return cached
        marker_a, marker_u = "\u2063A\u2063", "\u2063U\u2063"
        base = [{"role": "user", "content": "x"}, {"role": "assistant", "content": marker_a}]
        prefix = tokenizer.apply_chat_template(base, tokenize=False)
        full = tokenizer.apply_chat_template(base + [{"role": "user", "content": marker_u}],
                                             add_generation_prompt=True, tokenize=False)
        if not full.startswith(prefix) or marker_a not in prefix or marker_u not in full:
            raise ValueError("the tokenizer's chat template does not append turns (rendering a conversation "
                             "with one more message changes the earlier text); KernelRollout needs an "
                             "append-only template")
        close = prefix[prefix.rindex(marker_a) + len(marker_a):]
        user_open, _, user_close = full[len(prefix):].partition(marker_u)
        pieces = (close + user_open, user_close)
        self._suffix_cache[id(tokenizer)] = pieces
        return pieces

    def _feedback_ids(self, tokenizer: Any, reply_ids: list[int], message: str) -> list[int]:
        """Tokens between a reply and the next one: the end of the assistant turn (less the EOS the
        model already emitted), the user message with the feedback, the next assistant header."""
        before, after = self._turn_pieces(tokenizer)
        eos_text = tokenizer.decode([tokenizer.eos_token_id]) if tokenizer.eos_token_id is not None else ""
        if reply_ids and reply_ids[-1] == tokenizer.eos_token_id and eos_text and before.startswith(eos_text):
            before = before[len(eos_text):]
        return tokenizer(before + message + after, add_special_tokens=False)["input_ids"]

    # -- the rollout --------------------------------------------------------------------------------

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        tokenizer = _tokenizer_of(trainer)
        max_new = self.max_new_tokens or trainer.args.max_completion_length
        stops = set(_stop_ids(tokenizer))
        problems = [self.problem_of(p) for p in prompts]
        envs = [self.make_env(p) for p in problems]
        observations = [env.reset(options={"problem": p})[0] for env, p in zip(envs, problems, strict=True)]
        prompt_ids = [list(tokenizer.apply_chat_template(obs, add_generation_prompt=True, tokenize=True,
                                                         return_dict=False)) for obs in observations]
        n = len(prompts)
        completion: list[list[int]] = [[] for _ in range(n)]
        env_mask: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        have_logprobs = True
        spans: list[list[list[int]]] = [[] for _ in range(n)]
        records: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        stop: list[str] = ["budget"] * n
        active = list(range(n))
        while active:
            contexts = [prompt_ids[i] + completion[i] for i in active]
            started = time.monotonic()
            generations = self.generator(trainer, contexts, max_new)
            generation_s = time.monotonic() - started
            if len(generations) != len(active):
                raise ValueError(f"the generator returned {len(generations)} replies for {len(active)} contexts")
            replies = [tokenizer.decode(g.token_ids, skip_special_tokens=True) for g in generations]
            for i, g in zip(active, generations, strict=True):
                start = len(completion[i])
                completion[i] += g.token_ids
                env_mask[i] += [1] * len(g.token_ids)
                if g.logprobs is None:
                    have_logprobs = False
                else:
                    logprobs[i] += g.logprobs
                spans[i].append([start, len(completion[i])])
            steps = asyncio.run(self._step_all([envs[i] for i in active], replies))
            still = []
            for i, g, messages, (obs, _reward, terminated, truncated, info), ctx in zip(
                    active, generations, [observations[i] for i in active], steps, contexts, strict=True):
                turn = envs[i].turns[-1]
                records[i].append(turn_record(
                    turn, messages, info, generation_s=generation_s, wall_s=generation_s + turn.eval_s,
                    usage={"prompt_tokens": len(ctx), "completion_tokens": len(g.token_ids)},
                    finish_reason="stop" if g.token_ids and g.token_ids[-1] in stops else "length"))
                observations[i] = obs
                if terminated or truncated:
                    stop[i] = "success" if terminated else "budget"
                    continue
                feedback = self._feedback_ids(tokenizer, g.token_ids, turn.message)
                completion[i] += feedback
                env_mask[i] += [0] * len(feedback)
                logprobs[i] += [0.0] * len(feedback)
                still.append(i)
            active = still
        turn_rewards = [[t.reward for t in env.turns] for env in envs]
        turn_status = [[t.status for t in env.turns] for env in envs]
        keep = [[self._keep_probability(t) for t in env.turns] for env in envs]
        if self.store is not None:
            self._write(trainer, problems, envs, records, stop)
        return {"prompt_ids": prompt_ids, "completion_ids": completion,
                "logprobs": logprobs if have_logprobs else None, "env_mask": env_mask,
                "turn_rewards": turn_rewards, "turn_status": turn_status, "turn_spans": spans,
                "turn_keep_prob": keep}

    @staticmethod
    async def _step_all(envs: list[KernelEnv], replies: list[str]) -> list[tuple[Any, ...]]:
        return list(await asyncio.gather(*(env.astep(reply) for env, reply in zip(envs, replies, strict=True))))

    @staticmethod
    def _keep_probability(turn: Any) -> float:
        """PRS keep probability (Dr.Kernel): 1 for incorrect turns and when coverage is unmeasured."""
        from tritongym.evaluator import prs_keep_probability

        if turn.result is None:
            return 1.0
        p = prs_keep_probability(turn.result)
        return 1.0 if p is None else p

    # -- trajectories -----------------------------------------------------------------------------

    def provenance(self) -> dict[str, Any]:
        env = self.make_env()
        return {**run_provenance(env, self.evaluator),
                "feedback": {"level": self.feedback if isinstance(self.feedback, str) else "custom"},
                "trainer": "trl", **self.extra_provenance}

    def _write(self, trainer: Any, problems: list[Problem], envs: list[KernelEnv],
               records: list[list[dict[str, Any]]], stop: list[str]) -> None:
        provenance = self.provenance()
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        for problem, env, turns, reason in zip(problems, envs, records, stop, strict=True):
            sample = self._samples.get(problem.problem_id, 0)
            self._samples[problem.problem_id] = sample + 1
            self.store.append_trajectory(trajectory_record(
                problem, env, sample=sample, mode="sequential", stop_reason=reason, turns=turns,
                provenance=provenance, training_step=step))

    def close(self) -> None:
        """Release the evaluator's pool when this rollout made it."""
        close = getattr(self.evaluator, "close", None)
        if self._owns_evaluator and close is not None:
            close()
