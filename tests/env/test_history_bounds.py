"""History policies at their bounds: k above, at and below the number of attempts, and k = 0.

`LastK(k)` once sliced from ``len(attempts) - k``: with more k than attempts the start went negative
and it returned too few (``LastK(4)`` over 3 attempts gave 1), so every ``--history last:K`` episode
lost its first turns' history (issue 27).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def attempts(n: int) -> list[Attempt]:
    return [Attempt(turn=i, reply=f"reply {i}", feedback=f"fb {i}", reward=i / 10) for i in range(n)]


def turns(selected: list[Attempt]) -> list[int]:
    return [a.turn for a in selected]


@pytest.mark.parametrize(("k", "n", "expected"), [
    (4, 3, [0, 1, 2]),   # more k than attempts: all of them
    (5, 1, [0]),
    (3, 3, [0, 1, 2]),   # k equal to the number of attempts
    (2, 3, [1, 2]),
    (1, 3, [2]),
    (0, 3, []),          # k = 0 replays nothing
    (3, 0, []),          # the first turn has no history
    (0, 0, []),
])
def test_last_k_keeps_the_k_most_recent_or_all_when_there_are_fewer(k, n, expected):
    assert turns(LastK(k).select(attempts(n))) == expected


def test_last_k_through_its_cli_spelling_in_the_first_turns():
    policy = parse_history("last:3")
    assert [turns(policy.select(attempts(n))) for n in range(5)] == [[], [0], [0, 1], [0, 1, 2], [1, 2, 3]]


def test_negative_k_is_refused_with_the_value():
    with pytest.raises(ValueError, match="k must be >= 0, got -1"):
        LastK(-1)
    with pytest.raises(ValueError, match="k must be >= 0, got -2"):
        BestK(-2)


@given(k=st.integers(min_value=0, max_value=12), n=st.integers(min_value=0, max_value=12))
def test_last_k_is_the_suffix_of_length_min_k_n(k, n):
    history = attempts(n)
    selected = LastK(k).select(history)
    assert len(selected) == min(k, n)
    assert selected == history[n - len(selected):]  # a suffix, in order
    assert isinstance(selected, list)


@given(k=st.integers(min_value=0, max_value=12), n=st.integers(min_value=0, max_value=12))
def test_best_k_keeps_min_k_n_in_turn_order(k, n):
    selected = BestK(k).select(attempts(n))  # rewards increase with the turn: the best are the last
    assert turns(selected) == list(range(n - min(k, n), n))


@given(n=st.integers(min_value=0, max_value=8), budget=st.integers(min_value=0, max_value=200))
def test_char_budget_keeps_the_longest_recent_suffix_that_fits(n, budget):
    history = attempts(n)
    selected = CharBudget(budget).select(history)
    size = sum(len(a.reply) + len(a.feedback) for a in selected)
    assert size <= budget
    assert selected == history[n - len(selected):]
    if len(selected) < n:  # one more attempt would not have fitted
        extra = history[n - len(selected) - 1]
        assert size + len(extra.reply) + len(extra.feedback) > budget


def test_budgets_at_exactly_the_limit_keep_the_attempt():
    history = attempts(2)
    one = len(history[1].reply) + len(history[1].feedback)
    assert turns(CharBudget(one).select(history)) == [1]
    assert turns(CharBudget(2 * one).select(history)) == [0, 1]
    assert turns(CharBudget(2 * one - 1).select(history)) == [1]
    words = TokenBudget(4, count_tokens=lambda text: len(text.split()))  # 2 + 2 tokens per attempt
    assert turns(words.select(history)) == [1]
    assert turns(TokenBudget(3, count_tokens=lambda text: len(text.split())).select(history)) == []
    # The default estimate: ceil(characters / 4) per text ("reply 1" = 7 -> 2, "fb 1" = 4 -> 1).
    assert turns(TokenBudget(3).select(history)) == [1]
    assert turns(TokenBudget(2).select(history)) == []
    assert turns(TokenBudget(6).select(history)) == [0, 1]


def test_budget_policies_refuse_negative_limits():
    with pytest.raises(ValueError, match="max_chars must be >= 0, got -1"):
        CharBudget(-1)
    with pytest.raises(ValueError, match="max_tokens must be >= 0, got -1"):
        TokenBudget(-1)


@pytest.mark.parametrize(("spec", "kind", "describe"), [
    ("full", FullHistory, "full"), ("none", NoHistory, "none"), ("strip-think", StripThinking, "strip-think"),
    ("last:3", LastK, "last:3"), ("best:2", BestK, "best:2"), ("chars:100", CharBudget, "chars:100"),
    ("tokens:50", TokenBudget, "tokens:50"), (" last:1 ", LastK, "last:1"),
])
def test_each_spelling_parses_to_its_policy_and_describes_itself_back(spec, kind, describe):
    policy = parse_history(spec)
    assert type(policy) is kind
    assert policy.describe() == describe
    assert repr(policy) == f"{kind.__name__}({describe!r})"
    assert parse_history(policy) is policy


def test_several_spellings_chain_left_to_right():
    policy = parse_history("strip-think, last:2,,chars:1000")
    assert isinstance(policy, Chain) and [type(p) for p in policy.policies] == [StripThinking, LastK, CharBudget]
    assert policy.describe() == "strip-think,last:2,chars:1000"
    history = [Attempt(turn=i, reply=f"<think>x</think>r{i}", feedback="f", reward=0.0) for i in range(4)]
    assert [(a.turn, a.reply) for a in policy.select(history)] == [(2, "r2"), (3, "r3")]


@pytest.mark.parametrize("spec", ["", " , ", ","])
def test_an_empty_spelling_is_refused(spec):
    with pytest.raises(ValueError, match="^empty history policy$"):
        parse_history(spec)


@pytest.mark.parametrize("spec", ["full:1", "none:2", "strip-think:3", "FULL", "last", "last:x", "chars:", "tokens:1.5",
                                  "middle:2", "last:-1"])
def test_a_wrong_spelling_names_itself_and_the_choices(spec):
    with pytest.raises(ValueError) as caught:
        parse_history(f"full,{spec}")
    assert str(caught.value) == (f"unknown history policy {spec!r}; use full, none, last:K, best:K, chars:N, "
                                 "tokens:N or strip-think, joined by commas")


def test_zero_budgets_are_allowed_and_keep_nothing():
    history = attempts(2)
    assert CharBudget(0).select(history) == [] and TokenBudget(0).select(history) == []
    assert BestK(0).select(history) == []


def test_the_default_token_estimate_is_characters_over_four_rounded_up():
    history = [Attempt(turn=0, reply="r" * 17, feedback="f" * 9, reward=0.0)]  # 5 + 3 tokens
    assert TokenBudget(8).select(history) == history
    assert TokenBudget(7).select(history) == []
