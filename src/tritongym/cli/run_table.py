"""What ``tritongym run`` prints and writes, locally or with ``--server``: one row per verdict.

With ``--json`` one JSON object per line on stdout; otherwise a table (problem, status, reward,
trials, seconds) and the last line of each failure's error. ``--out FILE`` gets the JSON lines
either way (its folder is created). ``--run-dir DIR`` also gets a run folder in KernelBench's layout
(`tritongym.bench.run_folder`) that ``tritongym report DIR`` reads. Both paths
(`tritongym.cli.cmd_run`, `tritongym.service.cli.cmd_run_remote`) feed the same rows, so a run reads
the same wherever it was evaluated.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritongym.cli.options import first_line


class RunTable:
    """Rows of one run: refused problems, verdicts, evaluator errors; counts and rewards for the summary.

    `write` prints one table line (a progress bar's ``write`` keeps the bar below the rows); `folder`
    is the `RunFolder` of ``--run-dir`` (None: no run folder).
    """

    def __init__(self, args: argparse.Namespace, write: Callable[[str], None] = print, folder: Any = None) -> None:
        self.json = bool(args.json)
        self.write = write
        self.folder = folder
        self.counts: dict[str, int] = {}
        self.rewards: list[float] = []
        path = getattr(args, "out", None)
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)  # `--out runs/x/results.jsonl` on a fresh clone
        self._out = open(path, "w", encoding="utf-8") if path else None  # noqa: SIM115 - closed by close()

    def __enter__(self) -> RunTable:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None

    def _record(self, line: dict[str, Any]) -> None:
        if self._out is not None:
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()
        if self.folder is not None:
            self.folder.record_row(line)
        if self.json:
            print(json.dumps(line), flush=True)

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def start(self, refused: list[tuple[str, str]], size: str) -> None:
        """The problems refused before any evaluation (no CPU size, over the pre-flight budget), then the header."""
        for problem_id, reason in refused:
            self._count("refused")
            self._record({"problem": problem_id, "refused": reason, "problem_size": size})
            if self.folder is not None:
                self.folder.refuse(problem_id, reason)
        if not self.json:
            print(f"{'problem':60s} {'status':20s} {'reward':>7s} {'trials':>7s} {'seconds':>8s}")
            for problem_id, reason in refused:
                print(f"{problem_id:60s} {'(refused)':20s}\n    {reason}")

    def error(self, head: dict[str, Any], shown: str, reason: str, job: Any = None) -> None:
        """A job that ended in an exception instead of a verdict (one problem's failure loses nothing else);
        `job` (a `SolutionJob`) puts it in the run folder as an incorrect sample."""
        self._count("error")
        self._record({**head, "error": reason})
        if self.folder is not None and job is not None:
            self.folder.add(job, {**head, "error": reason}, None)
        if not self.json:
            self.write(f"{shown[:60]:60s} {'(evaluator error)':20s}\n    {reason}")

    def verdict(self, head: dict[str, Any], shown: str, result: Any, job: Any = None) -> None:
        """One `EvalResult`: its JSON line, and its table row with the error's last line when it failed;
        `job` (a `SolutionJob`) puts its kernel and result files in the run folder."""
        from tritongym.evaluator.result import printable

        self._count(str(result.status))
        self.rewards.append(result.reward)
        line = {**head, **result.to_dict()}
        self._record(line)
        if self.folder is not None and job is not None:
            self.folder.add(job, line, result)
        if not self.json:
            passed = sum(t.passed for t in result.trials)
            self.write(f"{shown[:60]:60s} {str(result.status):20s} {result.reward:7.3f} "
                       f"{passed:>3d}/{len(result.trials):<3d} {result.duration_s:8.1f}")
            if result.error and not result.correct:
                self.write("    " + first_line(printable(result.error.strip().splitlines()[-1])))

    def summary(self, where: str = "") -> str:
        """``"N evaluated<where>: k ok, ...; mean reward x"`` (the caller adds how long it took)."""
        listed = ", ".join(f"{count} {status}" for status, count in sorted(self.counts.items()))
        mean = sum(self.rewards) / len(self.rewards) if self.rewards else 0.0
        return f"{sum(self.counts.values())} evaluated{where}: {listed}; mean reward {mean:.3f}"
