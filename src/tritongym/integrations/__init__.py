"""Trainer integrations (optional extras; nothing here is imported by ``import tritongym``).

* ``tritongym.integrations.verl_plugin``: loaded by verl's ``verl.plugins`` entry point on
  ``import verl`` (``pip install 'tritongym[verl]'``); registers the ``trloo`` advantage estimator.
"""
