"""Response-length-triggered LR decay (``tritongym.rl.ResponseLengthLRDecay``) inside verl's actor.

verl 0.9.1 has no LR-scheduler registry (the FSDP engine builds ``constant`` or ``cosine`` only)
and its driver cannot change a worker's learning rate, so the smallest hook lives in the actor
worker process itself:

* the ``tritongym_drkernel`` / ``tritongym_ppo`` policy loss records, on every micro-batch, the PPO
  mini-batch's mean number of model tokens per sequence, ``batch_num_tokens / global_batch_size`` from
  ``config.global_batch_info`` (verl all-reduces ``batch_num_tokens`` over data-parallel ranks, so
  every rank sees the same value and takes the same decision);
* a process-wide optimizer step pre-hook (``torch.optim.Optimizer.register_optimizer_step_pre_hook``)
  scales each param group's LR by the schedule's factor just before the actor's optimizer step,
  then feeds the step's length to the schedule. The LR verl's own scheduler set is kept as the
  base, so the factor composes with verl's warm-up/cosine instead of compounding.

Turn it on in every worker with an environment variable the plug-in reads on ``import verl``::

    TRITONGYM_VERL_LR_DECAY=1                                   # ResponseLengthLRDecay's defaults
    TRITONGYM_VERL_LR_DECAY=surge_factor=3,baseline_window=50,period_factor=1.8,min_lr_ratio=0.1,warmup_steps=0

(forward it to Ray workers with ``+ray_kwargs.ray_init.runtime_env.env_vars.TRITONGYM_VERL_LR_DECAY=1``).
Keys are ``ResponseLengthLRDecay``'s; leave ``warmup_steps=0`` when verl's ``optim.lr_warmup_steps``
already warms up. One optimizer step is one observation (Dr.Kernel: one mini-batch per training step).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import torch
from torch.optim import Optimizer
from torch.optim.optimizer import register_optimizer_step_pre_hook

from tritongym.rl import ResponseLengthLRDecay

__all__ = ["ENV_VAR", "ResponseLengthLRHook", "active_hook", "install", "install_from_env", "parse_options", "record",
           "uninstall"]

ENV_VAR = "TRITONGYM_VERL_LR_DECAY"
_INT_OPTIONS = {"baseline_window", "warmup_steps"}
_FLOAT_OPTIONS = {"surge_factor", "period_factor", "min_lr_ratio"}

_lock = threading.Lock()
_active: ResponseLengthLRHook | None = None


class ResponseLengthLRHook:
    """An optimizer step pre-hook that applies ``ResponseLengthLRDecay`` to any optimizer it sees.

    Args:
        **options: ``ResponseLengthLRDecay`` keyword arguments (surge_factor, baseline_window,
            period_factor, min_lr_ratio, warmup_steps).

    Only the actor's optimizer is touched: the first optimizer that steps after a ``record`` (verl
    runs the policy loss inside the actor's ``train_batch``, right before its optimizer step); a
    critic or any other optimizer in the same process keeps its LR.
    """

    def __init__(self, **options: Any) -> None:
        # The schedule runs on a one-parameter proxy whose base LR is 1, so its LR is the factor.
        self._proxy = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
        self.schedule = ResponseLengthLRDecay(self._proxy, **options)
        self.pending_length: float | None = None
        self._groups: dict[int, tuple[float, float]] = {}  # id(group) → (base LR, LR we set)
        self.handle: Any = None  # the torch hook handle, set by ``install``
        self.optimizer_id: int | None = None  # the actor's optimizer, bound at its first step

    @property
    def factor(self) -> float:
        """The multiplier the next optimizer step will get."""
        return float(self._proxy.param_groups[0]["lr"])

    def record(self, num_tokens: float, num_sequences: float) -> float:
        """Note the mean model tokens per sequence of the step about to be taken; returns it."""
        if num_sequences <= 0:
            raise ValueError(f"num_sequences: expected a value > 0, got {num_sequences}")
        self.pending_length = float(num_tokens) / float(num_sequences)
        return self.pending_length

    def __call__(self, optimizer: Optimizer, args: Any, kwargs: Any) -> None:
        if optimizer is self._proxy or self.pending_length is None:
            return
        if self.optimizer_id is None:
            # verl steps the actor's optimizer right after the micro-batches its policy loss ran on,
            # so the first optimizer to step after a record is the actor's; bind to it for good.
            self.optimizer_id = id(optimizer)
        elif id(optimizer) != self.optimizer_id:
            return
        factor = self.factor
        for group in optimizer.param_groups:
            base, ours = self._groups.get(id(group), (None, None))
            if ours is None or group["lr"] != ours:
                base = group["lr"]  # verl's scheduler (or the user) set a new LR since our last step
            group["lr"] = base * factor
            self._groups[id(group)] = (base, group["lr"])
        length, self.pending_length = self.pending_length, None
        self._proxy.step()  # a no-op (no gradient); keeps torch's scheduler-order check quiet
        self.schedule.step(length)


def parse_options(spec: str) -> dict[str, Any]:
    """``"1"`` → defaults; ``"key=value,..."`` → ``ResponseLengthLRDecay`` keyword arguments."""
    spec = spec.strip()
    if spec in ("", "0", "false", "off"):
        raise ValueError(f"{ENV_VAR}={spec!r} does not enable the decay; unset it instead")
    if spec in ("1", "true", "on"):
        return {}
    options: dict[str, Any] = {}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in _INT_OPTIONS | _FLOAT_OPTIONS:
            known = ", ".join(sorted(_INT_OPTIONS | _FLOAT_OPTIONS))
            raise ValueError(f"{ENV_VAR}: expected '1' or 'key=value,...' with keys {known}; got {item!r}")
        try:
            options[key] = int(value) if key in _INT_OPTIONS else float(value)
        except ValueError as exc:
            raise ValueError(f"{ENV_VAR}: {key} must be a number, got {value!r}") from exc
    return options


def install(**options: Any) -> ResponseLengthLRHook:
    """Install the process-wide hook (once; a second call with other options raises)."""
    global _active
    with _lock:
        if _active is not None:
            raise RuntimeError("the response-length LR decay hook is already installed in this process")
        hook = ResponseLengthLRHook(**options)
        hook.handle = register_optimizer_step_pre_hook(hook)
        _active = hook
        return hook


def uninstall() -> None:
    """Remove the process-wide hook (tests, or a process that trains something else next)."""
    global _active
    with _lock:
        if _active is not None:
            _active.handle.remove()
            _active = None


def install_from_env() -> ResponseLengthLRHook | None:
    """Install the hook when ``TRITONGYM_VERL_LR_DECAY`` is set (called on ``import verl``)."""
    spec = os.environ.get(ENV_VAR)
    if spec is None or _active is not None:
        return _active
    return install(**parse_options(spec))


def active_hook() -> ResponseLengthLRHook | None:
    """The installed hook, or None."""
    return _active


def record(global_batch_info: dict[str, Any]) -> dict[str, float]:
    """Called by the policy loss: feed the mini-batch's length to the hook, if one is installed."""
    hook = _active
    if hook is None:
        return {}
    tokens, sequences = global_batch_info.get("batch_num_tokens"), global_batch_info.get("global_batch_size")
    if tokens is None or sequences is None:
        raise ValueError(
            f"{ENV_VAR} is set but verl gave the policy loss no batch_num_tokens/global_batch_size "
            "(the legacy dp_actor path); use verl's engine workers (the 0.9 default) or unset it"
        )
    length = hook.record(float(tokens), float(sequences))
    return {"tritongym/lr_factor": hook.factor, "tritongym/mean_response_tokens": length}
