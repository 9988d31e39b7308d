"""The names of the input families (`families` draws them): standard library only.

`EvalOptions` checks ``input_families`` against these without importing torch, so a client that
only builds options (``tritongym eval --server``) never loads it.
"""

FAMILY_TASK = "get_inputs"
PERTURBATION_FAMILIES = ("negated", "scaled", "offset")
FAMILIES = (FAMILY_TASK, *PERTURBATION_FAMILIES)
