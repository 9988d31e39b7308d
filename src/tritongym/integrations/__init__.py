"""Trainer integrations (optional extras; nothing here is imported by ``import tritongym``).

* ``tritongym.integrations.verl``: loaded by verl's ``verl.plugins`` entry point on
  ``import verl`` (``pip install -e '.[verl]' torch==2.13.0`` from the clone, torch installed
  first: docs/training.md); registers the ``trloo`` advantage estimator
  and the ``tritongym_drkernel`` policy loss; its ``agent_loop`` module holds the
  ``tritongym_kernel`` agent loop and ``lr_decay`` the response-length LR hook.
* ``tritongym.integrations.trl``: TRL 1.16 (``pip install -e '.[trl]' torch==2.13.0``): reward functions, a
  multi-turn ``rollout_func`` on `KernelEnv`, ``TRLOOGRPOTrainer``, callbacks, ``tiny-random``.
* ``tritongym.integrations.openenv``: the environment as an OpenEnv server (``pip install -e
  '.[openenv]' torch==2.13.0``; ``tritongym openenv``; docs/openenv.md).
* ``tritongym.integrations.cli``: ``tritongym train --trainer trl``.
"""
