"""DVP in the TRL integration: `TRLOOGRPOTrainer(dvp_alpha=α)` with TRL really installed.

The pruned log-probs the loss sees are checked against ``tritongym.rl.dvp_log_probs`` on the
model's own logits and against TRL's own fused head (full softmax); sampling with min-p α is
checked token by token against the safe set; a real GRPO step runs through the wrapped head.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install 'tritongym[trl]'; see .ci/trl)")

import torch  # noqa: E402

from tritongym.integrations.trl.rollout import KernelRollout, sample_with_model  # noqa: E402
from tritongym.rl import dvp_log_probs, min_p_safe_mask  # noqa: E402

from .trl_support import HONEST_REPLY, VOID_REPLY, ScriptedGenerator, make_trainer  # noqa: E402

ALPHA = 0.5  # large, so that a random tiny model's near-uniform distributions are really pruned


def _trainer(problem, evaluator, tmp_path, alpha=ALPHA, **kwargs):
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator, **kwargs.pop("rollout", {}))
    return make_trainer(rollout, tmp_path, dvp_alpha=alpha, min_p=alpha, **kwargs)


def _batch(trainer, n=2, length=12):
    torch.manual_seed(3)
    vocab = trainer.model.config.vocab_size
    input_ids = torch.randint(0, vocab, (n, length))
    attention = torch.ones_like(input_ids)
    labels = input_ids.clone()
    labels[:, :4] = -100  # a prompt part, as TRL masks it
    return input_ids, attention, labels


def test_the_loss_sees_pruned_log_probs(problem, evaluator, tmp_path):
    trainer = _trainer(problem, evaluator, tmp_path / "dvp")
    plain = make_trainer(KernelRollout([problem], turns=2, evaluator=evaluator), tmp_path / "plain")
    input_ids, attention, labels = _batch(trainer)
    out = trainer.model(input_ids=input_ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    logits = type(trainer.model).forward(trainer.model, input_ids=input_ids, attention_mask=attention).logits
    want = dvp_log_probs(logits[:, :-1], labels[:, 1:].clamp_min(0), ALPHA)
    mask = labels[:, 1:] != -100
    assert out.log_probs.shape == mask.shape and bool((out.log_probs[~mask] == 0).all())
    assert torch.allclose(out.log_probs[mask], want.log_probs[mask], atol=1e-5)
    # Against TRL's own fused head (same seeded weights): in-set tokens gain −log S > 0, i.e. really pruned.
    full = plain.model(input_ids=input_ids, attention_mask=attention, labels=labels, fused_lm_head=True).log_probs
    inside = mask & want.in_safe
    assert inside.any() and (~want.in_safe & mask).any()
    assert torch.allclose(out.log_probs[inside] - full[inside], -want.log_safe_mass[inside], atol=1e-4)
    assert bool((want.log_safe_mass[mask] < -1e-3).all())
    # Gradients flow through in-set tokens only.
    out.log_probs[inside].sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in trainer.model.parameters())
    # Generation still goes through the unwrapped path.
    generated = trainer.model.generate(input_ids=input_ids[:, :4], attention_mask=attention[:, :4],
                                       max_new_tokens=3, do_sample=False)
    assert generated.shape == (2, 7)


def test_the_reference_model_is_pruned_too(problem, evaluator, tmp_path):
    # With a KL term (beta > 0) TRL keeps a reference model; its log-probs must be π_S's as well, or the
    # KL would compare a pruned policy with a full-softmax one.
    trainer = _trainer(problem, evaluator, tmp_path, beta=0.04)
    assert trainer.ref_model is not None
    input_ids, attention, labels = _batch(trainer)
    ours = trainer.model(input_ids=input_ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    ref = trainer.ref_model(input_ids=input_ids, attention_mask=attention, labels=labels, fused_lm_head=True)
    assert torch.allclose(ours.log_probs, ref.log_probs, atol=1e-5)  # same weights at the start, same rule


def test_sampling_prunes_with_the_same_rule(problem, evaluator, tmp_path):
    trainer = _trainer(problem, evaluator, tmp_path)
    contexts = [[5, 6, 7, 8], [9, 10, 11]]
    torch.manual_seed(0)
    generations = sample_with_model(trainer, contexts, max_new_tokens=6)
    for context, generation in zip(contexts, generations, strict=True):
        ids = torch.tensor([context + generation.token_ids])
        with torch.no_grad():
            logits = type(trainer.model).forward(trainer.model, input_ids=ids).logits[0]
        safe = min_p_safe_mask(logits[len(context) - 1: -1], ALPHA)
        chosen = torch.tensor(generation.token_ids)
        assert bool(safe[torch.arange(len(chosen)), chosen].all())  # every sampled token is in V_S
        # The rollout's log-probs are the pruned policy's (what π_S gives the same tokens).
        want = dvp_log_probs(logits[len(context) - 1: -1], chosen, ALPHA).log_probs
        assert torch.allclose(torch.tensor(generation.logprobs), want, atol=1e-4)


def test_dvp_needs_min_p_to_match(problem, evaluator, tmp_path):
    rollout = KernelRollout([problem], turns=2, evaluator=evaluator)
    with pytest.raises(ValueError, match=r"set GRPOConfig\(min_p=0.5\)"):
        make_trainer(rollout, tmp_path, dvp_alpha=0.5)
    with pytest.raises(ValueError, match="dvp_alpha must be in"):
        make_trainer(rollout, tmp_path, dvp_alpha=0.0, min_p=0.0)


def test_grpo_steps_through_the_dvp_head_change_the_weights(problem, evaluator, tmp_path):
    # Scripted replies (honest vs code-less): non-zero TRLOO advantages; α small enough that their
    # tokens lie in the tiny model's safe sets, so the pruned log-probs carry gradient.
    generator = ScriptedGenerator([[HONEST_REPLY, VOID_REPLY], [VOID_REPLY, VOID_REPLY]])
    trainer = _trainer(problem, evaluator, tmp_path, alpha=1e-3, rollout={"generator": generator}, steps=1)
    assert trainer.model.forward.__func__.__module__ == "tritongym.integrations.trl.trainer"
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 1
    change = sum(float((p.detach() - b).abs().sum()) for p, b in zip(trainer.model.parameters(), before, strict=True))
    assert change > 0
