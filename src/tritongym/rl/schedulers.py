"""Response-length-triggered learning-rate decay ("Beyond Precision", arXiv 2602.01826).

Family: learning-rate schedules as a training–inference mismatch fix.

References: Zhang, Li et al., *Beyond Precision: Training-Inference Mismatch is an Optimization
Problem and Simple LR Scheduling Fixes It*, arXiv 2602.01826 — abstract and blog TL;DR only;
trigger and constants from a third-party verl reproduction ("adaptive step decay") that claims to
follow the paper's appendix. Formalisation as in ``rl-algorithms.md`` §6 (tagged [S]/[R]):

    history = mean response length per optimizer step
    baseline = mean of the first W lengths (once W are seen)
    surge_step s* = first step s with l_s > κ·baseline   (one-shot)
    P = round(1.8·s*)
    lr(s) = lr0·warmup(s)                                  before the surge
    lr(s) = lr0·max(ρ_min, 0.5^⌊(s − s*)/P⌋)              from the surge on

Claims (abstract): gradient noise and mismatch grow together; a sudden surge in response length
precedes collapse; shrinking the LR suppresses the mismatch.

Differs from the reproduction: its LR table jumps from 2.5e-7 straight to 1e-7 at step 704 and
counts the halving clock from the end of warm-up; here the clock starts at the surge step and the
LR halves until the floor (the spec's reading; its fixture: surge 110, P = 198, 1e-6 → 5e-7 at
308 → 2.5e-7 at 506 → 1.25e-7 at 704 → 1e-7 from 902). Warm-up is linear, (s + 1)/warmup_steps.
Deliberately left out: re-triggering after a second surge, and the reproduction's cooldown.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

__all__ = ["ResponseLengthLRDecay"]


class ResponseLengthLRDecay(LRScheduler):
    """LR decay triggered by a surge in mean response length (arXiv 2602.01826 [S]; spec §6).

    Call ``scheduler.step(mean_response_length)`` once after every ``optimizer.step()``; the
    length belongs to the step just taken (index ``last_epoch`` before the call). A ``step()``
    without a length only advances the clock.

    Math:
        factor(s) = min(1, (s + 1)/warmup_steps)                       if no surge yet
        factor(s) = max(min_lr_ratio, 0.5^⌊(s − surge_step)/period⌋)   otherwise
        period = max(1, round(period_factor · surge_step));  lr = base_lr · factor

    Args:
        optimizer: a ``torch.optim.Optimizer``.
        surge_factor: κ, the multiple of the baseline length that counts as a surge.
        baseline_window: W, the number of first steps whose mean length is the baseline.
        period_factor: the halving period as a multiple of the surge step.
        min_lr_ratio: ρ_min, the floor as a fraction of the base LR.
        warmup_steps: linear warm-up length (0 disables).
        last_epoch: as in ``LRScheduler``.

    Defaults (spec §6(c), third-party reproduction of the paper's appendix): κ = 3.0, W = 50,
    period 1.8·surge step, ρ_min = 0.1, warm-up 10 steps.

    State: ``state_dict()`` / ``load_state_dict()`` carry ``surge_step``, ``period``, the baseline
    window and the clock, so a resumed run decays exactly as an uninterrupted one.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        *,
        surge_factor: float = 3.0,
        baseline_window: int = 50,
        period_factor: float = 1.8,
        min_lr_ratio: float = 0.1,
        warmup_steps: int = 10,
        last_epoch: int = -1,
    ) -> None:
        if surge_factor <= 0:
            raise ValueError(f"surge_factor: expected a value > 0, got {surge_factor}")
        if baseline_window < 1:
            raise ValueError(f"baseline_window: expected a positive int, got {baseline_window}")
        if period_factor <= 0:
            raise ValueError(f"period_factor: expected a value > 0, got {period_factor}")
        if not 0.0 <= min_lr_ratio <= 1.0:
            raise ValueError(f"min_lr_ratio: expected a value in [0, 1], got {min_lr_ratio}")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps: expected a value >= 0, got {warmup_steps}")
        self.surge_factor = float(surge_factor)
        self.baseline_window = int(baseline_window)
        self.period_factor = float(period_factor)
        self.min_lr_ratio = float(min_lr_ratio)
        self.warmup_steps = int(warmup_steps)
        self.window: list[float] = []  # first W lengths
        self.baseline: float | None = None
        self.surge_step: int | None = None
        self.period: int | None = None
        super().__init__(optimizer, last_epoch)

    def lr_factor(self, step: int) -> float:
        """The multiplier of the base LR at optimizer step ``step`` given the current surge state."""
        if self.surge_step is None or step < self.surge_step:
            if self.warmup_steps == 0:
                return 1.0
            return min(1.0, (step + 1) / self.warmup_steps)
        assert self.period is not None
        halvings = (step - self.surge_step) // self.period
        return max(self.min_lr_ratio, 0.5**halvings)

    def get_lr(self) -> list[float]:  # type: ignore[override]
        """LRs for step ``last_epoch`` (called by ``LRScheduler.step``)."""
        factor = self.lr_factor(self.last_epoch)
        return [base_lr * factor for base_lr in self.base_lrs]

    def observe(self, response_length: float, step: int | None = None) -> None:
        """Record the mean response length of optimizer step ``step`` (default ``last_epoch``)."""
        length = float(response_length)
        if not math.isfinite(length) or length < 0:
            raise ValueError(f"response_length: expected a finite value >= 0, got {response_length}")
        s = self.last_epoch if step is None else int(step)
        if self.baseline is None:
            self.window.append(length)
            if len(self.window) >= self.baseline_window:
                self.baseline = sum(self.window) / len(self.window)  # mean of the first W
        if (
            self.surge_step is None
            and self.baseline is not None
            and length > self.surge_factor * self.baseline
        ):
            self.surge_step = s  # one-shot trigger
            self.period = max(1, round(self.period_factor * s))

    def step(self, response_length: float | None = None, epoch: int | None = None) -> None:  # type: ignore[override]
        """Record the just-finished step's mean response length (if given), then advance the LR."""
        if response_length is not None:
            self.observe(response_length)
        if epoch is not None:
            warnings.warn(
                "ResponseLengthLRDecay.step: the epoch argument is ignored", UserWarning, stacklevel=2
            )
        super().step()

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer, as ``LRScheduler`` does (surge state included)."""
        state = {key: value for key, value in self.__dict__.items() if key != "optimizer"}
        state["window"] = list(self.window)  # a copy: later steps must not edit a saved state
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state written by ``state_dict``."""
        self.__dict__.update(state_dict)
        self.window = list(self.window)
