"""Exceptions raised by tritongym.

Exceptions signal a *caller's* mistake or an infrastructure failure, never a candidate's
behaviour: a broken, slow or hostile candidate is a verdict (`EvalResult.status`), not an
exception. Every exception derives from `TritongymError`::

    TritongymError
    ├── ProblemError          the reference problem is malformed or fails on its own
    ├── SolutionError         the solution cannot be read (missing file, not text)
    ├── OptionsError          an option has an invalid value or combination
    ├── DependencyError       an optional extra is missing (the message names it)
    └── EvaluatorError        the trusted side itself failed (could not start a process, ...)
"""

from __future__ import annotations


class TritongymError(Exception):
    """Base class of every exception tritongym raises."""


class ProblemError(TritongymError):
    """The reference problem is malformed, or its own `Model`/`get_inputs` failed."""


class SolutionError(TritongymError):
    """The solution could not be read at all (a missing file, undecodable bytes)."""


class OptionsError(TritongymError, ValueError):
    """An evaluation option has an invalid value or an invalid combination."""


class DependencyError(TritongymError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


class EvaluatorError(TritongymError):
    """The trusted evaluator failed (a worker could not start, a protocol bug on our side)."""
