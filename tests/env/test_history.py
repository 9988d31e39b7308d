"""History policies: which earlier attempts the next prompt replays."""

from __future__ import annotations

import pytest

from tritongym.env import (
    Attempt,
    BestK,
    Chain,
    CharBudget,
    FullHistory,
    LastK,
    NoHistory,
    StripThinking,
    TokenBudget,
    parse_history,
)


def attempts(*rewards: float) -> list[Attempt]:
    return [Attempt(turn=i, reply=f"<think>long thoughts {i}</think>reply {i}", feedback=f"fb {i}", reward=r)
            for i, r in enumerate(rewards)]


def turns_of(selected: list[Attempt]) -> list[int]:
    return [a.turn for a in selected]


def test_full_last_and_none():
    history = attempts(0, 0.5, 0, 0.2)
    assert turns_of(FullHistory().select(history)) == [0, 1, 2, 3]
    assert turns_of(LastK(2).select(history)) == [2, 3]
    assert turns_of(LastK(0).select(history)) == []
    assert NoHistory().select(history) == []


def test_best_k_is_not_consecutive_keeps_turn_order_and_prefers_recent_ties():
    history = attempts(0.5, 0.0, 0.8, 0.0, 0.5)
    assert turns_of(BestK(2).select(history)) == [2, 4]  # the tie at 0.5 goes to the later turn
    assert turns_of(BestK(3).select(history)) == [0, 2, 4]


def test_best_k_breaks_reward_ties_by_how_far_the_attempt_got():
    # All at reward 0: keep the wrong kernel that ran and the runtime error, not the compile errors
    # or the cheat; between equals (the two compile errors) the later one.
    from tritongym.env.history import progress_of

    statuses = ["incorrect", "compile_error", "integrity_violation", "runtime_error", "compile_error", "void"]
    history = [Attempt(turn=i, reply=f"r{i}", feedback=f"f{i}", reward=0.0, progress=progress_of(s))
               for i, s in enumerate(statuses)]
    assert turns_of(BestK(2).select(history)) == [0, 3]
    assert turns_of(BestK(3).select(history)) == [0, 3, 4]
    assert turns_of(BestK(5).select(history)) == [0, 1, 3, 4, 5]  # the cheat is the first left out
    # Reward first: progress only breaks ties.
    history[2] = Attempt(turn=2, reply="r2", feedback="f2", reward=0.3, progress=progress_of("integrity_violation"))
    assert turns_of(BestK(1).select(history)) == [2]


def test_char_budget_truncates_the_oldest():
    history = attempts(0, 0, 0)
    size = len(history[0].reply) + len(history[0].feedback)
    assert turns_of(CharBudget(2 * size).select(history)) == [1, 2]
    assert turns_of(CharBudget(size - 1).select(history)) == []


def test_token_budget_uses_the_given_tokenizer():
    history = attempts(0, 0, 0)
    words = TokenBudget(12, count_tokens=lambda text: len(text.split()))
    per_attempt = len(history[0].reply.split()) + len(history[0].feedback.split())
    assert per_attempt == 6
    assert turns_of(words.select(history)) == [1, 2]


def test_strip_thinking_then_budget_keeps_more():
    history = attempts(0, 0, 0, 0)
    stripped = StripThinking().select(history)
    assert stripped[0].reply == "reply 0"
    budget = len("reply 0") + len("fb 0")
    assert turns_of(Chain(StripThinking(), CharBudget(2 * budget)).select(history)) == [2, 3]
    assert turns_of(CharBudget(2 * budget).select(history)) == []


def test_parse_history_spellings():
    policy = parse_history("strip-think,best:2")
    assert isinstance(policy, Chain) and policy.describe() == "strip-think,best:2"
    assert parse_history("last:3").describe() == "last:3"
    assert parse_history("tokens:100").describe() == "tokens:100"
    for bad in ("", "last", "best:x", "recent:2"):
        with pytest.raises(ValueError):
            parse_history(bad)
