"""DVP in the TRL integration: `TRLOOGRPOTrainer(dvp_alpha=α)` with TRL really installed.

The pruned log-probs the loss sees are checked against ``tritongym.rl.dvp_log_probs`` on the
model's own logits and against TRL's own fused head (full softmax); sampling with min-p α is
checked token by token against the safe set; a real GRPO step runs through the wrapped head.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="trl is not installed (pip install -e '.[trl]'; see .ci/trl)")

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
    # The head ran on the labelled positions only; the outputs are laid back at every position.
    assert out.entropy.shape == mask.shape and bool((out.entropy[~mask] == 0).all())
    assert bool(out.entropy[mask].gt(0).all())
    assert torch.equal(out.label_mask, mask)
    inside, outside = mask & want.in_safe, mask & ~want.in_safe
    assert torch.allclose(out.log_probs[inside], want.log_probs[inside], atol=1e-5)
    # A label outside V_S has no π_S log-prob: a finite placeholder (the full softmax's), without gradient.
    full_lp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, labels[:, 1:].clamp_min(0)[..., None])[..., 0]
    assert torch.allclose(out.log_probs[outside], full_lp[outside], atol=1e-5)
    (none,) = torch.autograd.grad(out.log_probs[outside].sum(), trainer.model.model.embed_tokens.weight,
                                  retain_graph=True)
    assert not none.any()
    # Against TRL's own fused head (same seeded weights): in-set tokens gain −log S > 0, i.e. really pruned.
    full = plain.model(input_ids=input_ids, attention_mask=attention, labels=labels, fused_lm_head=True).log_probs
    assert inside.any() and outside.any()
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


def test_out_of_set_tokens_leave_the_loss_mask_and_the_kl_stays_finite(problem, evaluator, tmp_path):
    # Scripted (not sampled) replies under a large α: some of their tokens lie outside the tiny model's
    # safe sets. They have no π_S log-prob: TRL's scoring step, then the hook, must drop exactly those
    # tokens from the loss mask (tritongym.rl.dvp: AND in_safe into the mask), and the placeholder the
    # head gives them must keep TRL's loss finite even where the reference still has them in its set.
    generator = ScriptedGenerator([[VOID_REPLY, VOID_REPLY], [VOID_REPLY, VOID_REPLY]])
    alpha = 0.32  # the scripted tokens have p/p_max in [0.30, 0.41] under the seeded model: some in, some out
    trainer = _trainer(problem, evaluator, tmp_path, alpha=alpha, beta=0.04, rollout={"generator": generator})
    trainer.model.train()
    inputs = [dict(row) for row in [trainer.train_dataset[0]] * 2]
    output = trainer._generate_and_score_completions(inputs)
    input_ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    width = output["completion_ids"].shape[1]
    with torch.no_grad():
        logits = type(trainer.model).forward(trainer.model, input_ids=input_ids, attention_mask=attention).logits
    in_set = dvp_log_probs(logits[:, -width - 1: -1], output["completion_ids"], alpha).in_safe
    env = torch.zeros_like(in_set)
    for i, row in enumerate(inputs):
        for start, end in row["turn_spans"]:
            env[i, start:end] = True
    assert (env & ~in_set).any() and (env & in_set).any()
    assert torch.equal(output["tool_mask"].bool(), env & in_set)
    assert int(output["num_items_in_batch"]) == int((output["completion_mask"].bool() & env & in_set).sum())
    assert trainer._metrics["train"]["tritongym/dvp_out_of_set_tokens"][-1] == float((env & ~in_set).sum())
    # TRL's own loss on the batch, with advantages on every model token and a reference that (as after
    # some updates) still has the dropped tokens in its set: finite, with finite gradients.
    trainer.current_gradient_accumulation_steps = 1  # what TRL's training loop sets before compute_loss
    batch = dict(output, advantages=env.float())
    batch["ref_per_token_logps"] = torch.where(env & ~in_set, -1.0, output["ref_per_token_logps"])
    loss = trainer.compute_loss(trainer.model, batch)
    loss.backward()
    assert torch.isfinite(loss) and all(torch.isfinite(p.grad).all() for p in trainer.model.parameters()
                                        if p.grad is not None)
    # The control: with the out-of-set tokens left in the mask, the loss counts them.
    kept = dict(batch, tool_mask=env.to(output["tool_mask"].dtype))
    assert not torch.allclose(trainer.compute_loss(trainer.model, kept), loss)
