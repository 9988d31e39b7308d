"""verl agent loop ``tritongym_kernel``: multi-turn kernel writing against tritongym's evaluator.

One trajectory is one ``tritongym.env.KernelEnv`` episode, token in / token out:

1. the task prompt is rendered by the environment's templates and tokenized with verl's
   Continuous Token builder (``ct_build_initial_tokens``);
2. each turn the model generates through verl's server manager
   (``server_manager.generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput``);
   its tokens are appended with ``response_mask`` 1 and the reply text goes to ``KernelEnv.astep``,
   which extracts the code (``tritongym.env.extract``), evaluates it and renders the feedback
   (``tritongym.env.feedback``);
3. unless the episode ended, the feedback is appended as a user message with ``response_mask`` 0
   (``ct_merge_context_msg``) and the next turn starts.

Rewards: each turn's reward is the verdict's reward (Dr.Kernel's PR: correctness, speedup and
coverage weights of ``EvalOptions.reward``), kept per turn in ``extra_fields["turn_scores"]``.
verl 0.9.1's agent-loop output carries one scalar, ``reward_score`` (here the sum over turns), and
verl turns it into token scores ``rm_scores`` (then ``token_level_rewards``) with the whole score on
the last response token. ``trloo`` needs each turn's reward on *that turn's* last token:

* verl's default V1 trainer (``trainer.use_v1=true``) builds ``rm_scores`` with
  ``AgentLoopOutput.as_dict()``; the loop returns a `KernelAgentLoopOutput`, whose ``as_dict``
  places the per-turn rewards (``place_turn_rewards``). Nothing to configure.
* the legacy trainer (``trainer.use_v1=false``) pads outputs in ``AgentLoopWorker._postprocess``;
  select ``TurnRewardAgentLoopManager`` with the override
  ``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=`` followed by
  ``tritongym.integrations.verl.agent_loop.TurnRewardAgentLoopManager``; its workers rewrite
  ``rm_scores`` the same way. (Do not set it with V1: V1 needs its TransferQueue manager.)

Outcome estimators (``grpo``, ``rloo``) see the same total either way.

For Dr.Kernel's PRS the V1 output also carries two token fields, ``tritongym_turn_numbers`` (turn k
on its model tokens, 0 on feedback) and ``tritongym_prs_keep_probability`` (each turn's PRS keep
probability on its tokens); the ``tritongym`` trainer (``trainer.v1.trainer_mode=tritongym``) draws
and applies PRS from them before the advantage step (``tritongym.integrations.verl.trainer``).

Options (keyword arguments of the agent loop; set them in an ``agent_loop_config_path`` YAML entry
``{name: tritongym_kernel, _target_: tritongym.integrations.verl.agent_loop.KernelAgentLoop, ...}``):
``problems`` (a problem-set spec, default ``builtin``), ``max_turns`` (3), ``feedback`` (``standard``),
``history`` (only ``full``: verl keeps one append-only token row per trajectory), ``stop_token_ids``
(``chat_template``: stop at the chat template's turn tokens and EOS, as Dr.Kernel's rollout does,
`tritongym.integrations.chat_stops`; a list of ids; or null: the engine's EOS only), ``max_turn_tokens``
(a cap on each turn's generation, sent as ``max_tokens``; every turn is also capped by what is left of
``rollout.response_length``), ``extract``
(``last``), ``success`` (``never``), ``evaluator`` (``local``: the in-process ``LocalPool``; ``ray``:
a ``RayPool`` in verl's Ray cluster, ``workers`` actors per agent-loop worker process;
``http(s)://host:port``: the tritongym service, bearer token from ``TRITONGYM_TOKEN``), ``workers``
(pool slots), ``eval_options`` (``EvalOptions`` fields; ``reward`` as a dict of ``RewardConfig``).

Each dataset row names its problem in ``extra_info["problem"]`` (an id or name in ``problems``), or
carries the source in ``extra_info["problem_source"]``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any
from uuid import uuid4

import numpy as np
import torch
from torch import Tensor
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopOutput,
    AgentLoopWorker,
    register,
)
from verl.protocol import DataProto
from verl.utils.profiler import simple_timer

from tritongym.env import FullHistory, KernelEnv, PoolEvaluator, parse_history
from tritongym.integrations.verl.advantages import turn_numbers

__all__ = ["TURN_KEEP_PROBABILITY", "TURN_NUMBERS", "KernelAgentLoop", "KernelAgentLoopOutput",
           "TurnRewardAgentLoopManager", "TurnRewardAgentLoopWorker", "place_turn_rewards"]

TURN_REWARDS = "turn_scores"  # verl's own extra-field name for per-turn scores (one per model turn here)
# Token fields the V1 trainer stores in its TransferQueue beside rm_scores (read by the tritongym trainer):
TURN_NUMBERS = "tritongym_turn_numbers"  # k ≥ 1 on turn k's model tokens, 0 on feedback
TURN_KEEP_PROBABILITY = "tritongym_prs_keep_probability"  # PRS keep probability of the token's turn (1 on feedback)

_shared_lock = threading.Lock()
_shared_evaluators: dict[tuple[Any, ...], Any] = {}
_shared_problems: dict[str, list[Any]] = {}


def _eval_options(spec: dict[str, Any] | None) -> Any:
    from tritongym.evaluator import EvalOptions
    from tritongym.evaluator.reward import RewardConfig

    fields = dict(spec or {})
    if isinstance(fields.get("reward"), dict):
        fields["reward"] = RewardConfig(**fields["reward"])
    for key in ("input_families", "disabled_checks"):
        if isinstance(fields.get(key), list):
            fields[key] = tuple(fields[key])
    return EvalOptions(**fields)


def shared_evaluator(kind: str, workers: int | None, options: Any) -> Any:
    """One evaluator per (kind, workers, options) and process: verl builds an agent loop per sample."""
    key = (kind, workers, repr(options))
    with _shared_lock:
        evaluator = _shared_evaluators.get(key)
        if evaluator is None:
            if kind in ("local", "ray"):
                from tritongym.execution import make_pool

                evaluator = PoolEvaluator(options, pool=make_pool(kind, workers))
            elif kind.startswith(("http://", "https://")):
                from tritongym.service import Client

                # The service queues and runs the jobs; these threads only wait on its answers.
                client = Client(kind, token=os.environ.get("TRITONGYM_TOKEN"))  # the bearer token, if any
                evaluator = PoolEvaluator(options, max_workers=64, evaluate_fn=client.evaluate)
            else:
                raise ValueError(
                    f"tritongym_kernel: evaluator must be 'local', 'ray' or an http(s):// URL of a tritongym "
                    f"service, got {kind!r}"
                )
            _shared_evaluators[key] = evaluator
        return evaluator


def _problem_set(spec: str) -> list[Any]:
    with _shared_lock:
        if spec not in _shared_problems:
            from tritongym.tasks import load_problems

            _shared_problems[spec] = load_problems(spec)
        return _shared_problems[spec]


def _resolve_problem(extra_info: Any, problems: str) -> Any:
    from tritongym.tasks import Problem

    info = extra_info if isinstance(extra_info, dict) else {}
    name = info.get("problem")
    source = info.get("problem_source")
    if source:
        return Problem.from_source(str(source), name=str(name or "problem"))
    if name is None:
        raise ValueError(
            "tritongym_kernel: the dataset row names no problem; put its id or name in extra_info['problem'] "
            "(or its source in extra_info['problem_source'])"
        )
    for problem in _problem_set(problems):
        if str(name) in (problem.problem_id, problem.name):
            return problem
    raise ValueError(f"tritongym_kernel: no problem {name!r} in the problem set {problems!r}")


class KernelAgentLoopOutput(AgentLoopOutput):
    """``AgentLoopOutput`` whose token scores put each turn's reward on the turn's last token.

    verl's V1 trainer stores ``as_dict()`` in its TransferQueue; ``rm_scores`` there becomes
    ``token_level_rewards``.
    """

    def as_dict(self) -> dict[str, Any]:
        output = super().as_dict()
        rewards = self.extra_fields.get(TURN_REWARDS)
        if "rm_scores" in output and rewards:
            output["rm_scores"] = place_turn_rewards(output["response_mask"][None], [rewards],
                                                     output["rm_scores"][None])[0]
        # Per-token turn layout for the ``tritongym`` trainer's PRS (tritongym.integrations.verl.trainer).
        numbers = turn_numbers(output["response_mask"][None])[0]
        keep = [_keep_probability(t) for t in self.extra_fields.get("tritongym_turns", [])]
        num_turns = int(numbers.max().item()) if numbers.numel() else 0
        if len(keep) != num_turns:
            raise ValueError(f"{len(keep)} turn records for {num_turns} model turns in response_mask")
        table = torch.tensor([1.0, *keep], dtype=torch.float32)  # index 0: feedback tokens, never dropped
        output[TURN_NUMBERS] = numbers
        output[TURN_KEEP_PROBABILITY] = table[numbers]
        return output


def _keep_probability(turn: dict[str, Any]) -> float:
    p = turn.get("prs_keep_probability")
    return 1.0 if p is None else float(p)  # unmeasured coverage (no GPU) or no verdict: PRS keeps the turn


@register("tritongym_kernel")
class KernelAgentLoop(AgentLoopBase):
    """Multi-turn kernel writing: generate → extract → evaluate → feedback (masked) → next turn."""

    def __init__(self, *args: Any, problems: str = "builtin", max_turns: int = 3, feedback: str = "standard",
                 history: str = "full", max_turn_tokens: int | None = None, extract: str = "last",
                 success: str | None = None, stop_token_ids: str | list[int] | None = None,
                 evaluator: str = "local", workers: int | None = None,
                 eval_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(parse_history(history), FullHistory):
            raise ValueError(
                f"tritongym_kernel: history={history!r} rewrites earlier turns, but verl keeps one append-only "
                "token row per trajectory; use history='full' (Dr.Kernel's setting)"
            )
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"tritongym_kernel: max_turns must be an integer >= 1, got {max_turns!r}")
        if max_turn_tokens is not None and (not isinstance(max_turn_tokens, int) or max_turn_tokens < 1):
            raise ValueError(
                f"tritongym_kernel: max_turn_tokens must be a positive integer or null, got {max_turn_tokens!r}")
        self.problems = problems
        self.max_turn_tokens = max_turn_tokens
        self.stop_token_ids = _stop_token_ids(stop_token_ids, self.tokenizer)
        self.env_options = {"max_turns": max_turns, "feedback": feedback, "history": history, "extract": extract,
                            "success": success}
        self.options = _eval_options(eval_options)
        self.evaluator = shared_evaluator(evaluator, workers, self.options)
        self.response_length = self.rollout_config.response_length

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        problem = _resolve_problem(kwargs.get("extra_info"), self.problems)
        env = KernelEnv(problem, evaluator=self.evaluator, options=self.options, **self.env_options)
        messages, _ = env.reset(options={"problem": problem})
        prompt_ids = await self.ct_build_initial_tokens(messages)
        runtime = list(prompt_ids)
        mask: list[int] = []
        logprobs: list[float] | None = None
        request_id = uuid4().hex
        timing: dict[str, float] = {"generate_sequences": 0.0, "tool_calls": 0.0}
        turn_rewards: list[float] = []
        turns: list[dict[str, Any]] = []
        num_messages = len(messages)
        server_fields: dict[str, Any] = {}
        while True:
            step_timing: dict[str, float] = {}
            budget = self.response_length - len(mask)  # ≥ 1: checked before the feedback was appended
            params = {**sampling_params, "max_tokens": min(budget, self.max_turn_tokens or budget)}
            if self.stop_token_ids:
                params["stop_token_ids"] = sorted(set(params.get("stop_token_ids") or []) | set(self.stop_token_ids))
            with simple_timer("generate_sequences", step_timing):
                output = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=runtime, sampling_params=params)
            timing["generate_sequences"] += step_timing["generate_sequences"]
            if not output.token_ids:
                # A turn without tokens has no run of response_mask to carry its reward.
                raise RuntimeError(f"tritongym_kernel: the server returned no tokens for turn {len(turns) + 1} "
                                   f"(stop_reason={output.stop_reason!r})")
            # The server's fields (weight versions for verl's staleness tags): the first turn's, with
            # the last turn's max_global_steps, as verl's own tool agent loop keeps them.
            if not server_fields:
                server_fields.update(output.extra_fields)
            elif output.extra_fields.get("max_global_steps") is not None:
                server_fields["max_global_steps"] = output.extra_fields["max_global_steps"]
            if output.log_probs and logprobs is None and not mask:
                logprobs = []
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                runtime, output.token_ids, mask, logprobs, assistant_logprobs=output.log_probs or None)
            runtime = merged.token_ids
            reply = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
            previous = messages + [{"role": "assistant", "content": reply}]
            with simple_timer("tool_calls", step_timing):
                messages, reward, terminated, truncated, info = await env.astep(reply)
            timing["tool_calls"] += step_timing["tool_calls"]
            num_messages += 1
            turn_rewards.append(float(reward))
            turns.append(_turn_record(info, reward, len(output.token_ids)))
            if terminated or truncated or len(mask) >= self.response_length:
                break
            merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
                previous, messages, runtime, mask, logprobs)
            if len(new_mask) >= self.response_length:
                break  # no room for another model token after the feedback
            runtime, mask, logprobs = merged.token_ids, new_mask, new_logprobs
            num_messages += 1
        response_ids = runtime[len(runtime) - len(mask):]
        cut = self.response_length
        extra = {
            **server_fields,
            TURN_REWARDS: turn_rewards,
            "tritongym_turns": turns,
            "reward_extra_info": _trajectory_metrics(turns),
        }
        return KernelAgentLoopOutput(
            prompt_ids=runtime[: len(runtime) - len(mask)],
            response_ids=response_ids[:cut],
            response_mask=mask[:cut],
            response_logprobs=logprobs[:cut] if logprobs else None,
            reward_score=float(sum(turn_rewards)),
            num_turns=num_messages,
            metrics=timing,
            extra_fields=extra,
        )


def _stop_token_ids(spec: str | list[int] | None, tokenizer: Any) -> list[int]:
    if spec is None:
        return []
    if spec == "chat_template":
        from tritongym.integrations.chat_stops import chat_template_stop_ids

        return chat_template_stop_ids(tokenizer)
    if isinstance(spec, (list, tuple)) and all(isinstance(i, int) and not isinstance(i, bool) for i in spec):
        return [int(i) for i in spec]
    raise ValueError(f"tritongym_kernel: stop_token_ids must be 'chat_template', a list of token ids or null, "
                     f"got {spec!r}")


def _turn_record(info: dict[str, Any], reward: float, tokens: int) -> dict[str, Any]:
    result = info.get("result")
    record: dict[str, Any] = {"turn": info["turn"], "status": info["status"], "reward": float(reward),
                              "tokens": tokens, "eval_s": float(info.get("eval_s", 0.0))}
    if result is not None:
        from tritongym.evaluator.reward import prs_keep_probability

        # PRS's keep probability (None: correct but coverage unmeasured, i.e. no GPU); the tritongym trainer
        # applies it (trainer.v1.trainer_mode=tritongym), verl's own trainers ignore it.
        record["prs_keep_probability"] = prs_keep_probability(result)
        record.update({"correct": bool(result.correct), "speedup": result.speedup, "coverage": result.coverage,
                       "sandbox": str(result.sandbox),
                       "violations": [str(v.code) for v in result.violations]})
    return record


def _trajectory_metrics(turns: list[dict[str, Any]]) -> dict[str, float]:
    """Per-trajectory scalars verl collects as ``reward_extra_info`` columns (same keys on every row)."""
    rewards = [t["reward"] for t in turns]
    return {
        "tritongym/turns": float(len(turns)),
        "tritongym/best_reward": float(max(rewards)),
        "tritongym/first_reward": float(rewards[0]),
        "tritongym/last_reward": float(rewards[-1]),
        "tritongym/correct_turns": float(sum(bool(t.get("correct")) for t in turns)),
        "tritongym/void_turns": float(sum(t["status"] == "void" for t in turns)),
        "tritongym/violation_turns": float(sum(t["status"] == "integrity_violation" for t in turns)),
        "tritongym/eval_s": float(sum(t["eval_s"] for t in turns)),
    }


def place_turn_rewards(response_mask: Tensor, turn_rewards: Sequence[Sequence[float] | None],
                       rm_scores: Tensor) -> Tensor:
    """Token rewards with each turn's reward on its last model token (the layout ``trloo`` reads).

    Args:
        response_mask: ``[B, L]`` 1 on model tokens; a turn is a maximal run of ones.
        turn_rewards: per row, one reward per turn, or None to keep that row of ``rm_scores``.
        rm_scores: ``[B, L]`` verl's token scores (the total on the last response token).

    Returns:
        A new ``[B, L]`` tensor. Raises ``ValueError`` when a row's runs and rewards disagree.
    """
    if len(turn_rewards) != response_mask.shape[0]:
        raise ValueError(f"turn_rewards: expected {response_mask.shape[0]} rows, got {len(turn_rewards)}")
    out = rm_scores.clone()
    mask = response_mask.bool()
    following = torch.zeros_like(mask)
    following[:, :-1] = mask[:, 1:]
    ends = mask & ~following  # last token of each run [B, L]
    for row, rewards in enumerate(turn_rewards):
        if rewards is None:
            continue
        positions = ends[row].nonzero().flatten()
        if len(positions) != len(rewards):
            raise ValueError(
                f"row {row}: {len(positions)} model turns in response_mask but {len(rewards)} turn rewards "
                f"in extra_fields[{TURN_REWARDS!r}]"
            )
        out[row] = 0.0
        out[row, positions] = torch.tensor(list(rewards), dtype=out.dtype)
    return out


class TurnRewardAgentLoopWorker(AgentLoopWorker):
    """verl's agent-loop worker, with per-turn rewards placed on each turn's last token."""

    def _postprocess(self, inputs: list[Any], input_non_tensor_batch: dict | None = None,
                     validate: bool = False) -> DataProto:
        output = super()._postprocess(inputs, input_non_tensor_batch=input_non_tensor_batch, validate=validate)
        if "rm_scores" in output.batch.keys() and TURN_REWARDS in output.non_tensor_batch:
            # Other agent loops leave turn_scores empty ([]) or unset: keep verl's placement there.
            column = [list(v) if isinstance(v, (list, tuple, np.ndarray)) and len(v) else None
                      for v in output.non_tensor_batch[TURN_REWARDS]]
            output.batch["rm_scores"] = place_turn_rewards(output.batch["response_mask"], column,
                                                           output.batch["rm_scores"])
        return output


class TurnRewardAgentLoopManager(AgentLoopManager):
    """verl's ``AgentLoopManager`` with `TurnRewardAgentLoopWorker` workers (``agent_loop_manager_class``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import ray

        self.agent_loop_workers_class = ray.remote(TurnRewardAgentLoopWorker)
        super().__init__(*args, **kwargs)
