"""Trainer integrations (optional extras; nothing here is imported by ``import tritongym``).

* ``tritongym.integrations.verl_plugin``: loaded by verl's ``verl.plugins`` entry point on
  ``import verl`` (``pip install 'tritongym[verl]'``); registers the ``trloo`` advantage estimator.
* ``tritongym.integrations.trl``: TRL 1.16 (``pip install 'tritongym[trl]'``): reward functions, a
  multi-turn ``rollout_func`` on `KernelEnv`, ``TRLOOGRPOTrainer``, callbacks, ``tiny-random``.
* ``tritongym.integrations.cli``: ``tritongym train --trainer trl``.
"""
