"""Outputs: the flags file the evaluator reads, and the Markdown report."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from tritongym.bench.audit.model import AuditFlag, AuditStatus, ProblemAudit
from tritongym.bench.audit.tolerance import _tidy
from tritongym.errors import ProblemError

FLAGS_FILE_VERSION = 1


def write_flags_json(audits: Sequence[ProblemAudit], path: str | os.PathLike[str], *, merge: bool = True,
                     generated: str | None = None) -> dict[str, Any]:
    """Write the flagged problems to `path` (the format the evaluator reads) and return the document.

    Format: ``{"version": 1, "generated": "<date>", "tool": "tritongym audit", "problems":
    {"<content_hash>": {"problem_id", "flags", "atol", "rtol", "note"}}}`` with one entry per
    audited problem that has at least one flag. ``atol``/``rtol`` are the recommended tolerance
    (apply the stricter of it and the configured one); null when none is needed or none exists
    (`note` says which). With `merge`, entries already in the file are kept unless this run
    audited the same problem (then its new result replaces or removes them).
    """
    path = Path(path)
    problems: dict[str, Any] = {}
    if merge and path.is_file():
        problems = dict(read_flags_json(path)["problems"])
    for audit in audits:
        if audit.status != AuditStatus.AUDITED:
            continue
        problems.pop(audit.content_hash, None)
    for audit in audits:
        if audit.status != AuditStatus.AUDITED or not audit.flags:
            continue
        entry = {"problem_id": audit.problem_id, "flags": [f.value for f in audit.flags],
                 "atol": _tidy(audit.override.atol) if audit.override else None,
                 "rtol": _tidy(audit.override.rtol) if audit.override else None, "note": audit.override_note}
        previous = problems.get(audit.content_hash)
        if previous is not None:  # the same source under two ids: the union of flags, the stricter tolerance
            entry["flags"] = sorted(set(previous["flags"]) | set(entry["flags"]))
            for key in ("atol", "rtol"):
                values = [v for v in (previous[key], entry[key]) if v is not None]
                entry[key] = min(values) if values else None
        problems[audit.content_hash] = entry
    document = {"version": FLAGS_FILE_VERSION, "generated": generated or datetime.date.today().isoformat(),
                "tool": "tritongym audit", "problems": dict(sorted(problems.items()))}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return document


def read_flags_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate a flags file written by `write_flags_json`."""
    document = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(document, dict) or document.get("version") != FLAGS_FILE_VERSION:
        raise ProblemError(f"{path}: not a version-{FLAGS_FILE_VERSION} audit flags file")
    known = {flag.value for flag in AuditFlag}
    for key, entry in document.get("problems", {}).items():
        if not {"problem_id", "flags", "atol", "rtol"} <= set(entry) or not set(entry["flags"]) <= known:
            raise ProblemError(f"{path}: malformed entry {key}")
    return document


def run_context(argv: Sequence[str], **budgets: Any) -> dict[str, str]:
    """Machine, software, date and commit for a report header (nanochat's figures-name-their-run rule)."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return {
        "command": " ".join(argv),
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPU cores, {device}; {platform.platform()}",
        "software": f"Python {platform.python_version()}, torch {torch.__version__}",
        **{k: str(v) for k, v in budgets.items()},
    }


def _level_name(level: int | None) -> str:
    return f"level {level}" if level is not None else "other"


def _num(value: float | None) -> str:
    return "–" if value is None else f"{value:.3g}"


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |"


def render_markdown(audits: Sequence[ProblemAudit], context: Mapping[str, str] | None = None) -> str:
    """The audit as Markdown: run context, summary per level, flag counts, flagged/skipped/failed lists."""
    lines: list[str] = []
    if context:
        lines += [_row("run", ""), _row("---", "---"), *[_row(k, v) for k, v in context.items()], ""]
    groups: list[int | None] = sorted({a.level for a in audits}, key=lambda v: (v is None, v or 0))
    lines += ["### Summary", "", _row("set", "problems", "audited", "skipped", "failed", "flagged"),
              _row(*["---"] * 6)]
    for name, chosen in [*((_level_name(g), [a for a in audits if a.level == g]) for g in groups),
                         ("all", list(audits))]:
        count = {s: sum(a.status == s for a in chosen) for s in AuditStatus}
        lines.append(_row(name, len(chosen), count[AuditStatus.AUDITED], count[AuditStatus.SKIPPED],
                          count[AuditStatus.FAILED], sum(a.flagged for a in chosen)))
    lines += ["", "### Flags (audited problems carrying each flag)", "",
              _row("flag", *(_level_name(g) for g in groups), "all"), _row(*["---"] * (len(groups) + 2))]
    for flag in AuditFlag:
        per = [sum(flag in a.flags for a in audits if a.level == g) for g in groups]
        lines.append(_row(f"`{flag.value}`", *per, sum(per)))
    lines += ["", "### Flagged problems", "",
              _row("problem", "flags", "max abs out", "std across inputs: max / frac < 0.01",
                   "input diff", "weight diff", "trivial passes (seeds)", "override", "note"),
              _row(*["---"] * 9)]
    for a in (a for a in audits if a.flagged):
        s = a.stats
        assert s is not None
        passes = ", ".join(f"{k}: {v}/{s.input_seeds}" for k, v in s.trivial_passes.items() if v) or "–"
        override = f"atol={a.override.atol:g}, rtol={a.override.rtol:g}" if a.override else "none"
        lines.append(_row(f"{a.problem_id} `{a.name}`", ", ".join(f.value for f in a.flags),
                          _num(s.max_abs_output),
                          f"{_num(s.max_std_across_inputs)} / {_num(s.fraction_std_below)}",
                          _num(s.input_seed_max_diff), _num(s.weight_seed_max_diff), passes, override,
                          a.override_note or ""))
    for status, title in ((AuditStatus.SKIPPED, "Skipped problems"), (AuditStatus.FAILED, "Failed problems")):
        chosen = [a for a in audits if a.status == status]
        lines += ["", f"### {title} ({len(chosen)})", "", _row("problem", "reason"), _row("---", "---")]
        lines += [_row(f"{a.problem_id} `{a.name}`", a.reason or "") for a in chosen]
    return "\n".join(lines) + "\n"
