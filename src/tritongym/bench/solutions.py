"""Pairing a folder of solution files with a problem set (what ``tritongym run`` evaluates).

Layouts recognised, per problem (every match is a job):

* ``<name>.py`` or ``level<L>/<name>.py`` (``19_ReLU.py``): one solution per problem;
* KernelBench's generation layout, ``level_<L>_problem_<N>_sample_<S>_kernel.py`` (as
  KernelBench's own scripts write them, several samples per problem), directly in the folder or in
  a ``level<L>/`` subfolder; ``<N>`` is the problem's number (``kernelbench/level1/19`` → 19).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tritongym.tasks.problem import Problem

_SAMPLE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


@dataclass(frozen=True)
class SolutionJob:
    """One (problem, solution file) pair; `sample` is the KernelBench sample index (None: single)."""

    problem: Problem
    solution: Path
    sample: int | None = None

    @property
    def label(self) -> str:
        """The problem id, with ``#S`` for a sample: what run tables and JSON lines show."""
        return self.problem.problem_id if self.sample is None else f"{self.problem.problem_id}#{self.sample}"

    @property
    def shown(self) -> str:
        """`label` with the problem's name when the id does not already hold it (``kernelbench/level1/19
        19_ReLU``): what the run table prints."""
        name = self.problem.name
        return self.label if name in self.problem.problem_id else f"{self.label} {name}"


def _number(problem: Problem) -> str | None:
    last = problem.problem_id.rsplit("/", 1)[-1]
    return last if last.isdigit() else None


def pair_solutions(problems: Sequence[Problem], folder: str | Path) -> tuple[list[SolutionJob], list[Problem]]:
    """(jobs in problem order then sample order, problems with no solution file)."""
    folder = Path(folder)
    samples: dict[tuple[int, str], list[tuple[int, Path]]] = {}
    places = [folder, *sorted(p for p in folder.glob("level*") if p.is_dir())]
    for place in places:
        for path in place.glob("level_*_problem_*_sample_*_kernel.py"):
            match = _SAMPLE.match(path.name)
            if match:
                key = (int(match.group(1)), str(int(match.group(2))))
                samples.setdefault(key, []).append((int(match.group(3)), path))
    jobs: list[SolutionJob] = []
    missing: list[Problem] = []
    for problem in problems:
        found: list[SolutionJob] = []
        number = _number(problem)
        if problem.level is not None and number is not None:
            for sample, path in sorted(samples.get((problem.level, str(int(number))), [])):
                found.append(SolutionJob(problem, path, sample))
        if not found:
            candidates = [folder / f"{problem.name}.py"]
            if problem.level is not None:
                candidates.insert(0, folder / f"level{problem.level}" / f"{problem.name}.py")
            single = next((c for c in candidates if c.is_file()), None)
            if single is not None:
                found.append(SolutionJob(problem, single))
        if found:
            jobs.extend(found)
        else:
            missing.append(problem)
    return jobs, missing
