"""Exports of an agent run: one Parquet row per turn, and SFT chat records.

SFT records are ``{"messages": [...prompt, {"role": "assistant", "content": reply}], ...}``, the
shape TRL's ``SFTTrainer`` and most chat fine-tuning tools read, for either the best turn of each
trajectory (when it is correct) or every correct turn. Winners that failed their re-check are
left out: the fresh verdict is the one that counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def turn_rows(trajectories: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat per-turn rows (nested data as JSON text) for tables."""
    rows = []
    for traj in trajectories:
        recheck = traj.get("recheck") or {}
        for turn in traj["turns"]:
            result = turn.get("result") or {}
            usage = turn.get("usage") or {}
            rows.append({
                "problem": traj["problem"], "problem_id": traj["problem_id"], "sample": traj["sample"],
                "turn": turn["turn"], "iteration": turn.get("iteration", 0), "status": turn["status"],
                "void": turn["code"] is None, "correct": bool(result.get("correct", False)),
                "reward": float(turn["reward"]), "speedup": result.get("speedup"),
                "speedup_vs_compile": result.get("speedup_vs_compile"),
                "violations": json.dumps([v["code"] for v in result.get("violations", [])]),
                "prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": usage.get("completion_tokens"),
                "generation_s": turn.get("generation_s"), "eval_s": turn.get("eval_s"),
                "is_best_turn": turn["turn"] == traj.get("best_turn"),
                "recheck_status": recheck.get("status") if turn["turn"] == traj.get("best_turn") else None,
                "recheck_speedup": recheck.get("speedup") if turn["turn"] == traj.get("best_turn") else None,
                "reply": turn["reply"], "code": turn["code"], "feedback": turn.get("feedback"),
                "messages": json.dumps(turn["messages"], ensure_ascii=False),
                "result": json.dumps(result, ensure_ascii=False),
            })
    return rows


def export_parquet(trajectories: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write `turn_rows` to Parquet (needs pyarrow: the ``env`` or ``data`` extra); returns the row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = turn_rows(trajectories)
    table = pa.Table.from_pylist(rows) if rows else pa.table({})
    pq.write_table(table, str(path))
    return len(rows)


def sft_records(trajectories: Sequence[dict[str, Any]], which: str = "best") -> list[dict[str, Any]]:
    """Chat records of the best correct turn per trajectory (``best``) or of every correct turn (``correct``)."""
    if which not in ("best", "correct"):
        raise ValueError(f"which must be 'best' or 'correct', got {which!r}")
    records = []
    for traj in trajectories:
        recheck = traj.get("recheck")
        for turn in traj["turns"]:
            result = turn.get("result") or {}
            if not result.get("correct"):
                continue
            is_best = turn["turn"] == traj.get("best_turn")
            if which == "best" and not is_best:
                continue
            if is_best and recheck is not None and recheck.get("status") != "ok":
                continue
            records.append({"messages": [*turn["messages"], {"role": "assistant", "content": turn["reply"]}],
                            "problem_id": traj["problem_id"], "sample": traj["sample"], "turn": turn["turn"],
                            "reward": turn["reward"], "speedup": result.get("speedup")})
    return records


def export_sft(trajectories: Sequence[dict[str, Any]], path: str | os.PathLike[str], which: str = "best") -> int:
    """Write `sft_records` as JSON lines; returns the record count."""
    records = sft_records(trajectories, which)
    Path(path).write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return len(records)
