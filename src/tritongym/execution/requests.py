"""The execution layer's typed edges: what a job is (`EvalRequest`), what finishing means
(`Completed`), and what a pool says about itself (`PoolStats`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tritongym.evaluator.options import EvalOptions
    from tritongym.evaluator.result import EvalResult
    from tritongym.tasks import Problem


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation to run: a problem, a candidate solution, options, and an optional id.

    Attributes:
        problem: a `Problem` or the path of a problem file.
        solution: the candidate's source text (a `str`, always: a model's one-line reply
            ``/etc/x.py`` is text, never a file to read), or a `pathlib.Path` to a ``.py`` file.
        options: `EvalOptions` (None: the defaults).
        id: the caller's name for this job (kept in `Completed`; the pool does not interpret it).
        trusted_problem: the problem's code comes from this machine (a file, a built-in, a dataset
            the operator loaded) and its reference runs unjailed. False for problem code someone
            else sent (the service's clients): its reference runs in the candidate's jail, as
            untrusted as a candidate (with ``sandbox="none"`` there is no jail for either).
    """

    problem: Problem | str | os.PathLike[str]
    solution: str | os.PathLike[str]
    options: EvalOptions | None = None
    id: str | None = None
    trusted_problem: bool = True


@dataclass(frozen=True)
class Completed:
    """A finished job of `aevaluate_many`: its position in the input, the request, the verdict."""

    index: int
    request: EvalRequest
    result: EvalResult


@dataclass(frozen=True)
class PoolStats:
    """A pool's state, for progress displays and the service's metrics.

    Attributes:
        slots: evaluations that can run at once.
        busy: slots running an evaluation now.
        queued: jobs submitted and not started.
        completed: jobs that ended in a verdict.
        failed: jobs that ended in an exception (a broken problem, a machine fault).
        restarts: warm workers (fork servers) replaced after a crash or a poisoned device.
        sandbox: the sandbox mode the slots run candidates in (``bwrap`` or ``none``).
        launcher: how candidates start: ``forkserver`` (warm, forked per candidate) or ``spawn``.
        cancelled: jobs cancelled before or while running.
    """

    slots: int
    busy: int
    queued: int
    completed: int
    failed: int
    restarts: int
    sandbox: str
    launcher: str
    cancelled: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
