"""History policies: which earlier attempts the next prompt shows, and how.

A policy maps the episode's past attempts (`Attempt`: the reply, its feedback, its reward) to
the ones the next prompt replays as assistant/user message pairs, in their original order.
Policies are objects and compose with `Chain` (applied left to right):

* `FullHistory`: every attempt (Dr.Kernel's ``history_mode: all``).
* `LastK(k)`: the k most recent attempts.
* `BestK(k)`: the k attempts with the highest reward, not necessarily consecutive (reward ties
  go to the attempt that got further, see `progress_of`, then to the more recent), shown in turn
  order.
* `TokenBudget(max_tokens, count_tokens)` / `CharBudget(max_chars)`: drop the oldest attempts
  until the replayed replies and feedback fit.
* `StripThinking()`: remove ``<think>…</think>`` blocks from earlier replies (Kevin-style), so
  reasoning does not fill the context.
* `NoHistory()`: every prompt is the initial one (parallel sampling).

`parse_history("strip-think,last:2")` builds a policy from the CLI's ``--history`` string.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tritongym.env.extract import strip_reasoning

#: How far an attempt got, for breaking reward ties (higher is further). With every turn at the
#: same reward (all 0 early in training), the attempt to keep or call "best" is the one closest to
#: a correct kernel: it ran and was wrong > it failed while running > it did not build > there was
#: no code at all > it cheated (an integrity violation is never a better starting point).
PROGRESS: dict[str, int] = {
    "ok": 5,
    "incorrect": 4,
    "runtime_error": 3, "timeout": 3, "crashed": 3, "unsupported": 3,
    "compile_error": 2,
    "void": 1,
    "integrity_violation": 0,
}


def progress_of(status: str) -> int:
    """`PROGRESS` of a verdict's status (``void``: no code was extracted); an unknown status ranks
    with a compile error."""
    return PROGRESS.get(str(status), PROGRESS["compile_error"])


@dataclass(frozen=True)
class Attempt:
    """One past turn as the prompt sees it (`progress`: `progress_of` its status)."""

    turn: int
    reply: str
    feedback: str
    reward: float
    void: bool = False
    progress: int = 0


class HistoryPolicy:
    """Base class: `select(attempts)` returns the attempts to replay, oldest first."""

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        raise NotImplementedError

    def describe(self) -> str:
        """The CLI spelling of this policy (recorded in provenance)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


class FullHistory(HistoryPolicy):
    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        return list(attempts)

    def describe(self) -> str:
        return "full"


class NoHistory(HistoryPolicy):
    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        return []

    def describe(self) -> str:
        return "none"


class LastK(HistoryPolicy):
    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = k

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        # max(0, ...): with fewer attempts than k, all of them (a negative start would wrap around).
        return list(attempts[max(0, len(attempts) - self.k):])

    def describe(self) -> str:
        return f"last:{self.k}"


class BestK(HistoryPolicy):
    def __init__(self, k: int) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = k

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        ranked = sorted(range(len(attempts)), key=lambda i: (attempts[i].reward, attempts[i].progress, i),
                        reverse=True)[: self.k]
        return [attempts[i] for i in sorted(ranked)]

    def describe(self) -> str:
        return f"best:{self.k}"


class CharBudget(HistoryPolicy):
    """Keep the most recent attempts whose replies and feedback fit in `max_chars` characters."""

    def __init__(self, max_chars: int) -> None:
        if max_chars < 0:
            raise ValueError(f"max_chars must be >= 0, got {max_chars}")
        self.max_chars = max_chars

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        kept: list[Attempt] = []
        used = 0
        for attempt in reversed(attempts):
            size = len(attempt.reply) + len(attempt.feedback)
            if used + size > self.max_chars:
                break
            kept.append(attempt)
            used += size
        return kept[::-1]

    def describe(self) -> str:
        return f"chars:{self.max_chars}"


class TokenBudget(HistoryPolicy):
    """Keep the most recent attempts whose replies and feedback fit in `max_tokens` tokens.

    `count_tokens` is your tokenizer (``lambda text: len(tokenizer.encode(text))``); without one,
    tokens are estimated as characters / 4.
    """

    def __init__(self, max_tokens: int, count_tokens: Callable[[str], int] | None = None) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self.count_tokens = count_tokens or (lambda text: (len(text) + 3) // 4)

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        kept: list[Attempt] = []
        used = 0
        for attempt in reversed(attempts):
            size = self.count_tokens(attempt.reply) + self.count_tokens(attempt.feedback)
            if used + size > self.max_tokens:
                break
            kept.append(attempt)
            used += size
        return kept[::-1]

    def describe(self) -> str:
        return f"tokens:{self.max_tokens}"


class StripThinking(HistoryPolicy):
    """Remove reasoning blocks from earlier replies (the current turn's reply is never replayed)."""

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        return [replace(a, reply=strip_reasoning(a.reply).strip()) for a in attempts]

    def describe(self) -> str:
        return "strip-think"


class Chain(HistoryPolicy):
    """Apply policies left to right (``Chain(StripThinking(), CharBudget(20000))`` strips, then fits)."""

    def __init__(self, *policies: HistoryPolicy) -> None:
        self.policies = policies

    def select(self, attempts: Sequence[Attempt]) -> list[Attempt]:
        selected = list(attempts)
        for policy in self.policies:
            selected = policy.select(selected)
        return selected

    def describe(self) -> str:
        return ",".join(p.describe() for p in self.policies)


def parse_history(spec: str | HistoryPolicy) -> HistoryPolicy:
    """A policy from its spelling: ``full``, ``none``, ``last:K``, ``best:K``, ``chars:N``, ``tokens:N``,
    ``strip-think``, or several joined by commas (applied left to right)."""
    if isinstance(spec, HistoryPolicy):
        return spec
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts:
        raise ValueError("empty history policy")
    policies: list[HistoryPolicy] = []
    for part in parts:
        name, _, arg = part.partition(":")
        try:
            if name == "full" and not arg:
                policies.append(FullHistory())
            elif name == "none" and not arg:
                policies.append(NoHistory())
            elif name == "strip-think" and not arg:
                policies.append(StripThinking())
            elif name == "last":
                policies.append(LastK(int(arg)))
            elif name == "best":
                policies.append(BestK(int(arg)))
            elif name == "chars":
                policies.append(CharBudget(int(arg)))
            elif name == "tokens":
                policies.append(TokenBudget(int(arg)))
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"unknown history policy {part!r}; use full, none, last:K, best:K, chars:N, tokens:N or "
                             "strip-think, joined by commas") from None
    return policies[0] if len(policies) == 1 else Chain(*policies)
