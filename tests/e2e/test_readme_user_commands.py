"""README's commands as a user outside this setup runs them (issue 45 §§1, 4, 5).

The KernelBench commands name the Hugging Face id; no network here, so the snapshot a first download
leaves in the cache folder is written from the shared JSONL and the commands run as written. The
example output, the client snippet's file and the service's data folder are checked against what
the commands really do.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tritongym.tasks.loaders import hub_snapshot_path

from .helpers import FIXTURES

REPO = FIXTURES.parents[1]
README = (REPO / "README.md").read_text()


def readme_commands(prefix: str) -> list[list[str]]:
    """Every command in the README's bash blocks that starts with `prefix` (continuations joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    return [shlex.split(line.split("  #")[0]) for line in text.splitlines() if line.strip().startswith(prefix)]


def cli(args: list[str], env: dict[str, str] | None = None, timeout: float = 590) -> subprocess.CompletedProcess:
    assert args[0] == "tritongym"
    return subprocess.run([sys.executable, "-m", "tritongym.cli", *args[1:]], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


@pytest.fixture
def cached_hub(kernelbench_jsonl, tmp_path) -> dict[str, str]:
    """An environment whose cache holds the snapshot of ScalingIntelligence/KernelBench (as after a download)."""
    env = {**os.environ, "TRITONGYM_CACHE_DIR": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1"}
    snapshot = hub_snapshot_path("ScalingIntelligence/KernelBench", tmp_path / "cache" / "datasets")
    snapshot.parent.mkdir(parents=True)
    snapshot.write_text(kernelbench_jsonl.read_text())
    return env


def test_the_kernelbench_commands_name_no_path_of_this_setup():
    for prefix in ("tritongym run", "tritongym list", "tritongym eval", "tritongym audit"):
        for command in readme_commands(prefix):
            assert not any("shared/datasets" in part for part in command), command


def test_readme_kernelbench_level1_run_and_report_as_written(cached_hub, tmp_path):
    (run,) = [c for c in readme_commands("tritongym run") if "ScalingIntelligence/KernelBench" in c]
    run_dir = Path(run[run.index("--run-dir") + 1])
    assert run_dir.parts[0] == "runs"
    run[run.index("--run-dir") + 1] = str(tmp_path / run_dir)  # the same command, its output kept out of the clone
    proc = cli(run, cached_hub)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / run_dir / "results.jsonl").read_text().splitlines()]
    names = sorted(p.stem for p in (REPO / "examples" / "kernelbench" / "level1").glob("*.py"))
    assert sorted(r["name"] for r in rows) == names
    assert all(r["status"] == "ok" and r["problem_size"] == "cpu" for r in rows), [
        (r["name"], r["status"]) for r in rows]
    (report,) = [c for c in readme_commands("tritongym report") if c[-1] == str(run_dir)]
    report[-1] = str(tmp_path / run_dir)
    shown = cli(report, cached_hub, timeout=180)
    assert shown.returncode == 0, shown.stderr
    summary = json.loads((tmp_path / run_dir / "report.json").read_text())
    assert summary["per_level"][0]["level"] == 1 and summary["per_level"][0]["correctness"] == 1.0


def test_readme_list_and_eval_by_hub_id(cached_hub):
    (listing,) = [c for c in readme_commands("tritongym list") if "ScalingIntelligence/KernelBench" in c]
    proc = cli(listing, cached_hub, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("100 problems"), proc.stderr
    (evaluation,) = [c for c in readme_commands("tritongym eval") if "--id" in c]
    proc = cli([*evaluation, "--device", "cpu", "--json", "--trials", "2"], cached_hub, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok" and result["problem_id"] == "kernelbench/level1/19"


def test_readme_example_output_is_what_the_command_prints():
    (command,) = [c for c in readme_commands("tritongym eval") if "--json" in c]
    proc = cli(command, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    shown = re.search(r'"launches": (\d+)', README)
    assert shown and result["triton_launches"][0]["launches"] == int(shown.group(1))
    assert f'"status": "{result["status"]}"' in README and f'"reward": {result["reward"]}' in README


def test_the_client_snippets_read_files_that_exist():
    for text in (README, (REPO / "docs" / "service.md").read_text()):
        opened = re.findall(r'open\("([^"]+)"\)', text)
        assert opened and all((REPO / path).is_file() for path in opened), opened


def test_serve_keeps_its_job_store_out_of_the_working_directory(tmp_path):
    code = ("from tritongym.cli import build_parser\n"
            "args = build_parser().parse_args(['serve'])\n"
            "print(args.db)")
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == tmp_path / "data" / "tritongym" / "service.db"
    assert not any(tmp_path.glob("*.db"))
    (serve,) = readme_commands("tritongym serve")
    assert "--db" not in serve
    ignored = subprocess.run(["git", "check-ignore", "jobs.db", "jobs.events.jsonl", "jobs.db-wal"], cwd=REPO,
                             capture_output=True, text=True)
    assert ignored.stdout.split() == ["jobs.db", "jobs.events.jsonl", "jobs.db-wal"]
