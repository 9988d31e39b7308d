"""`tritongym report DIR [--compare OTHER]`: report.md, report.html, report.json and PNG plots.

The HTML is self-contained (inline CSS, plots embedded as base64 PNG, no scripts, no CDN), so it
can be attached to a pull request or mailed. Metric definitions: `tritongym.bench.metrics`.
"""

from __future__ import annotations

import base64
import html
import json
import os
import re
from pathlib import Path
from typing import Any

from tritongym.bench import metrics
from tritongym.env.store import load_trajectories

CPU_NOTE = ("Speedups were not measured in this run (CPU: the Triton interpreter says nothing about GPU speed), "
            "so this report gives correctness only; fast_p and speedups need a GPU run.")

DEFINITIONS = [
    ("task", "a problem; a task with several samples counts the mean of its samples, so every task weighs the same"),
    ("final kernel", "the best turn of a trajectory (highest reward, earliest on ties); its figures are those of "
                     "the fresh re-check when the run made one"),
    ("correctness", "fraction of tasks whose final kernel is correct (status ok)"),
    ("fast_p", "fraction of all tasks whose final kernel is correct and has speedup > p (strict; KernelBench "
               "score.py); incorrect kernels count as failures"),
    ("geomean speedup", "geometric mean of the speedup over correct final kernels with a measured speedup"),
    ("95% CI", "percentile bootstrap over tasks, 2,000 resamples, seed 0"),
    ("best-by-turn k", "over all trajectories, whether the best of the first k+1 turns is correct (Dr.Kernel)"),
    ("void-turn rate", "replies without a code block / turns at that index"),
    ("violation rate", "evaluated turns with status integrity_violation / evaluated turns at that index"),
    ("winner's curse gap", "geomean selection-time speedup / geomean re-check speedup of the same winners"),
    ("by level", "the same metrics over the tasks of each KernelBench level (KernelBench's per-level tables)"),
]

#: The p of KernelBench's own fast_p tables (the per-level columns; the run-wide table adds 1.2).
LEVEL_FAST_P = ("0", "1", "1.5", "2")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _ci(ci: Any, pct: bool = True) -> str:
    if not ci:
        return ""
    low, high = ci
    return f" [{_pct(low)}, {_pct(high)}]" if pct else f" [{low:.3g}, {high:.3g}]"


def _num(value: float | None, digits: str = ".3g") -> str:
    return "n/a" if value is None else format(value, digits)


def _speed(value: float | None) -> str:
    """A speedup with its ``x``, or ``n/a`` (never ``n/ax``)."""
    return "n/a" if value is None else f"{value:.3g}x"


def _plots(summary: dict[str, Any], other: dict[str, Any] | None, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    rows = summary["per_turn"]
    turns = [r["turn"] for r in rows]

    def save(fig, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    if rows and summary.get("kind") != "run":  # a run's samples have one turn each: no curves by turn
        fig, ax = plt.subplots(figsize=(6, 3.6))
        ax.plot(turns, [r["correct_rate"] for r in rows], marker="o", label="correct at turn")
        ax.plot(turns, [r["best_correct_rate"] for r in rows], marker="s", label="best-by-turn correct")
        if other and other["per_turn"]:
            ax.plot([r["turn"] for r in other["per_turn"]], [r["best_correct_rate"] for r in other["per_turn"]],
                    marker="s", linestyle="--", label="best-by-turn correct (compared run)")
        if summary["speed_measured"]:
            ax.plot(turns, [r["best_fast_1.2"] for r in rows], marker="^", label="best-by-turn fast_1.2")
        ax.set_xlabel("turn")
        ax.set_ylabel("fraction")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(turns)
        ax.legend(fontsize=8)
        ax.set_title("Correctness by turn")
        save(fig, "correctness_by_turn.png")

        fig, ax = plt.subplots(figsize=(6, 3.2))
        ax.plot(turns, [r["void_rate"] for r in rows], marker="o", label="void-turn rate")
        ax.plot(turns, [r["violation_rate"] if r["violation_rate"] is not None else float("nan") for r in rows],
                marker="x", label="integrity-violation rate")
        ax.set_xlabel("turn")
        ax.set_ylabel("fraction")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xticks(turns)
        ax.legend(fontsize=8)
        ax.set_title("Void turns and violations by turn")
        save(fig, "rates_by_turn.png")

        if any(r["mean_completion_tokens"] for r in rows):
            fig, ax = plt.subplots(figsize=(6, 3.2))
            nan = float("nan")
            ax.plot(turns, [r["mean_prompt_tokens"] or nan for r in rows], marker="o", label="prompt tokens")
            ax.plot(turns, [r["mean_completion_tokens"] or nan for r in rows], marker="s", label="completion tokens")
            ax.set_xlabel("turn")
            ax.set_ylabel("mean tokens")
            ax.set_xticks(turns)
            ax.legend(fontsize=8)
            ax.set_title("Tokens per turn")
            save(fig, "tokens_by_turn.png")

    if summary["speed_measured"]:
        fig, ax = plt.subplots(figsize=(6, 3.4))
        series = [("vs eager", summary["vs_eager"])]
        if summary["vs_compile"]:
            series.append(("vs torch.compile", summary["vs_compile"]))
        width = 0.8 / len(series)
        for i, (label, block) in enumerate(series):
            keys = list(block["fast_p"])
            values = [block["fast_p"][k]["value"] or 0.0 for k in keys]
            errors = [[v - (block["fast_p"][k]["ci95"] or (v, v))[0] for k, v in zip(keys, values, strict=True)],
                      [(block["fast_p"][k]["ci95"] or (v, v))[1] - v for k, v in zip(keys, values, strict=True)]]
            ax.bar([j + i * width for j in range(len(keys))], values, width=width, yerr=errors, capsize=3, label=label)
            ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(keys))], [f"p={k}" for k in keys])
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("fraction of tasks")
        ax.set_title("fast_p (correct and speedup > p), 95% CI")
        ax.legend(fontsize=8)
        save(fig, "fast_p.png")
    return written


def _provenance_line(prov: dict[str, Any]) -> str:
    """One sentence naming the model, versions, device and run settings that are recorded."""
    parts = []
    if prov.get("model"):
        parts.append(f"model `{prov['model']}`")
    if prov.get("device"):
        parts.append(f"device {prov['device']}" + (f" ({prov['device_name']})" if prov.get("device_name") else ""))
    parts += [f"{name} {prov[name]}" for name in ("tritongym", "torch", "triton") if prov.get(name)]
    feedback = prov.get("feedback")
    if isinstance(feedback, dict):
        chars = feedback.get("max_chars")
        parts.append(f"feedback {feedback.get('level')}" + (f" ({chars} chars)" if chars is not None else ""))
    if prov.get("history"):
        parts.append(f"history `{prov['history']}`")
    tts = prov.get("tts")
    if isinstance(tts, dict):
        parts.append(f"{tts.get('mode')} TTS: {tts.get('turns')} turns × {tts.get('iterations')} iterations, "
                     f"keep {tts.get('keep_best')}, {tts.get('evaluation_budget')} evaluations per trajectory")
    sampling = prov.get("sampling")
    if isinstance(sampling, dict):
        parts.append(", ".join(f"{k} {v}" for k, v in sampling.items() if v is not None))
    return ("Run: " + "; ".join(p for p in parts if p) + ".") if parts else ""


def _level_table(rows: list[dict[str, Any]]) -> list[str]:
    """KernelBench's per-level table: correctness and fast_p at p = 0, 1, 1.5, 2 against eager, and
    against torch.compile where it was timed."""
    blocks = [(label, key) for label, key in (("eager", "vs_eager"), ("compile", "vs_compile"))
              if any(r[key] for r in rows)]
    head = ["level", "tasks", "samples", "correct"] + [f"fast_{p} ({label})" for label, _ in blocks
                                                        for p in LEVEL_FAST_P]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = ["-" if r["level"] is None else str(r["level"]), str(r["tasks"]), str(r["samples"]),
                 _pct(r["correctness"])]
        for _, key in blocks:
            fast = (r[key] or {}).get("fast_p", {})
            cells += [_pct((fast.get(p) or {}).get("value")) for p in LEVEL_FAST_P]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _markdown(summary: dict[str, Any], diff: dict[str, Any] | None, plots: list[Path], title: str) -> str:
    single = summary.get("kind") == "run"
    unit = "samples" if single else "trajectories"
    lines = [f"# {title}", "", f"{summary['tasks']} tasks, {summary['trajectories']} {unit} "
             f"(samples per task: {', '.join(map(str, summary['samples_per_task']))})"
             + (", each evaluated once (tritongym run)." if single else "."), ""]
    if summary.get("provenance"):
        lines += [_provenance_line(summary["provenance"]), ""]
    corr = summary["correctness"]
    lines += ["| metric | value | 95% CI |", "|---|---|---|",
              f"| correctness | {_pct(corr['value'])} | {_ci(corr['ci95']).strip()} |"]
    for label, key in (("vs eager", "vs_eager"), ("vs torch.compile", "vs_compile")):
        block = summary[key]
        if not block:
            continue
        for p, entry in block["fast_p"].items():
            lines.append(f"| fast_{p} ({label}) | {_pct(entry['value'])} | {_ci(entry['ci95']).strip()} |")
        geo = block["geomean_speedup_correct"]
        lines.append(f"| geomean speedup, correct ({label}, n={geo['n']}) | {_speed(geo['value'])} | "
                     f"{_ci(geo['ci95'], pct=False).strip()} |")
    lines.append("")
    if not summary["speed_measured"]:
        lines += [f"**{CPU_NOTE}**", ""]
    levels = summary.get("per_level") or []
    if any(r["level"] is not None for r in levels):
        lines += ["## By level", ""] + _level_table(levels) + [""]
    if not single:
        lines += ["## By turn", "", "| turn | n | correct | best-by-turn correct | fast_1.2 | best fast_1.2 | void | "
                  "violations | prompt tok | completion tok |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summary["per_turn"] if not single else []:
        lines.append(f"| {r['turn']} | {r['n']} | {_pct(r['correct_rate'])} | {_pct(r['best_correct_rate'])} | "
                     f"{_pct(r['fast_1.2'])} | {_pct(r['best_fast_1.2'])} | {_pct(r['void_rate'])} | "
                     f"{_pct(r['violation_rate'])} | {_num(r['mean_prompt_tokens'], '.0f')} | "
                     f"{_num(r['mean_completion_tokens'], '.0f')} |")
    if summary.get("violation_codes"):
        lines += ["", "Integrity violations (evaluated turns carrying each code): " + ", ".join(
            f"`{code}` {count}" for code, count in summary["violation_codes"].items()) + "."]
    lines += ["", "## By task", "", "| task | name | samples | correct | best speedup | re-checked |",
              "|---|---|---|---|---|---|"]
    for row in summary.get("per_task", []):
        speed = "n/a" if row["best_speedup"] is None else f"{row['best_speedup']:.3g}x"
        lines.append(f"| {row['problem_id']} | {row.get('name') or '-'} | {row['samples']} | {row['correct']} | "
                     f"{speed} | {row['rechecked']} |")
    wc = summary["winners_curse"]
    if not single:
        lines += ["", "## Re-check of the selected winners", "",
                  f"{wc['rechecked']} winners re-checked with a fresh evaluation (new processes, new secret seeds); "
                  f"{wc['failed_recheck']} failed it. Geomean speedup at selection "
                  f"{_speed(wc['selection_geomean_speedup'])}, "
                  f"at re-check {_speed(wc['recheck_geomean_speedup'])} (gap {_num(wc['gap'])}). Reported figures "
                  "are the re-check's.", ""]
    else:
        lines.append("")
    if diff is not None:
        delta = diff["correctness_delta"]
        lines += ["## Compared with the other run", "",
                  f"{diff['shared_tasks']} shared tasks; correctness delta {_num(delta['value'], '+.3f')}"
                  f"{_ci(delta['ci95'], pct=False)}; gained: {_named(diff['gained'], diff) or 'none'}; "
                  f"lost: {_named(diff['lost'], diff) or 'none'}.", ""]
        for p, entry in (diff.get("fast_p_delta") or {}).items():
            lines.append(f"* fast_{p} delta: {_num(entry['value'], '+.3f')}{_ci(entry['ci95'], pct=False)}")
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots] + [""]
    lines += ["## Definitions", ""] + [f"* **{name}**: {text}" for name, text in DEFINITIONS] + [""]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))  # sections left out leave no run of blank lines


def _named(problem_ids: list[str], diff: dict[str, Any]) -> str:
    """``kernelbench/level1/19 (19_ReLU)``: the name beside the id, unless the id already ends in it."""
    names = diff.get("names") or {}
    return ", ".join(f"{pid} ({names[pid]})" if names.get(pid) and not pid.endswith(f"/{names[pid]}") else pid
                     for pid in problem_ids)


def _html(markdown_text: str, plots: list[Path], title: str) -> str:
    """A small, dependency-free rendering of the report's Markdown subset, plots inlined."""
    embedded = {p.name: base64.b64encode(p.read_bytes()).decode("ascii") for p in plots}
    body: list[str] = []
    table: list[list[str]] = []

    def flush_table() -> None:
        if table:
            head, *rest = table
            body.append("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>" + "".join(
                "<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rest) + "</table>")
            table.clear()

    def inline(text: str) -> str:
        out = html.escape(text)
        parts = out.split("**")
        out = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))
        parts = out.split("`")
        return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))

    for line in markdown_text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                table.append([inline(c) for c in cells])
            continue
        flush_table()
        if line.startswith("!["):
            name = line[line.index("(") + 1: -1]
            body.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{embedded[name]}">')
        elif line.startswith("## "):
            body.append(f"<h2>{inline(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{inline(line[2:])}</h1>")
        elif line.startswith("* "):
            body.append(f"<li>{inline(line[2:])}</li>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
    flush_table()
    style = ("body{font-family:system-ui,sans-serif;max-width:60em;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;"
             "text-align:left}th{background:#f3f3f3}img{max-width:100%;display:block;margin:1em 0}"
             "code{background:#f3f3f3;padding:0 .2em}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def write_report(directory: str | os.PathLike[str], compare_to: str | os.PathLike[str] | None = None,
                 out: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Write the report of the run in `directory` (into `out`, default the same folder); returns the paths."""
    directory = Path(directory)
    if directory.is_file():
        raise FileNotFoundError(f"{directory} is a file (a 'run --out' results file?); report reads a run folder: "
                                "'tritongym run --run-dir DIR' or 'tritongym agent --out DIR' writes one")
    if not directory.is_dir():
        raise FileNotFoundError(f"run folder not found: {directory}")
    trajectories = load_trajectories(directory)
    if not trajectories:
        raise FileNotFoundError(f"no finished trajectories in {directory / 'trajectories.jsonl'}")
    target = Path(out) if out is not None else directory
    target.mkdir(parents=True, exist_ok=True)
    summary = metrics.summarize(trajectories)
    summary["provenance"] = trajectories[0].get("provenance")
    summary["speed_note"] = None if summary["speed_measured"] else CPU_NOTE
    summary["definitions"] = dict(DEFINITIONS)
    other_summary = diff = None
    if compare_to is not None:
        others = load_trajectories(compare_to)
        if not others:
            raise FileNotFoundError(f"no finished trajectories in {Path(compare_to) / 'trajectories.jsonl'}")
        other_summary = metrics.summarize(others, bootstrap=False)
        diff = metrics.compare(trajectories, others)
        summary["compare"] = {"other": str(compare_to), **diff}
    plots = _plots(summary, other_summary, target)
    # The folder may come from `tritongym agent` or from a trainer (`tritongym train`): a neutral title.
    title = f"tritongym report: {directory.name}"
    markdown_text = _markdown(summary, diff, plots, title)
    paths = {"markdown": target / "report.md", "html": target / "report.html", "json": target / "report.json"}
    paths["markdown"].write_text(markdown_text, encoding="utf-8")
    paths["html"].write_text(_html(markdown_text, plots, title), encoding="utf-8")
    summary["plots"] = [p.name for p in plots]
    paths["json"].write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    for plot in plots:
        paths[plot.stem] = plot
    return paths
