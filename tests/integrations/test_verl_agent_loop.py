"""The ``tritongym_kernel`` agent loop inside verl 0.9.1's own ``AgentLoopWorker`` (no GPU, no Ray).

A scripted token server stands in for vLLM behind verl's server-manager interface
(``generate(request_id, prompt_ids=..., sampling_params=...) -> TokenOutput``): it reads the task from
the prompt tokens and answers with the token ids of real replies, honest and wrong Triton candidates
from the built-in suite. Everything else is real: verl's worker, Continuous Token builder, padding
and ``_postprocess``; tritongym's environment, extraction, feedback and the sandboxed evaluator.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl", reason="verl is not installed (pip install -e '.[verl]'; see .ci/trainers)")

from hydra import compose, initialize_config_dir  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.trainer.config import AlgoConfig  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from tritongym.integrations.verl.agent_loop import (  # noqa: E402
    KernelAgentLoop,
    KernelAgentLoopOutput,
    TurnRewardAgentLoopManager,
    TurnRewardAgentLoopWorker,
    place_turn_rewards,
)
from tritongym.rl import trloo_advantages  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SOLUTIONS = ROOT / "examples" / "builtin"
PROBLEMS = ROOT / "src" / "tritongym" / "tasks" / "builtin"
PROMPT_LENGTH, RESPONSE_LENGTH, MAX_TURN_TOKENS = 4096, 8192, 3000


def _reply(code: str) -> str:
    return f"Here is my kernel.\n```python\n{code}```\n"


HONEST_ADD = (SOLUTIONS / "01_scaled_add.py").read_text()
WRONG_ADD = HONEST_ADD.replace("alpha * x + beta * y", "alpha * x - beta * y")
HONEST_RELU = (SOLUTIONS / "02_leaky_relu.py").read_text()
VOID = "I would write a Triton kernel here, but I give no code."
assert WRONG_ADD != HONEST_ADD

# Row → (problem, scripted replies per turn, expected statuses, expected turn rewards). Every episode
# runs its 3 turns (success rule "never", Dr.Kernel's loop); earlier turns earn reward too, so a
# total on the last token and per-turn rewards differ.
ROWS = [
    ("01_scaled_add", [_reply(WRONG_ADD), _reply(HONEST_ADD), VOID], ["incorrect", "ok", "void"], [0.0, 0.5, 0.0]),
    ("01_scaled_add", [_reply(HONEST_ADD), VOID, VOID], ["ok", "void", "void"], [0.5, 0.0, 0.0]),
    ("02_leaky_relu", [_reply(HONEST_RELU), _reply(HONEST_RELU), VOID], ["ok", "ok", "void"], [0.5, 0.5, 0.0]),
    ("02_leaky_relu", [VOID, VOID, VOID], ["void", "void", "void"], [0.0, 0.0, 0.0]),
]
UIDS = ["a", "a", "b", "b"]


class ScriptedTokenServer:
    """verl's server-manager ``generate`` interface over scripted replies (a real tokenizer round trip)."""

    def __init__(self, tokenizer, scripts: dict[tuple[str, int], list[str]]):
        self.tokenizer = tokenizer
        self.scripts = scripts
        self.calls: list[tuple[str, int, int, int]] = []  # (request id, turn, prompt tokens, max_tokens)
        self.stops: list[list[int] | None] = []  # the stop_token_ids of each call

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        text = self.tokenizer.decode(prompt_ids)
        turn = text.count("<|im_start|>assistant") - 1  # the generation prompt of this turn is the last one
        (key,) = [k for k in self.scripts if f"builtin/{k[0]}" in text and f"[row {k[1]}]" in text]
        self.calls.append((request_id, turn, len(prompt_ids), sampling_params["max_tokens"]))
        self.stops.append(sampling_params.get("stop_token_ids"))
        ids = self.tokenizer.encode(self.scripts[key][turn], add_special_tokens=False)
        ids.append(self.tokenizer.convert_tokens_to_ids("<|im_end|>"))
        # As verl's LLMServerClient does: the weight versions the tokens came from.
        fields = {"min_global_steps": 3, "max_global_steps": 3 + turn}
        return TokenOutput(token_ids=ids, log_probs=[-0.25] * len(ids), stop_reason="completed", extra_fields=fields)


def _make_model_dir(path: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config

    corpus = [p.read_text() for p in sorted(SOLUTIONS.glob("*.py")) + sorted(PROBLEMS.glob("*.py"))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=1500, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    fast.save_pretrained(path)
    Qwen2Config(architectures=["Qwen2ForCausalLM"], vocab_size=len(fast), hidden_size=16, intermediate_size=32,
                num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1).save_pretrained(path)


@pytest.fixture(scope="module")
def verl_config(tmp_path_factory):
    import verl

    root = tmp_path_factory.mktemp("verl_agent_loop")
    _make_model_dir(root / "model")
    (root / "agent_loops.yaml").write_text(
        "- name: tritongym_kernel\n"
        "  _target_: tritongym.integrations.verl.agent_loop.KernelAgentLoop\n"
        "  max_turns: 3\n"
        "  workers: 2\n"
        f"  max_turn_tokens: {MAX_TURN_TOKENS}\n"
        "  stop_token_ids: chat_template\n"
        "  eval_options: {device: cpu, timeout: 120}\n")
    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={root / 'model'}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.prompt_length={PROMPT_LENGTH}",
            f"actor_rollout_ref.rollout.response_length={RESPONSE_LENGTH}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tritongym_kernel",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={root / 'agent_loops.yaml'}",
            "trainer.use_v1=false",  # the legacy trainer: the one that needs the manager below
            "+actor_rollout_ref.rollout.agent.agent_loop_manager_class="
            "tritongym.integrations.verl.agent_loop.TurnRewardAgentLoopManager",
        ])


@pytest.fixture(scope="module")
def rollout(verl_config):
    # The row index in the user prompt lets the scripted server tell two rows of one problem apart;
    # the loop renders its own task text, so the index rides in the problem's source as a comment.
    from tritongym.tasks import load_problems

    builtin = {p.name: p for p in load_problems("builtin")}
    scripts, infos = {}, []
    for row, (name, replies, _, _) in enumerate(ROWS):
        scripts[(name, row)] = replies
        source = f"# [row {row}]\n" + builtin[name].source
        infos.append({"problem": f"builtin/{name}", "problem_source": source})
    worker = TurnRewardAgentLoopWorker(verl_config, ScriptedTokenServer(None, scripts))
    worker.llm_client.tokenizer = worker.tokenizer
    batch = DataProto.from_single_dict({
        "raw_prompt": np.array([[{"role": "user", "content": "write a kernel"}]] * len(ROWS), dtype=object),
        "extra_info": np.array(infos, dtype=object),
        "uid": np.array(UIDS, dtype=object),
    })
    output = asyncio.run(worker.generate_sequences(batch))
    worker.stops = list(worker.llm_client.stops)
    return worker, output, list(worker.llm_client.calls)


def _runs(mask_row: torch.Tensor) -> list[tuple[int, int]]:
    runs, start = [], None
    values = mask_row.tolist() + [0]
    for i, v in enumerate(values):
        if v and start is None:
            start = i
        if not v and start is not None:
            runs.append((start, i))
            start = None
    return runs


def test_turn_counts_masks_and_model_tokens(rollout):
    worker, out, calls = rollout
    tok = worker.tokenizer
    assert out.batch["responses"].shape == (len(ROWS), RESPONSE_LENGTH)
    for row, (_, replies, statuses, _) in enumerate(ROWS):
        mask, responses = out.batch["response_mask"][row], out.batch["responses"][row]
        runs = _runs(mask)
        assert len(runs) == len(statuses), f"row {row}: {len(runs)} model turns"
        for (start, end), reply in zip(runs, replies, strict=True):
            # Model tokens are exactly what the server sent: the reply and its end-of-turn token.
            assert tok.decode(responses[start:end].tolist()) == reply + "<|im_end|>"
        # Feedback between turns is masked 0, and it is the environment's feedback for that turn.
        for k, ((_, end), (start, _)) in enumerate(zip(runs, runs[1:], strict=False)):
            feedback = tok.decode(responses[end:start].tolist())
            assert f"attempt {k + 1} of 3" in feedback
            assert ("contained no code to evaluate" in feedback) == (statuses[k] == "void")
            assert "<|im_start|>user" in feedback
        # Nothing after the last turn: the episode ended (solved, or the turn budget spent).
        valid = int(out.batch["attention_mask"][row, PROMPT_LENGTH:].sum())
        assert runs[-1][1] == valid
        assert out.non_tensor_batch["__num_turns__"][row] == 2 + 2 * len(statuses) - 1
        turns = out.non_tensor_batch["tritongym_turns"][row]
        assert [t["status"] for t in turns] == statuses
        assert out.non_tensor_batch["tritongym/turns"][row] == len(statuses)
        # verl's staleness tags: weights of the first turn to those of the last.
        assert out.non_tensor_batch["min_global_steps"][row] == 3
        assert out.non_tensor_batch["max_global_steps"][row] == 3 + len(statuses) - 1
    # Each turn asked for at most max_turn_tokens, and never more than the row had left.
    assert len(calls) == sum(len(r[1]) for r in ROWS)
    initial = {request: prompt for request, turn, prompt, _ in calls if turn == 0}  # one request id per row
    assert len(initial) == len(ROWS)
    for request, _, prompt_tokens, max_tokens in calls:
        assert max_tokens == min(MAX_TURN_TOKENS, RESPONSE_LENGTH - (prompt_tokens - initial[request]))
    # Log-probs: the server's on model tokens, 0 on feedback and padding.
    logp = out.batch["rollout_log_probs"]
    mask = out.batch["response_mask"].bool()
    assert torch.all(logp[mask] == -0.25) and torch.all(logp[~mask] == 0)


def test_every_turn_stops_at_the_chat_templates_turn_tokens(rollout):
    # Dr.Kernel's rollout stops at the template's turn tokens, not EOS only: <|im_end|> (EOS here) and
    # <|im_start|>, which opens a message the model must not write itself.
    worker, _, calls = rollout
    tokenizer = worker.tokenizer
    want = sorted(tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|im_start|>"))
    assert len(worker.stops) == len(calls) and all(stops == want for stops in worker.stops)
    from tritongym.integrations.verl.agent_loop import _stop_token_ids

    assert _stop_token_ids(None, tokenizer) == [] and _stop_token_ids([5, 7], tokenizer) == [5, 7]
    with pytest.raises(ValueError, match="stop_token_ids"):
        _stop_token_ids("eos", tokenizer)


def test_each_turn_reward_sits_on_its_last_token(rollout):
    _, out, _ = rollout
    for row, (_, _, _, rewards) in enumerate(ROWS):
        scores = out.batch["rm_scores"][row]
        ends = [end - 1 for _, end in _runs(out.batch["response_mask"][row])]
        assert scores[ends].tolist() == pytest.approx(rewards)
        others = torch.ones_like(scores, dtype=torch.bool)
        others[ends] = False
        assert torch.all(scores[others] == 0)
        assert list(out.non_tensor_batch["turn_scores"][row]) == pytest.approx(rewards)
    # The honest kernels really passed the sandboxed evaluator; the wrong one really failed.
    first = out.non_tensor_batch["tritongym_turns"][0]
    assert first[0]["correct"] is False and first[1]["correct"] is True
    # PRS keeps every incorrect turn; a correct one's coverage is unmeasured on a CPU (None).
    assert first[0]["prs_keep_probability"] == 1.0 and first[1]["prs_keep_probability"] is None
    assert "prs_keep_probability" not in first[2]  # a void turn has no verdict
    # verl's own placement (the total on the last response token) is what the manager replaces.
    assert out.batch["rm_scores"][1].sum().item() == pytest.approx(0.5)


def test_verl_trloo_on_the_rollout_equals_per_turn_trloo(rollout):
    _, out, _ = rollout
    data = DataProto.from_single_dict({"token_level_rewards": out.batch["rm_scores"],
                                       "response_mask": out.batch["response_mask"],
                                       "uid": np.array(UIDS, dtype=object)})
    result = compute_advantage(data, adv_estimator="trloo", config=AlgoConfig(adv_estimator="trloo"))
    rewards = torch.zeros(len(ROWS), 3, dtype=torch.float64)
    turn_mask = torch.zeros(len(ROWS), 3, dtype=torch.bool)
    for row, (_, _, _, r) in enumerate(ROWS):
        rewards[row, : len(r)] = torch.tensor(r)
        turn_mask[row, : len(r)] = True
    expected = trloo_advantages(rewards, turn_mask, torch.tensor([0, 0, 1, 1]))
    for row in range(len(ROWS)):
        for k, (start, end) in enumerate(_runs(out.batch["response_mask"][row])):
            values = result.batch["advantages"][row, start:end].double()
            assert torch.allclose(values, expected[row, k].expand_as(values), atol=1e-6)
    # Hand checks: rows 0 and 1 both have reward-to-go 0.5 at turn 0 → A = 0; at turn 1, 0.5 against 0.
    assert expected[0, 0].item() == pytest.approx(0.0)
    assert expected[0, 1].item() == pytest.approx(0.5) and expected[1, 1].item() == pytest.approx(-0.5)
    # Row 2 (G = 1.0 at turn 0) against row 3's void turns (G = 0).
    assert expected[2, 0].item() == pytest.approx(1.0)


def _loop(worker, verl_config, **options):
    """An agent loop built as verl's worker builds it (inside a running event loop: verl binds to it)."""
    return KernelAgentLoop(trainer_config=DictConfigWrap(verl_config), server_manager=worker.llm_client,
                           tokenizer=worker.tokenizer, processor=None, dataset_cls=worker.dataset_cls,
                           data_config=DictConfigWrap(verl_config.data), **options)


def test_v1_trainer_rm_scores_from_as_dict(rollout, verl_config):
    # verl's default V1 trainer stores AgentLoopOutput.as_dict() (rm_scores included) in its
    # TransferQueue; the loop's own output places each turn's reward there, no manager needed.
    worker, _, _ = rollout
    from tritongym.tasks import load_problems

    _, replies, statuses, rewards = ROWS[1]
    source = "# [row 1]\n" + {p.name: p for p in load_problems("builtin")}["01_scaled_add"].source

    async def run():
        loop = _loop(worker, verl_config, max_turns=3, workers=2, eval_options={"device": "cpu", "timeout": 120})
        return await loop.run({"temperature": 1.0}, raw_prompt=[],
                              extra_info={"problem": "builtin/01_scaled_add", "problem_source": source})

    output = asyncio.run(run())
    assert isinstance(output, KernelAgentLoopOutput)
    assert output.reward_score == pytest.approx(sum(rewards))
    fields = output.as_dict()
    # V1 tags each TransferQueue row with these (int); a loop without them breaks verl's metrics.
    assert fields["extra_fields"]["min_global_steps"] == 3 and fields["extra_fields"]["max_global_steps"] == 5
    ends = [end - 1 for _, end in _runs(fields["response_mask"])]
    assert len(ends) == len(statuses)
    expected = torch.zeros(len(fields["response_mask"]))
    expected[ends] = torch.tensor(rewards)
    assert fields["rm_scores"].tolist() == pytest.approx(expected.tolist())
    # verl's base class alone would put the total on the last token instead.
    plain = super(KernelAgentLoopOutput, output).as_dict()["rm_scores"]
    assert plain[-1].item() == pytest.approx(sum(rewards)) and plain[ends[0]].item() == 0


def test_history_policies_that_rewrite_context_are_refused(rollout, verl_config):
    worker, _, _ = rollout

    async def build(**options):
        return _loop(worker, verl_config, **options)

    with pytest.raises(ValueError, match="append-only"):
        asyncio.run(build(history="last:1"))
    with pytest.raises(ValueError, match="max_turn_tokens"):
        asyncio.run(build(max_turn_tokens=0))
    with pytest.raises(ValueError, match="evaluator must be 'local', 'ray' or an http"):
        asyncio.run(build(evaluator="redis://x"))


def test_a_turn_without_tokens_is_an_error_not_a_silent_shift(rollout, verl_config):
    worker, _, _ = rollout

    class Aborting:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            return TokenOutput(token_ids=[], stop_reason="aborted")

    async def run():
        loop = KernelAgentLoop(trainer_config=DictConfigWrap(verl_config), server_manager=Aborting(),
                               tokenizer=worker.tokenizer, processor=None, dataset_cls=worker.dataset_cls,
                               data_config=DictConfigWrap(verl_config.data), workers=2,
                               eval_options={"device": "cpu", "timeout": 120})  # the shared evaluator
        return await loop.run({}, raw_prompt=[], extra_info={"problem": "02_leaky_relu"})

    with pytest.raises(RuntimeError, match="no tokens for turn 1 .stop_reason='aborted'"):
        asyncio.run(run())


def test_manager_config_key_selects_turn_reward_workers(verl_config):
    from verl.utils.import_utils import load_class_from_fqn

    fqn = verl_config.actor_rollout_ref.rollout.agent.agent_loop_manager_class
    manager_cls = load_class_from_fqn(fqn, "AgentLoopManager")  # what verl's trainer does with the key
    assert manager_cls is TurnRewardAgentLoopManager
    manager = manager_cls(verl_config, llm_client=None)
    assert manager.agent_loop_workers_class.__ray_metadata__.class_name == "TurnRewardAgentLoopWorker"
    assert issubclass(manager.agent_loop_workers_class.__ray_metadata__.modified_class, TurnRewardAgentLoopWorker)


def test_place_turn_rewards_rejects_a_count_mismatch():
    mask = torch.tensor([[1, 1, 0, 1, 0]])
    with pytest.raises(ValueError, match="2 model turns in response_mask but 3 turn rewards"):
        place_turn_rewards(mask, [[0.1, 0.2, 0.3]], torch.zeros(1, 5))
    placed = place_turn_rewards(mask, [[0.1, 0.2]], torch.tensor([[0.0, 0.0, 0.0, 0.3, 0.0]]))
    assert placed[0].tolist() == pytest.approx([0.0, 0.1, 0.0, 0.2, 0.0])
    assert place_turn_rewards(mask, [None], torch.ones(1, 5)).tolist() == [[1.0] * 5]


def test_the_service_evaluator_option_evaluates_through_a_real_tritongym_serve(tmp_path):
    # evaluator: http(s)://... — the agent loop's evaluations go to `tritongym serve` (a real server on
    # loopback over a real SQLite file), with the loop's options; honest and wrong verdicts come back.
    import importlib.util

    # The service tests' server helper, loaded by path (verl's venv has another top-level `tests`).
    spec = importlib.util.spec_from_file_location("service_conftest", ROOT / "tests" / "service" / "conftest.py")
    service_conftest = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("service_conftest", service_conftest)  # its dataclasses look themselves up there
    spec.loader.exec_module(service_conftest)
    Server = service_conftest.Server

    from tritongym.integrations.verl.agent_loop import _eval_options, shared_evaluator
    from tritongym.tasks import load_problems

    problem = next(p for p in load_problems("builtin") if p.name == "01_scaled_add")
    server = Server(db=tmp_path / "jobs.db", workers=1).start()
    try:
        evaluator = shared_evaluator(server.url, None, _eval_options({"device": "cpu", "timeout": 120}))
        assert shared_evaluator(server.url, None, _eval_options({"device": "cpu", "timeout": 120})) is evaluator
        honest, wrong = evaluator.evaluate_many([(problem, HONEST_ADD), (problem, WRONG_ADD)])
        assert (str(honest.status), str(wrong.status)) == ("ok", "incorrect")
        assert honest.reward > 0 and wrong.reward == 0
        assert str(asyncio.run(evaluator.aevaluate(problem, WRONG_ADD)).status) == "incorrect"
    finally:
        server.stop()
