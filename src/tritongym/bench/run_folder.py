"""The run folder ``tritongym run --run-dir DIR`` writes: KernelBench's layout, read by ``tritongym report``.

KernelBench keeps a run in ``runs/<run_name>/``: one ``level_L_problem_P_sample_S_kernel.py`` per
generated sample. A tritongym run folder holds, per evaluated sample:

* ``level_L_problem_P_sample_S_kernel.py``: the solution that was evaluated (left in place when the
  solutions folder is the run folder itself, as KernelBench's generation scripts leave it);
* ``level_L_problem_P_sample_S_result.json``: its verdict (the `EvalResult` as JSON, with the problem,
  sample and solution path);

and for the whole run:

* ``results.jsonl``: every row as ``--out`` writes it (refused problems included);
* ``trajectories.jsonl``: one single-turn trajectory per sample in the agent runner's schema
  (`tritongym.env.records`), so ``tritongym report DIR`` gives a ``run`` the same metrics as an
  agent run: correctness, fast_p against eager and ``torch.compile`` where timed, per-level tables;
* ``run.json``: the command, evaluation options, size, versions, and the problems that were refused
  or had no solution file.

Problems that are not KernelBench's (the built-in suite, plain folders) get
``<problem id with / as _>_sample_S_kernel.py``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

RESULTS = "results.jsonl"
TRAJECTORIES = "trajectories.jsonl"
RUN_FILE = "run.json"
#: ``mode`` of the trajectories a run writes (one evaluation per sample, no model in the loop).
RUN_MODE = "run"


def sample_stem(problem: Any, sample: int) -> str:
    """``level_1_problem_19_sample_0`` for KernelBench's problems, ``builtin_07_softmax_sample_0`` otherwise."""
    number = problem.problem_id.rsplit("/", 1)[-1]
    if problem.level is not None and number.isdigit():
        return f"level_{problem.level}_problem_{int(number)}_sample_{sample}"
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', problem.problem_id)}_sample_{sample}"


def _provenance(options: Any, size: str) -> dict[str, Any]:
    import torch
    import triton

    from tritongym import __version__
    from tritongym.env.evaluators import options_to_dict

    device = getattr(options, "device", None)
    if device in (None, "auto"):
        device = "cuda" if torch.cuda.is_available() else "cpu"
    on_gpu = str(device).startswith("cuda") and torch.cuda.is_available()
    return {"tritongym": __version__, "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "platform": platform.platform(), "device": device,
            "device_name": torch.cuda.get_device_name(0) if on_gpu else platform.processor(),
            "evaluator": {"kind": "tritongym run"}, "evaluator_options": options_to_dict(options),
            "problem_size": size}


class RunFolder:
    """Writes one run folder as verdicts arrive (each file flushed at once, so a killed run keeps its rows)."""

    def __init__(self, directory: str | os.PathLike[str], *, options: Any, size: str,
                 argv: list[str] | None = None) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            from tritongym.errors import OptionsError

            raise OptionsError(f"--run-dir {self.directory} exists and is not a folder")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.provenance = _provenance(options, size)
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.argv = list(sys.argv if argv is None else argv)
        self.refused: list[dict[str, str]] = []
        self.missing: list[str] = []
        self.counts: dict[str, int] = {}
        # A run folder holds one run: a re-run replaces the run-wide files instead of mixing two runs.
        for name in (RESULTS, TRAJECTORIES):
            (self.directory / name).write_text("", encoding="utf-8")
        self._write_run_file(finished=False)

    def _append(self, name: str, record: dict[str, Any]) -> None:
        with (self.directory / name).open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            handle.flush()

    def _write_run_file(self, *, finished: bool) -> None:
        data = {"command": self.argv, "started_at": self.started, "provenance": self.provenance,
                "refused": self.refused, "missing_solutions": self.missing, "counts": self.counts,
                "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds") if finished else None}
        path = self.directory / RUN_FILE
        partial = path.with_name(RUN_FILE + ".partial")
        partial.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")
        partial.replace(path)

    def record_row(self, row: dict[str, Any]) -> None:
        """One line of ``results.jsonl`` (what ``--out`` gets)."""
        self._append(RESULTS, row)

    def refuse(self, problem_id: str, reason: str) -> None:
        self.refused.append({"problem": problem_id, "reason": reason})

    def add(self, job: Any, row: dict[str, Any], result: Any | None) -> None:
        """One evaluated sample: its kernel and result files, and its trajectory (`result` None: an
        evaluator error, counted as an incorrect sample)."""
        sample = job.sample if job.sample is not None else 0
        stem = sample_stem(job.problem, sample)
        kernel = self.directory / f"{stem}_kernel.py"
        solution = Path(job.solution)
        if not (kernel.exists() and kernel.resolve() == solution.resolve()):
            shutil.copyfile(solution, kernel)
        (self.directory / f"{stem}_result.json").write_text(
            json.dumps(row, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        status = str(result.status) if result is not None else "evaluator_error"
        self.counts[status] = self.counts.get(status, 0) + 1
        reward = float(result.reward) if result is not None else 0.0
        turn = {"turn": 0, "iteration": 0, "messages": [], "reply": "", "code": kernel.read_text(encoding="utf-8"),
                "void": False, "status": status, "result": result.to_dict() if result is not None else None,
                "reward": reward, "error": row.get("error"), "kernel_file": kernel.name,
                "solution": str(solution), "eval_s": float(getattr(result, "duration_s", 0.0) or 0.0)}
        problem = job.problem
        self._append(TRAJECTORIES, {
            "problem": problem.name, "problem_id": problem.problem_id, "level": problem.level,
            "problem_hash": problem.content_hash, "problem_size": problem.size, "sample": sample,
            "mode": RUN_MODE, "turn_budget": 1, "stop_reason": "evaluated", "turns": [turn], "best_turn": 0,
            "best_reward": reward, "recheck": None, "resumed_from_turn": None,
            "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "provenance": self.provenance})

    def close(self, missing: list[str] | None = None) -> None:
        self.missing = list(missing or [])
        self._write_run_file(finished=True)
