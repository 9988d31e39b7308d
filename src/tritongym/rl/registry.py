"""One generic name → function registry, and the string enums of the built-in names.

Family: plumbing. The same ``Registry`` class holds the advantage estimators
(``ADVANTAGE_ESTIMATORS``, filled in ``estimators.py``), the policy losses (``POLICY_LOSSES``,
filled in ``policy_loss.py``) and the loss-aggregation modes (``AGGREGATION_MODES``, filled in
``policy_loss.py``).

Rules (the lessons from verl's two registries, style guide Part 1 §6 and Part 2 §3):

* ``register(name)`` raises ``ValueError`` when a *different* function already holds ``name``;
  registering the same function again is a no-op (module reloads stay harmless).
* ``get(name)`` raises ``ValueError`` listing the available names.
* Every entry of one registry has the same call shape, and declares the inputs it needs
  (``requires``), so a caller never branches on names.
* Built-in names are ``StrEnum`` members (Python 3.10 has no ``enum.StrEnum``, hence
  ``class StrEnum(str, Enum)``); plug-ins may register plain strings. Aggregation-mode strings
  are verl's, so a verl adapter passes them through unchanged.

Deliberately left out: entry-point discovery of plug-ins (an integration concern).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATION_MODES",
    "POLICY_LOSSES",
    "AdvantageEstimator",
    "AggregationMode",
    "Entry",
    "KLEstimator",
    "PolicyLoss",
    "Registry",
    "StrEnum",
]

F = TypeVar("F", bound=Callable[..., Any])


class StrEnum(str, Enum):
    """A ``str`` enum whose ``str()`` and ``format()`` are the value (3.10-compatible ``StrEnum``)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)


class AdvantageEstimator(StrEnum):
    """Built-in advantage estimators (``ADVANTAGE_ESTIMATORS``)."""

    GRPO = "grpo"  # (R − mean_g)/(std_g + ε), Shao et al. 2024; per sequence
    DR_GRPO = "dr_grpo"  # R − mean_g, Liu et al. 2025 (Dr.GRPO); per sequence
    RLOO = "rloo"  # leave-one-out baseline, Ahmadian et al. 2024; per sequence
    TRLOO = "trloo"  # turn-level leave-one-out on reward-to-go, Dr.Kernel arXiv 2602.05885; per turn
    TURN_GRPO = "turn_grpo"  # Dr.Kernel's multi-turn "grpo" (self-included mean); per turn
    OTB = "optimal_token_baseline"  # Li, Xu et al. arXiv 2602.07078; per token


class AggregationMode(StrEnum):
    """Built-in loss aggregation modes (``AGGREGATION_MODES``); the strings are verl's."""

    TOKEN_MEAN = "token-mean"  # Σ m ℓ / Σ m
    TOKEN_SUM = "token-sum"  # Σ m ℓ (no normaliser; verl ≥ 0.9)
    SEQ_MEAN_TOKEN_SUM = "seq-mean-token-sum"  # (1/B) Σ_b Σ_t m ℓ
    SEQ_MEAN_TOKEN_MEAN = "seq-mean-token-mean"  # (1/B) Σ_b (Σ_t m ℓ / Σ_t m)
    SEQ_MEAN_TOKEN_SUM_NORM = "seq-mean-token-sum-norm"  # Σ m ℓ / (B · L_const), Dr.GRPO


class PolicyLoss(StrEnum):
    """Built-in token-level policy losses (``POLICY_LOSSES``)."""

    PPO_CLIP = "ppo_clip"  # PPO clip with dual clip (Schulman 2017; Ye et al. 2020)
    REINFORCE = "reinforce"  # −sg(w)·A·log π_θ (bypass / pure rollout-correction mode)


class KLEstimator(StrEnum):
    """Schulman's per-sample KL estimators (k1, k2, k3), under our and verl's names."""

    K1 = "k1"  # log π − log π_ref; unbiased, high variance, can be negative
    K2 = "k2"  # ½(log π − log π_ref)²; biased, low variance
    K3 = "k3"  # r − 1 − log r, r = π_ref/π; unbiased and ≥ 0
    # verl's names (``kl_penalty_forward``): aliases of the above, plus |k1| and verl's clamped k3.
    KL = "kl"  # = k1
    ABS = "abs"  # |log π − log π_ref|
    MSE = "mse"  # = k2
    LOW_VAR_KL = "low_var_kl"  # k3 clamped to [−10, 10] as verl does
    # Straight-through: the base estimate's value, k2's gradient (verl ``kl_penalty`` with a "+" suffix).
    K1_PLUS = "k1+"
    K3_PLUS = "k3+"
    LOW_VAR_KL_PLUS = "low_var_kl+"


@dataclass(frozen=True)
class Entry(Generic[F]):
    """One registered function with the input names it requires."""

    name: str
    fn: F
    requires: frozenset[str]


class Registry(Generic[F]):
    """A name → function table with conflict checks and helpful lookup errors.

    Args:
        kind: what the entries are, used in error messages (e.g. ``"advantage estimator"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[F]] = {}

    def register(self, name: str | StrEnum, *, requires: Iterable[str] = ()) -> Callable[[F], F]:
        """Decorator: register the function under ``name``; raise if another function holds it."""

        def decorator(fn: F) -> F:
            self.add(name, fn, requires=requires)
            return fn

        return decorator

    def add(self, name: str | StrEnum, fn: F, *, requires: Iterable[str] = ()) -> None:
        """Register ``fn`` under ``name`` (non-decorator form)."""
        key = str(name)
        if not key:
            raise ValueError(f"{self.kind} name: expected a non-empty string, got {name!r}")
        if not callable(fn):
            raise ValueError(f"{self.kind} {key!r}: expected a callable, got {type(fn).__name__}")
        existing = self._entries.get(key)
        if existing is not None:
            if existing.fn is fn:
                return
            raise ValueError(
                f"{self.kind} {key!r}: expected an unused name, got one already registered to "
                f"{getattr(existing.fn, '__qualname__', existing.fn)!s}"
            )
        self._entries[key] = Entry(key, fn, frozenset(requires))

    def entry(self, name: str | StrEnum) -> Entry[F]:
        """Return the registered entry for ``name``; the error lists the available names."""
        key = str(name)
        try:
            return self._entries[key]
        except KeyError:
            available = ", ".join(sorted(self._entries)) or "(none)"
            raise ValueError(f"{self.kind}: expected one of {available}, got {key!r}") from None

    def get(self, name: str | StrEnum) -> F:
        """Return the function registered under ``name``; the error lists the available names."""
        return self.entry(name).fn

    def requires(self, name: str | StrEnum) -> frozenset[str]:
        """The input names the entry ``name`` declared."""
        return self.entry(name).requires

    def names(self) -> tuple[str, ...]:
        """All registered names, sorted."""
        return tuple(sorted(self._entries))

    def __contains__(self, name: object) -> bool:
        return str(name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, names={list(self.names())})"


ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = Registry("advantage estimator")
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry("policy loss")
AGGREGATION_MODES: Registry[Callable[..., Any]] = Registry("loss aggregation mode")
