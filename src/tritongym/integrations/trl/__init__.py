"""TRL integration (``pip install -e '.[trl]' torch==2.13.0``; trl 1.16): the kernel environment in ``GRPOTrainer``.

* `KernelReward` / `AsyncKernelReward` (``rewards``): single-turn reward functions, the verdict of
  the real evaluator on the warm pool, with correctness/speedup/violation columns via ``log_extra``.
* `KernelRollout` (``rollout``): a multi-turn ``rollout_func`` on `KernelEnv` with ``env_mask``
  (feedback tokens 0) and per-turn rewards; `TrajectoryReward` is the reward TRL sees from it.
* `TRLOOGRPOTrainer` (``trainer``): ``GRPOTrainer`` with TRLOO turn advantages and PRS as a mask;
  `ResponseLengthLRCallback` (the response-length LR decay) and `RunLogCallback`.
* `run_trl_training` (``train``): ``tritongym train --trainer trl``; ``tiny`` builds ``--model tiny-random``.

Importing this package does not import TRL; the names that need it load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "KernelReward": "rewards", "AsyncKernelReward": "rewards", "TrajectoryReward": "rewards",
    "KernelRollout": "rollout", "Generation": "rollout", "sample_with_model": "rollout",
    "TRLOOGRPOTrainer": "trainer", "ResponseLengthLRCallback": "trainer", "RunLogCallback": "trainer",
    "turn_token_advantages": "trainer",
    "TrlTrainConfig": "train", "run_trl_training": "train", "require_trl": "train",
    "tiny_random_model": "tiny", "tiny_tokenizer": "tiny",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
