"""Autotuned candidate kernels: every config checked on the trials, and no GPU needed to choose.

Triton's `Autotuner` benchmarks its configs through the active GPU driver and keeps the fastest;
on the CPU tier there is no driver (``RuntimeError: 0 active drivers``), so an honest
``@triton.autotune(configs=[...several...])`` kernel, the most common shape of public and
LLM-written Triton, could not run at all. And on any tier, checking only the config the
autotuner picked leaves a wrong config (a block size the masks do not cover, a split-K that drops
a tail) unnoticed until another GPU, shape or Triton version picks it.

While the control is *selecting* (the correctness trials), the autotuner's benchmark is replaced
by a deterministic rotation: on trial ``t`` every autotuned kernel runs config ``t mod n`` of its
configs that survive ``prune_configs_by`` (pruning, ``key``, ``pre_hook``/``post_hook`` of the
config, and ``reset_to_zero``/``restore_value`` are Triton's own code paths, unchanged), and the
choice cache is cleared before each trial so the rotation is not frozen by the first choice. The
trials therefore cover ``min(n, trials)`` configs of each kernel; configs beyond that are named in
a notice. Each call reports which config every autotuned kernel ran; a failing trial names it.
`release` restores Triton's own benchmarking (a GPU's timing phase times the autotuner's choice).
"""

from __future__ import annotations

import weakref
from typing import Any


def _describe(config: Any) -> str:
    kwargs = getattr(config, "kwargs", {}) or {}
    parts = [f"{k}={v}" for k, v in kwargs.items()]
    for name in ("num_warps", "num_stages", "num_ctas"):
        value = getattr(config, name, None)
        if value is not None:
            parts.append(f"{name}={value}")
    return ", ".join(parts) or "default"


def _kernel_name(autotuner: Any) -> str:
    fn = getattr(autotuner, "fn", None)
    for _ in range(8):
        inner = getattr(fn, "fn", None)
        if inner is None:
            break
        fn = inner
    return getattr(fn, "__name__", type(autotuner).__name__)


class AutotuneControl:
    """Pins autotuned kernels to a rotating config while `selecting`; records what ran."""

    def __init__(self) -> None:
        self.selecting = True
        self.trial = 0
        self.tuners: weakref.WeakSet = weakref.WeakSet()
        self.ran: dict[int, tuple[str, str, int, int]] = {}
        #: Config positions each autotuner offered for benchmarking (the configs left after pruning).
        self.offered: dict[int, set[int]] = {}
        #: The configs each autotuner kept after `prune_configs_by`, in order (the rotation's ring).
        self.pruned: dict[int, list[Any]] = {}

    def select(self, trial: int) -> None:
        """Before a correctness call: trial `trial` runs config `trial mod n` of each kernel."""
        self.selecting = True
        self.trial = int(trial)
        self.ran = {}
        self.offered = {}
        for tuner in list(self.tuners):
            getattr(tuner, "cache", {}).clear()

    def release(self) -> None:
        """Triton's own benchmarking again (timing on a GPU uses the autotuner's choice)."""
        self.selecting = False
        for tuner in list(self.tuners):
            getattr(tuner, "cache", {}).clear()

    def report(self) -> list[dict[str, Any]]:
        """What each autotuned kernel ran since the last `select`."""
        return [{"kernel": kernel, "config": config, "index": index, "of": count}
                for kernel, config, index, count in self.ran.values()]

    # -- hooks (called from the patched Autotuner) ----------------------------------------
    def fake_timing(self, tuner: Any, config: Any) -> list[float]:
        """A 'timing' that makes the rotation's config the fastest of the pruned ones."""
        configs = list(tuner.configs)
        position = next((i for i, c in enumerate(configs) if c is config), 0)
        self.offered.setdefault(id(tuner), set()).add(position)
        # Rank among the configs left after pruning, so trial t runs pruned config t mod n.
        pruned = self.pruned.get(id(tuner)) or configs
        rank = next((i for i, c in enumerate(pruned) if c is config), position)
        return [float((rank - self.trial) % len(pruned)), 0.0, 0.0]

    def note(self, tuner: Any) -> None:
        configs = list(tuner.configs)
        config = getattr(tuner, "best_config", None)
        if config is None:
            return
        position = next((i for i, c in enumerate(configs) if c is config), 0)
        # Configs in play: those offered after pruning (one when pruning left one, or none ran).
        offered = sorted(self.offered.get(id(tuner), {position}))
        self.ran[id(tuner)] = (_kernel_name(tuner), _describe(config), offered.index(position) if position in offered
                               else 0, len(offered))


def install(interpret: bool) -> AutotuneControl:
    """Patch `triton.runtime.autotuner.Autotuner` at class level; call once, before the import.

    `interpret` is kept for the API's sake: both tiers rotate during correctness trials; only on
    the CPU tier is Triton's benchmark unusable altogether (no driver).
    """
    from triton.runtime.autotuner import Autotuner

    control = AutotuneControl()
    original_bench = Autotuner._bench
    original_run = Autotuner.run

    def _bench(self, *args, config, **meta):  # noqa: ANN001, ANN002, ANN003 - Triton's signature
        if control.selecting or interpret:
            return control.fake_timing(self, config)
        return original_bench(self, *args, config=config, **meta)

    def run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
        control.tuners.add(self)
        result = original_run(self, *args, **kwargs)
        control.note(self)
        return result

    original_prune = Autotuner.prune_configs

    def prune_configs(self, kwargs):  # noqa: ANN001 - Triton's signature
        pruned = original_prune(self, kwargs)
        control.pruned[id(self)] = list(pruned)
        return pruned

    prune_configs.__wrapped__ = original_prune  # type: ignore[attr-defined]
    Autotuner.prune_configs = prune_configs
    _bench.__wrapped__ = original_bench  # type: ignore[attr-defined]
    run.__wrapped__ = original_run  # type: ignore[attr-defined]
    Autotuner._bench = _bench
    Autotuner.run = run
    return control
