"""Both learning studies of issue 48 in one command: reward hacking (§1) and the early-stop ablation (§2).

Runs `benchmarks/reward_hacking.py` (the same RL run under a naive reward and under tritongym's) and
`benchmarks/learning.py --ablation --stop-on correct` (TRLOO against turn-GRPO where later turns have
fewer members) side by side, each in its own process: each trains on one thread, so on a 2-core
machine the two use both cores (the sandboxed evaluations are mostly cache hits). Each study writes
its folder, ``results.json`` and figure; this script writes ``OUT/studies.json`` (the commands, each
study's wall time and per-part profile, the load average before and after) and prints the wall time.

    python benchmarks/learning_studies.py --out runs/studies --figures docs        # seeds 0,1,2 (issue 48 §3: ≤ 30 min)
    python benchmarks/learning_studies.py --quick --out runs/studies-quick          # the CI size (≤ 5 min)

Meant for the TRL virtual environment (``pip install -e '.[trl]' matplotlib``; .ci/trl).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

#: (name, script, flags of the full study, flags of --quick, figure name)
STUDIES = (
    ("reward_hacking", "reward_hacking.py", [], ["--quick"], "reward_hacking.png"),
    ("early_stop", "learning.py", ["--ablation", "--stop-on", "correct"], ["--quick"], "learning_early_stop.png"),
)
FULL_SEEDS = "0,1,2"


def commands(out: Path, *, quick: bool, seeds: str | None, figures: Path | None) -> dict[str, list[str]]:
    """Each study's command line (the interpreter running this script, so the same venv)."""
    result = {}
    for name, script, full, quick_flags, figure in STUDIES:
        command = [sys.executable, str(HERE / script), "--out", str(out / name), *(quick_flags if quick else full)]
        chosen = seeds if seeds is not None else (None if quick else FULL_SEEDS)
        if chosen is not None:
            command += ["--seeds", chosen]
        command += ["--plot", str((figures if figures is not None else out / name) / figure)]
        result[name] = command
    return result


def part_profile(results: dict[str, Any]) -> dict[str, float]:
    """A study's wall time split: corpus, pretraining, and over its RL runs the trainer's generation,
    evaluation wait and update (`learning.run_profile`), plus what each run spent outside the trainer."""
    runs = results["runs"]
    total = {key: round(sum(r["profile"][key] for r in runs), 1)
             for key in ("train_s", "generation_s", "evaluation_s", "update_and_rest_s")}
    return {"corpus_s": results["timings"]["corpus_s"], "pretrain_s": results["timings"]["pretrain_s"],
            "rl_runs": len(runs), **total,
            "rl_outside_trainer_s": round(sum(r["wall_s"] for r in runs) - total["train_s"], 1),
            "wall_s": results["timings"]["wall_s"]}


def run(out: Path, *, quick: bool, seeds: str | None, figures: Path | None, log: Any = print) -> dict[str, Any]:
    """Both studies, concurrently; returns what ``OUT/studies.json`` holds. Raises if either failed."""
    out.mkdir(parents=True, exist_ok=True)
    if figures is not None:
        figures.mkdir(parents=True, exist_ok=True)
    lines = commands(out, quick=quick, seeds=seeds, figures=figures)
    load_before = os.getloadavg()
    started = time.monotonic()
    children = {}
    for name, command in lines.items():
        log_file = (out / f"{name}.log").open("w", encoding="utf-8")
        children[name] = (subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, cwd=HERE.parent),
                          log_file, time.monotonic())
        log(f"{name}: {' '.join(command[1:])} (log {out / f'{name}.log'})")
    walls, failed = {}, []
    for name, (child, log_file, child_started) in children.items():
        code = child.wait()
        log_file.close()
        walls[name] = round(time.monotonic() - child_started, 1)
        if code != 0:
            failed.append(f"{name} exited {code}; the end of {out / f'{name}.log'}:\n"
                          + "\n".join((out / f"{name}.log").read_text(encoding="utf-8").splitlines()[-30:]))
    if failed:
        raise RuntimeError("\n\n".join(failed))
    wall = time.monotonic() - started
    studies = {}
    for name in lines:
        results = json.loads((out / name / "results.json").read_text(encoding="utf-8"))
        studies[name] = {"command": " ".join(lines[name][1:]), "process_wall_s": walls[name],
                         "commit": results["commit"], "profile": part_profile(results)}
    summary = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "quick": quick,
               "wall_s": round(wall, 1), "load_average_before": [round(x, 2) for x in load_before],
               "load_average_after": [round(x, 2) for x in os.getloadavg()], "cores": os.cpu_count(),
               "studies": studies}
    (out / "studies.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="runs/studies", help="folder for both studies' folders and studies.json")
    parser.add_argument("--quick", action="store_true", help="both studies at their CI size (each script's --quick)")
    parser.add_argument("--seeds", default=None,
                        help=f"comma-separated RL seeds for both studies (default {FULL_SEEDS}; with --quick each "
                             "script's own quick seeds)")
    parser.add_argument("--figures", default=None,
                        help="write reward_hacking.png and learning_early_stop.png here (default: each study's folder)")
    args = parser.parse_args(argv)
    summary = run(Path(args.out), quick=args.quick, seeds=args.seeds,
                  figures=Path(args.figures) if args.figures else None, log=lambda m: print(m, flush=True))
    for name, study in summary["studies"].items():
        print(f"{name}: {study['process_wall_s']:.0f} s, {study['profile']}", flush=True)
    print(f"wall {summary['wall_s']:.0f} s for both studies (load average {summary['load_average_before'][0]:.1f} "
          f"before, {summary['load_average_after'][0]:.1f} after, {summary['cores']} cores)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
