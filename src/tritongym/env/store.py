"""The trajectory store of an agent run: append-only JSON lines that survive a kill.

``DIR/turns.jsonl`` journals every completed turn as soon as it ends (one line, flushed and
fsynced); ``DIR/trajectories.jsonl`` gets one object per (problem, sample) when its trajectory is
finished. A re-run reads both: finished trajectories are skipped, unfinished ones continue from
their last journaled turn. A line cut short by a kill is ignored. ``DIR/run.json`` holds the
run's settings, so a re-run with different settings is refused instead of mixing two runs.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TRAJECTORIES = "trajectories.jsonl"
JOURNAL = "turns.jsonl"
RUN_FILE = "run.json"


def trajectory_key(problem_id: str, sample: int) -> str:
    return f"{problem_id}#{sample}"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Objects of a JSON-lines file; a truncated or corrupt line (a killed writer) is skipped."""
    if not path.is_file():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                yield value


def load_trajectories(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The finished trajectories of a run folder (the last record wins for a repeated key)."""
    records: dict[str, dict[str, Any]] = {}
    for record in read_jsonl(Path(directory) / TRAJECTORIES):
        records[trajectory_key(record["problem_id"], record["sample"])] = record
    return list(records.values())


class TrajectoryStore:
    """Appends turns and trajectories to a run folder; thread- and task-safe."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._repair(self.directory / JOURNAL)
        self._repair(self.directory / TRAJECTORIES)

    @staticmethod
    def _repair(path: Path) -> None:
        """End a file cut mid-line by a kill with a newline, so the next record starts on its own line."""
        if path.is_file() and path.stat().st_size:
            with path.open("rb+") as handle:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    handle.write(b"\n")

    def _append(self, name: str, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
        with self._lock, (self.directory / name).open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())

    def append_turn(self, key: str, turn: dict[str, Any]) -> None:
        self._append(JOURNAL, {"key": key, **turn})

    def append_trajectory(self, trajectory: dict[str, Any]) -> None:
        self._append(TRAJECTORIES, trajectory)

    def finished_keys(self) -> set[str]:
        return {trajectory_key(r["problem_id"], r["sample"]) for r in read_jsonl(self.directory / TRAJECTORIES)
                if "problem_id" in r and "sample" in r}

    def journaled_turns(self) -> dict[str, list[dict[str, Any]]]:
        """Journaled turns per key, in turn order, one per index (a repeated index keeps the first)."""
        turns: dict[str, dict[int, dict[str, Any]]] = {}
        for record in read_jsonl(self.directory / JOURNAL):
            key = record.pop("key", None)
            if key is None or "turn" not in record:
                continue
            turns.setdefault(key, {}).setdefault(int(record["turn"]), record)
        result = {}
        for key, by_index in turns.items():
            ordered = []
            for index in range(len(by_index)):  # only a gap-free prefix 0..n-1 can be continued
                if index not in by_index:
                    break
                ordered.append(by_index[index])
            result[key] = ordered
        return result

    def check_settings(self, settings: dict[str, Any]) -> None:
        """Record `settings` on the first run; on a re-run, refuse settings that differ."""
        path = self.directory / RUN_FILE
        if path.is_file():
            previous = json.loads(path.read_text(encoding="utf-8"))
            changed = sorted(k for k in set(previous) | set(settings) if previous.get(k) != settings.get(k))
            if changed:
                raise ValueError(f"{self.directory} holds a run with different settings ({', '.join(changed)}); "
                                 "use another --out folder, or the same settings to resume")
            return
        path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
