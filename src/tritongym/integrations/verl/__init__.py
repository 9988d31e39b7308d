"""verl plug-in: tritongym's estimators, loss, agent loop and LR hook in verl's own extension points.

verl ≥ 0.9 imports every ``verl.plugins`` entry point on ``import verl`` (the driver and every Ray
worker); tritongym's entry point is this package, so ``pip install -e '.[verl]' torch==2.13.0`` (from
the clone, torch installed first: docs/training.md) is enough.
Importing it registers:

* advantage estimator ``trloo`` (``advantages``; ``algorithm.adv_estimator=trloo``);
* policy losses ``tritongym_drkernel`` (``policy_loss``; PPO dual clip + Dr.Kernel MRS,
  ``actor_rollout_ref.actor.policy_loss.loss_mode=tritongym_drkernel``) and ``tritongym_ppo`` (no MRS);
* the response-length LR decay hook when ``TRITONGYM_VERL_LR_DECAY`` is set (``lr_decay``);
* V1 trainer ``tritongym`` (``trainer``; verl's sync trainer plus Dr.Kernel's MRS and PRS per turn,
  ``trainer.v1.trainer_mode=tritongym``), when TransferQueue (verl's V1 trainer's store) is installed.

The ``tritongym_kernel`` agent loop (``agent_loop``) is not imported here (it pulls in verl's
rollout stack); verl imports it in its agent-loop workers through
``actor_rollout_ref.rollout.agent.agent_loop_manager_class`` (see docs/training.md).
"""

from __future__ import annotations

import importlib.util
import logging

from tritongym.integrations.verl import advantages, lr_decay, policy_loss

if importlib.util.find_spec("transfer_queue") is not None:  # without it verl's V1 trainers cannot run either
    from tritongym.integrations.verl import trainer  # noqa: F401  (registers the trainer mode)

try:
    lr_decay.install_from_env()
except ValueError as exc:
    # verl logs a failing plug-in at DEBUG level only; a mistyped setting must not pass unseen.
    logging.getLogger(__name__).error("tritongym: %s", exc)
    raise

__all__ = ["advantages", "lr_decay", "policy_loss"]
if "trainer" in globals():
    __all__.append("trainer")
