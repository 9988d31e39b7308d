"""Mutation testing with mutmut 3: the verdict- and reward-deciding modules (issue 14), and the execution,
service and environment modules around them (issue 27).

For each module, mutmut plants small bugs one at a time (an operator flipped, a constant changed, a
call argument dropped, ...) and runs the module's *fast unit tests* against each; a mutant the tests
do not notice "survives". The score is Stryker's: (killed + timed out) / (killed + timed out + survived
+ no tests); a mutant that makes the tests run past mutmut's time limit is detected (an endless loop or a
huge allocation), and a mutant no test even reaches counts against the module.

Each module runs in its own throw-away workspace (``--workdir``/<module>): a copy of ``src/``,
``tests/`` and ``pyproject.toml`` plus a ``setup.cfg`` that tells mutmut which single file to mutate
and which test files to run. Nothing is written into the repository, and ``pyproject.toml`` needs no
``[tool.mutmut]`` table. mutmut (3.8) only mutates code inside functions and methods: module constants and
dataclass field defaults are not mutated (tests/unit/evaluator/test_defaults.py pins those).

Not in CI: a module takes minutes to tens of minutes on a 2-core machine.

Usage (needs ``pip install -e .[test,mutation]``; tests the committed HEAD unless ``--revision`` says otherwise)::

    python benchmarks/mutation.py                          # every module, summary table
    python benchmarks/mutation.py trivial reward --jobs 2  # selected modules
    python benchmarks/mutation.py --list                   # module names and their test files
    python benchmarks/mutation.py trivial --survivors      # also print each surviving mutant's diff

The summary (one JSON object per module) is also written to ``--workdir``/summary.json.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

EVALUATOR = "src/tritongym/evaluator"
RL = "src/tritongym/rl"
EXECUTION = "src/tritongym/execution"
SERVICE = "src/tritongym/service"
ENV = "src/tritongym/env"
DEFAULTS_TEST = "tests/unit/evaluator/test_defaults.py"

# module name -> (file to mutate, fast unit tests that exercise it)
MODULES: dict[str, tuple[str, list[str]]] = {
    "compare": (f"{EVALUATOR}/compare.py", ["tests/unit/evaluate/test_compare.py",
                                             "tests/unit/evaluate/test_compare_edges.py", DEFAULTS_TEST]),
    "checks": (f"{EVALUATOR}/checks.py", ["tests/unit/evaluate/test_checks.py"]),
    "trivial": (f"{EVALUATOR}/trivial.py", ["tests/unit/evaluator/test_trivial.py", DEFAULTS_TEST]),
    "reward": (f"{EVALUATOR}/reward.py", ["tests/unit/evaluator/test_reward.py", "tests/unit/evaluator/test_prs.py",
                                           "tests/unit/evaluate/test_result.py", "tests/unit/evaluate/test_options.py",
                                           DEFAULTS_TEST]),
    "optrace": (f"{EVALUATOR}/worker/optrace.py", ["tests/unit/evaluate/test_optrace.py",
                                             "tests/unit/evaluate/test_optrace_work.py",
                                             "tests/unit/evaluate/test_optrace_dispatch.py",
                                             "tests/unit/evaluate/test_hostread.py", DEFAULTS_TEST]),
    "plausibility": (f"{EVALUATOR}/plausibility.py", ["tests/unit/evaluator/test_plausibility.py", DEFAULTS_TEST]),
    "oprules": (f"{EVALUATOR}/oprules.py", ["tests/unit/evaluate/test_optrace_work.py",
                                             "tests/unit/evaluate/test_checks.py", DEFAULTS_TEST]),
    # The timing protocol (GPU figures), driven by recording fake clocks and fake workers.
    "timing": (f"{EVALUATOR}/worker/timing.py", ["tests/unit/evaluator/test_timing.py",
                                                 "tests/unit/evaluator/test_timing_session.py",
                                                 "tests/unit/evaluator/test_timing_device.py"]),
    "measurement": (f"{EVALUATOR}/measurement.py", ["tests/unit/evaluator/test_timing_measurement.py"]),
    # The clean room (issue 20): what the verdict is re-executed from and where. Its worker's `serve` and
    # `main` run in a process of their own in the end-to-end tests; these unit tests drive `Replay`,
    # the bounds, the kernel builder, the launch log and the host-origin measure in the test process.
    "replays": (f"{EVALUATOR}/replays.py", ["tests/unit/evaluator/test_cleanroom.py",
                                             "tests/unit/evaluator/test_replays.py"]),
    "launchlog": (f"{EVALUATOR}/worker/launchlog.py", ["tests/unit/evaluator/test_cleanroom.py",
                                                       "tests/unit/evaluator/test_launchlog.py"]),
    "cleanroom_kernels": (f"{EVALUATOR}/cleanroom/kernels.py", ["tests/unit/evaluator/test_cleanroom.py",
                                                               "tests/unit/evaluator/test_cleanroom_kernels.py"]),
    "cleanroom_bounds": (f"{EVALUATOR}/cleanroom/bounds.py", ["tests/unit/evaluator/test_cleanroom_worker.py"]),
    "cleanroom_worker": (f"{EVALUATOR}/cleanroom/worker.py", ["tests/unit/evaluator/test_cleanroom.py",
                                                              "tests/unit/evaluator/test_cleanroom_worker.py",
                                                              "tests/unit/evaluator/test_cleanroom_replay.py"]),
    # The parent's judgement of the clean room (run_clean_room and what it calls: the review of the replay's
    # outputs, the room's errors, the poisoned replay) against a scripted room over a real channel. The rest of
    # parent.py is reached only by end-to-end evaluations; run it on chosen mutants (--mutants), e.g.
    # '*run_clean_room*' '*_judge_replay*' '*review_outputs*' '*apply_review*' '*_room_error*' '*_dead_content*'
    # '*_expect_room*'.
    "parent_cleanroom": (f"{EVALUATOR}/parent.py", ["tests/unit/evaluator/test_replay_judging.py"]),
    "advantages": (f"{RL}/advantages.py", ["tests/unit/rl"]),
    "trm": (f"{RL}/trm.py", ["tests/unit/rl"]),
    "correction": (f"{RL}/correction.py", ["tests/unit/rl"]),
    "estimators": (f"{RL}/estimators.py", ["tests/unit/rl"]),
    # Outside the evaluator (issue 27). The execution tests start real jailed fork servers and reference
    # workers; only the host side (the test process) is mutated: the fork server and workers run in
    # processes of their own, which import the unmutated package.
    "pool": (f"{EXECUTION}/pool.py", ["tests/execution/test_pool.py", "tests/execution/test_pool_bounds.py"]),
    # The same file against its fast unit layer only: run_evaluation, the launchers, the GPU counts and the
    # reference cache scripted (seconds for the whole file, where `pool` costs about 2 minutes per mutant).
    "pool_units": (f"{EXECUTION}/pool.py", ["tests/execution/test_pool_units.py"]),
    "references": (f"{EXECUTION}/references.py", ["tests/execution/test_references_lru.py",
                                                   "tests/execution/test_references_keys.py"]),
    # The same file against its fast unit layer only: /proc and ReferenceRunner faked (the process-tree walk's
    # cap, exits and duplicates, PID-less runners, the device of each runner; seconds, where `references`
    # starts real reference servers for each mutant). Run it on chosen mutants (--mutants): the cache's
    # hits and its servers are the real-process tests' part.
    "references_units": (f"{EXECUTION}/references.py", ["tests/execution/test_references_units.py"]),
    # Reference servers, trusted and jailed: the jailed candidate path's tests (test_forkserver.py,
    # minutes) would make each mutant cost minutes on a 2-core machine.
    "forkserver": (f"{EXECUTION}/forkserver.py", ["tests/execution/test_forkserver_host.py",
                                                   "tests/execution/test_references_keys.py",
                                                   "tests/execution/test_references_lru.py"]),
    # The same file against its fast unit layer only: spawn_worker, the cgroups and the probe's bwrap faked (its
    # __init__, candidate_cgroup and forkserver_problem in seconds, where `forkserver` costs minutes per mutant).
    "forkserver_units": (f"{EXECUTION}/forkserver.py", ["tests/execution/test_forkserver_units.py"]),
    "store": (f"{SERVICE}/store.py", ["tests/service/test_store.py", "tests/service/test_store_bounds.py",
                                      "tests/service/test_store_units.py"]),
    # test_core.py (a running job cancelled: minutes) is left out; the HTTP tests run the service in a
    # process of its own, which imports the unmutated package.
    "service_core": (f"{SERVICE}/core.py", ["tests/service/test_core_units.py"]),
    # The same file against its seams only: make_pool, default_workers, os, the clock, the dispatcher's event and
    # thread, asyncio.wait_for and the pool faked (the Ray branch, the GPU device, the cores without
    # sched_getaffinity, the dispatcher's periods, the 30 s re-check, stop's waits, _dispatch_now's failure and its
    # own thread's lock; seconds for the file). Run it on chosen mutants (--mutants).
    "service_core_units": (f"{SERVICE}/core.py", ["tests/service/test_core_seams.py"]),
    "kernelgym": (f"{SERVICE}/kernelgym.py", ["tests/service/test_kernelgym_mapping_defaults.py"]),
    "history": (f"{ENV}/history.py", ["tests/env/test_history.py", "tests/env/test_history_bounds.py"]),
    "feedback": (f"{ENV}/feedback.py", ["tests/env/test_feedback.py", "tests/env/test_feedback_budget.py",
                                        "tests/env/test_feedback_text.py"]),
    "records": (f"{ENV}/records.py", ["tests/env/test_records_fields.py", "tests/env/test_agent_resume_exact.py"]),
    "env_core": (f"{ENV}/core.py", ["tests/env/test_env.py", "tests/env/test_env_core_fields.py",
                                    "tests/env/test_records_fields.py", "tests/env/test_agent_resume_exact.py"]),
}

# Tests that cannot pass under mutmut whatever the mutant, so they say nothing about the mutants:
# one reads tritongym/rl's source for its imports (mutated source imports mutmut); one stops a service
# while its candidate runs, and the abandoned evaluation's processes end (and are left unreaped) after
# the test, in mutmut's own process, whose runner takes any child's exit for a worker's and stops
# with a KeyError (mutmut 3.8 `wait_for_result`).
DESELECTED = [
    "tests/unit/rl/test_registry.py::test_no_trainer_or_heavy_imports_in_library",
    "tests/service/test_core_units.py::test_stopping_abandons_a_running_job_to_the_next_start",
]

# Functions mutmut must leave alone (not even wrapped in its trampoline), by module. A trampoline only
# works once the module has finished executing, and torch calls these while the class is being created.
#   optrace.OpTrace._should_skip_dynamo: called by TorchDispatchMode.__init_subclass__ (a one-line
#   `return False` whose mutant `return True` only costs the ~2 s torch._dynamo import per worker).
NOT_MUTATED: dict[str, list[str]] = {"optrace": ["_should_skip_dynamo"]}

# mutmut's statuses (mutmut.stats.status_by_exit_code), folded into what the score needs.
DETECTED = {"killed", "timeout", "segfault"}
COUNTED = DETECTED | {"survived", "no tests", "suspicious"}


@dataclass
class ModuleScore:
    module: str
    path: str
    tests: list[str]
    detected: int = 0  # killed, timed out or crashed
    survived: int = 0
    other: dict[str, int] = field(default_factory=dict)  # how many of each status, when not killed/survived
    survivors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def total(self) -> int:
        return self.detected + self.survived + sum(n for status, n in self.other.items()
                                                 if status in COUNTED and status not in DETECTED)

    @property
    def score(self) -> float | None:
        return self.detected / self.total if self.total else None


def prepare_workspace(workspace: Path, name: str, target: str, tests: list[str], revision: str | None,
                      timeout_multiplier: float | None = None) -> None:
    """A fresh copy of the sources and tests with a setup.cfg naming one file to mutate."""
    if workspace.exists():
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    if revision is None:  # the working tree as it is, uncommitted edits included
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(REPO / "src", workspace / "src", ignore=ignore)
        shutil.copytree(REPO / "tests", workspace / "tests", ignore=ignore)
        shutil.copy(REPO / "pyproject.toml", workspace / "pyproject.toml")
    else:  # a commit: reproducible, and untouched by edits in progress in a shared working tree
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", revision, "src", "tests",
                                  "pyproject.toml"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(workspace)], input=archive, check=True)
    lines = ["[mutmut]", "source_paths = src/", f"only_mutate = {target}", "use_git_change_detection = false",
             "pytest_add_cli_args ="] + [f"    --deselect={t}" for t in DESELECTED]
    lines += ["pytest_add_cli_args_test_selection ="] + [f"    {t}" for t in tests]
    if timeout_multiplier is not None:  # mutmut stops a mutant's tests after 2 x this x (their time + 1 s)
        lines.append(f"timeout_multiplier = {timeout_multiplier}")
    (workspace / "setup.cfg").write_text("\n".join(lines) + "\n")
    source = workspace / target
    text = undecorate(source.read_text())
    for function in NOT_MUTATED.get(name, []):
        pattern = re.compile(rf"^(\s*def {re.escape(function)}\(.*:)$", re.MULTILINE)
        text, count = pattern.subn(r"\1  # pragma: no mutate block", text)
        if count != 1:
            raise SystemExit(f"{target}: expected one single-line `def {function}(...):`, found {count}")
    source.write_text(text)
    # Jailed workers and fork servers (bwrap) import tritongym through the virtual environment's path
    # file, i.e. from this repository's src/, which a jail shows only when it is among the folders
    # `jail.sandbox.python_paths` binds: the package folders on sys.path and tritongym's own root (here the
    # workspace's mutated copy). A folder named site-packages that links to src/ makes it one; the
    # mutmut process appends it to sys.path, after everything else, so the tests still import the
    # mutated copy and the jailed processes the unmutated package (as unjailed workers do).
    link = workspace / JAIL_SITE
    link.parent.mkdir(parents=True)
    link.symlink_to(REPO / "src", target_is_directory=True)


def undecorate(text: str) -> str:
    """Move the decorators of module-level functions to assignments at the end of the module.

    mutmut leaves decorated functions alone (it cannot trampoline them safely in general), which would
    exempt every ``@torch.no_grad()`` mask of rl/trm.py and rl/correction.py and every registered
    estimator of rl/estimators.py. ``f = deco(f)`` after the module body is what the decorator does,
    applied to mutmut's trampoline instead of the function.
    """
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    rebind: list[str] = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.decorator_list:
            continue
        first = min(d.lineno for d in node.decorator_list)
        drop.update(range(first - 1, node.lineno - 1))  # the decorator lines (0-based), def line kept
        applied = node.name
        for decorator in reversed(node.decorator_list):
            applied = f"({ast.get_source_segment(text, decorator)})({applied})"
        rebind.append(f"{node.name} = {applied}\n")
    if not rebind:
        return text
    kept = [line for i, line in enumerate(lines) if i not in drop]
    return "".join(kept) + "\n\n# moved here by benchmarks/mutation.py (mutmut skips decorated functions)\n" + \
        "".join(rebind)


def read_results(workspace: Path, target: str) -> tuple[dict[str, str], str | None]:
    """mutant name -> status, from mutmut's meta file for the mutated source."""
    from mutmut.stats import status_by_exit_code

    meta = workspace / "mutants" / (target + ".meta")
    if not meta.exists():
        return {}, f"no mutmut results at {meta}"
    data = json.loads(meta.read_text())
    return {name: status_by_exit_code.get(code, f"exit {code}")
            for name, code in data["exit_code_by_key"].items()}, None


# A string literal written as SQL: an upper-case SQL keyword as a word, and no quote inside (a quoted SQL
# literal's case would matter). SQLite reads keywords and identifiers without regard to letter case, so
# mutmut's two case mutants of such a string (all lower case, all upper case) change nothing; the third
# mutant of every string ("XX" around it) is kept. Only the keywords this code base writes in its SQL.
SQL_KEYWORD = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|PRAGMA|BEGIN|COMMIT|ROLLBACK|FROM|WHERE|AND|OR|NOT|IN|"
                         r"ORDER BY|GROUP BY|LIMIT|OFFSET|VALUES|SET|DISTINCT|COUNT|NULL|IS|INTO)\b")


def is_sql(text: str) -> bool:
    return bool(SQL_KEYWORD.search(text)) and "'" not in text and '"' not in text


def string_value(literal: str) -> str:
    """The text between the quotes of a simple string literal as mutmut sees it (prefix and quotes off)."""
    start = min(i for i in (literal.find('"'), literal.find("'")) if i != -1)
    return literal[start + 1:-1]


def install_sql_case_filter() -> None:
    """Make mutmut's string operator skip the letter-case mutants of SQL strings (see SQL_KEYWORD).

    mutmut (3.8) has no option for this; its operator table is a list it reads when it mutates a file,
    so the string operator is replaced there, in this process, before mutmut's command line runs.
    """
    from mutmut.mutation import mutators

    table = mutators.mutation_operators
    index = [i for i, (_, op) in enumerate(table) if op is mutators.operator_string]
    if len(index) != 1:
        raise SystemExit(f"mutmut {mutators.__name__}: expected one string operator, found {len(index)}")
    original = mutators.operator_string

    def operator_string(node):  # type: ignore[no-untyped-def]
        for mutant in original(node):
            before, after = string_value(node.value), string_value(mutant.value)
            if is_sql(before) and before.lower() == after.lower():
                continue  # a case-only mutant of SQL: equivalent
            yield mutant

    table[index[0]] = (table[index[0]][0], operator_string)


JAIL_SITE = "jail-path/site-packages"


def mutmut_command() -> list[str]:
    # This script in its mutmut mode (below), not `python -m mutmut`: under -m, mutmut's __main__ module
    # would be imported a second time by the mutated code's trampolines and fail on
    # multiprocessing.set_start_method. Here it is imported once, as mutmut.__main__, like its console script.
    return [sys.executable, str(Path(__file__).resolve()), "--as-mutmut"]


def show_mutant(workspace: Path, name: str) -> str:
    done = subprocess.run([*mutmut_command(), "show", name], cwd=workspace,
                          capture_output=True, text=True)
    return done.stdout.strip() or done.stderr.strip()


def run_module(name: str, workdir: Path, jobs: int, show: bool, revision: str | None,
               mutants: list[str] | None = None, timeout_multiplier: float | None = None) -> ModuleScore:
    target, tests = MODULES[name]
    score = ModuleScore(module=name, path=target, tests=tests)
    workspace = workdir / name
    prepare_workspace(workspace, name, target, tests, revision, timeout_multiplier)
    # One torch/OpenMP thread: mutmut forks a test process per mutant from a process that has run torch,
    # and a forked child that finds torch's thread pool already started can hang (read as a timeout).
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    start = time.perf_counter()
    log = workspace / "mutmut.log"
    with log.open("w") as out:
        done = subprocess.run([*mutmut_command(), "run", "--max-children", str(jobs), *(mutants or [])],
                              cwd=workspace, env=env, stdout=out, stderr=subprocess.STDOUT)
    score.seconds = round(time.perf_counter() - start, 1)
    statuses, error = read_results(workspace, target)
    if done.returncode != 0 or error:
        score.error = error or f"mutmut exited {done.returncode}; see {log}"
    for mutant, status in sorted(statuses.items()):
        if status in DETECTED:
            score.detected += 1
            if status != "killed":
                score.other[status] = score.other.get(status, 0) + 1
        elif status == "survived":
            score.survived += 1
            score.survivors.append(mutant)
        else:
            score.other[status] = score.other.get(status, 0) + 1
    if show:
        for mutant in score.survivors:
            print(f"--- {mutant}\n{show_mutant(workspace, mutant)}\n", flush=True)
    return score


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help=f"modules to run (default: all of {', '.join(MODULES)})")
    parser.add_argument("--jobs", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/tritongym-mutation"),
                        help="where the per-module workspaces go (default /tmp/tritongym-mutation)")
    parser.add_argument("--survivors", action="store_true", help="print the diff of each surviving mutant")
    parser.add_argument("--list", action="store_true", help="list the modules and their tests, then exit")
    parser.add_argument("--mutants", nargs="+", metavar="GLOB",
                        help="test only the mutants whose names match (mutmut's globs, e.g. '*ǁLocalPoolǁcancel*'): "
                             "a bounded run of a module whose tests are slow; the others count as not checked")
    parser.add_argument("--timeout-multiplier", type=float, metavar="X",
                        help="stop a mutant's tests after 2 X (their unmutated time + 1 s) of wall time and count it "
                             "as detected (mutmut's default X is 15; a lower X bounds the cost of a mutant that "
                             "hangs a slow test)")
    parser.add_argument("--revision", default="HEAD",
                        help="the commit to test (default HEAD); 'worktree' copies the working tree as it is")
    args = parser.parse_args(argv)
    if args.list:
        for name, (target, tests) in MODULES.items():
            print(f"{name:14} {target}  <- {' '.join(tests)}")
        return 0
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        parser.error(f"unknown module(s) {unknown}; choose from {list(MODULES)}")
    try:
        import mutmut  # noqa: F401
    except ImportError:
        parser.error("mutmut is not installed: pip install -e .[mutation]")
    args.workdir.mkdir(parents=True, exist_ok=True)
    revision = None if args.revision == "worktree" else subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", args.revision], check=True, capture_output=True, text=True).stdout.strip()
    print(f"testing {revision or 'the working tree'}", flush=True)
    summary_path = args.workdir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    print(f"{'module':14} {'detect.':>7} {'surv.':>6} {'other':>6} {'score':>7} {'time':>8}", flush=True)
    failed = False
    for name in args.modules or list(MODULES):
        score = run_module(name, args.workdir, args.jobs, args.survivors, revision, args.mutants,
                           args.timeout_multiplier)
        pct = f"{100 * score.score:.1f}%" if score.score is not None else "-"
        print(f"{name:14} {score.detected:7} {score.survived:6} {sum(score.other.values()):6} {pct:>7} "
              f"{score.seconds:7.0f}s  {score.other or ''} {score.error or ''}", flush=True)
        failed |= score.error is not None
        summary[name] = asdict(score) | {
            "score": score.score, "revision": revision or "working tree", "mutants": args.mutants or "all",
            "timeout_multiplier": args.timeout_multiplier,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        summary_path.write_text(json.dumps(summary, indent=2))
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--as-mutmut"]:  # mutmut's own command line, with the SQL case filter installed
        install_sql_case_filter()
        if (Path.cwd() / JAIL_SITE).is_dir():  # a workspace of prepare_workspace's
            sys.path.append(str(Path.cwd() / JAIL_SITE))
        from mutmut.__main__ import cli

        sys.argv = ["mutmut", *sys.argv[2:]]
        sys.exit(cli())
    sys.exit(main())
