"""The ``tritongym`` command line: thin subcommands over the public API.

The option builders every subcommand shares (the evaluation options, --size) are in
`tritongym.cli.options`; the service and OpenEnv subcommands import them from there.

Exit codes: 0 whenever verdicts were produced, whatever they are; 2 for usage errors (a missing
file, an invalid option, a malformed problem); 3 when the evaluator itself failed (a worker
could not start).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

from tritongym.cli.options import (
    add_eval_options,
    add_size_option,
    options_from,
    problems_at_size,
    resolve_size,
)

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EVALUATOR = 3


def cmd_eval(args: argparse.Namespace) -> int:
    from tritongym.service.cli import cmd_eval_remote, local_server_for

    local_server = local_server_for(args)
    if local_server is not None:  # a running `tritongym serve` on this machine: its warm workers (service/local.py)
        print(f"tritongym eval: evaluated by the local server at {local_server.url} ('tritongym serve', pid "
              f"{local_server.pid}); --local evaluates in this process", file=sys.stderr)
        args.server = local_server.url
    if getattr(args, "server", None):  # --server URL: evaluate on a tritongym service (service/cli.py)
        return cmd_eval_remote(args)
    from tritongym.tasks import find_problem

    if not Path(args.solution).is_file():
        print(f"tritongym eval: solution file not found: {args.solution}", file=sys.stderr)
        return EXIT_USAGE
    options = options_from(args)  # an invalid option is refused before the problem is loaded and sized
    if args.id:  # --problem SOURCE --id ID
        problem = find_problem(args.id, args.problem)
    else:
        problem = find_problem(args.problem, args.problems)
    size = resolve_size(args, "eval")
    kept, refused = problems_at_size([problem], size, "eval", memory_limit_gb=args.memory_limit_gb,
                                     timeout=args.timeout, device=args.device,
                                     notice=getattr(args, "size_notice", False))
    if refused:
        if args.json:  # --json answers in JSON whatever happens: the refusal as `run --json` prints it
            print(json.dumps({"problem": refused[0][0], "refused": refused[0][1], "problem_size": size}))
        print(f"tritongym eval: not evaluated: {refused[0][1]}", file=sys.stderr)
        return EXIT_USAGE
    from tritongym.evaluator import evaluate

    result = evaluate(kept[0], Path(args.solution), options)
    print(result.to_json() if args.json else result.summary())
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    if getattr(args, "server", None):  # --server URL: evaluate on a tritongym service (service/cli.py)
        from tritongym.service.cli import cmd_run_remote

        return cmd_run_remote(args)
    from tritongym.bench.solutions import pair_solutions
    from tritongym.evaluator.result import printable
    from tritongym.tasks import load_problems, select_problems

    problems = select_problems(load_problems(args.problems, levels=args.level), args.only, args.problems)
    solutions = Path(args.solutions)
    if not solutions.is_dir():
        print(f"tritongym run: solutions folder not found: {solutions}", file=sys.stderr)
        return EXIT_USAGE
    if args.workers is not None and args.workers < 1:
        print(f"tritongym run: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return EXIT_USAGE
    options = options_from(args)
    paired, missing = pair_solutions(problems, solutions)
    if not paired:
        print(f"tritongym run: no solution in {solutions} matches any of the {len(problems)} problems "
              "(expected files named like the problems, e.g. 19_ReLU.py or level1/19_ReLU.py, or KernelBench's "
              "level_1_problem_19_sample_0_kernel.py)", file=sys.stderr)
        return EXIT_USAGE
    from tritongym.evaluator.parent import resolve_device

    resolve_device(options.device)  # --device cuda without CUDA: refused once, with eval's message (OptionsError)
    size = resolve_size(args, "run")
    matched = list({job.problem.problem_id: job.problem for job in paired}.values())
    kept, refused = problems_at_size(matched, size, "run", memory_limit_gb=args.memory_limit_gb,
                                     timeout=args.timeout, device=args.device,
                                     notice=getattr(args, "size_notice", False))
    by_id = {p.problem_id: p for p in kept}
    jobs = [replace(job, problem=by_id[job.problem.problem_id]) for job in paired if job.problem.problem_id in by_id]
    from concurrent.futures import as_completed

    from tritongym.cli.run_table import RunTable
    from tritongym.execution import EvalRequest, LocalPool, default_workers
    from tritongym.execution.api import _progress_bar
    from tritongym.execution.pool import _cores

    started = time.monotonic()
    sandboxes: set[str] = set()
    folder = None
    if args.run_dir:
        from tritongym.bench.run_folder import RunFolder

        folder = RunFolder(args.run_dir, options=options, size=size)
    bar = _progress_bar(len(jobs), args.progress)
    table = RunTable(args, write=bar.write if bar is not None else print, folder=folder)
    table.start(refused, size)
    workers = args.workers or default_workers(options.device)
    try:
        if jobs:
            # This process only evaluates: its comparisons get the same share of the cores as each slot.
            with LocalPool(workers, device=options.device, parent_threads=max(1, _cores() // workers)) as pool:
                futures = {pool.submit(EvalRequest(job.problem, job.solution, options)): job for job in jobs}
                # Results are printed as each finishes (with --json: one line each, flushed at once).
                for future in as_completed(futures):
                    job = futures[future]
                    if bar is not None:
                        bar.update(1)
                    head = {"problem": job.problem.problem_id, "name": job.problem.name, "sample": job.sample,
                            "solution": str(job.solution)}
                    try:
                        result = future.result()
                    except Exception as exc:  # noqa: BLE001 - one problem's failure never loses the rest
                        table.error(head, job.shown, printable(f"{type(exc).__name__}: {exc}")[:300], job)
                        continue
                    sandboxes.add(result.sandbox)
                    table.verdict(head, job.shown, result, job)
                stats = pool.stats()
        else:
            stats = None
    finally:
        table.close()
        if folder is not None:
            folder.close([p.problem_id for p in missing])
    if bar is not None:
        bar.close()
    if not args.json:
        mode = "/".join(sorted(sandboxes - {"not started"})) or "none needed (every verdict was static)"
        warning = "  UNSANDBOXED: candidates could reach this machine" if "none" in sandboxes else ""
        scaled = sum(job.problem.size == "cpu" for job in jobs)
        sized = f" ({scaled} at CPU size)" if scaled else ""
        print(f"\n{table.summary(sized)}; {time.monotonic() - started:.0f} s")
        if stats is not None:
            print(f"sandbox: {mode}; {stats.slots} worker(s), candidates started by {stats.launcher}{warning}")
        if missing:
            shown = ", ".join(p.name for p in missing[:5])
            print(f"{len(missing)} of {len(problems)} problem(s) had no solution file (e.g. {shown}); "
                  "--only NAME narrows the set")
        if args.out:
            print(f"results written to {args.out} (one JSON object per line)")
        if folder is not None:
            print(f"run folder: {args.run_dir} (tritongym report {args.run_dir})")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from tritongym.tasks import load_problems

    problems = load_problems(args.problems, levels=args.level)
    for problem in problems:
        if args.json:
            print(json.dumps({"problem_id": problem.problem_id, "name": problem.name, "level": problem.level,
                              "content_hash": problem.content_hash, "origin": problem.origin}))
        else:
            print(f"{problem.problem_id:28s} {problem.name:44s} {problem.content_hash[:12]}  {problem.origin}")
    if not args.json:
        print(f"{len(problems)} problems")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from tritongym.bench import audit
    from tritongym.tasks import load_problems

    problems = load_problems(args.problems, levels=args.level)
    if args.workers < 1:
        print(f"tritongym audit: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return EXIT_USAGE
    size = args.size or ("cpu" if args.device == "cpu" else "original")
    skipped: list[tuple[str, str]] = []
    if size == "cpu":
        from tritongym.tasks.sizing import at_size

        sized = at_size(problems, "cpu")
        problems, skipped = sized.problems, [(p.problem_id, reason) for p, reason in sized.refused]
        print(f"audit: {len(problems)} problems at CPU size (--size cpu; --size original for the published "
              f"sizes), {len(skipped)} without one", file=sys.stderr)
    budgets = {"device": args.device, "size": size, "memory budget": f"{args.memory_budget_gb:g} GiB",
               "time budget": f"{args.time_budget_s:g} s (first trial)", "input seeds": args.input_seeds,
               "weight seeds": args.weight_seeds, "tolerance": f"atol={args.atol:g}, rtol={args.rtol:g}"}
    command = " ".join(["tritongym audit", f"--problems {args.problems}",
                        *(f"--level {n}" for n in args.level or []), f"--device {args.device}",
                        f"--size {size}",
                        f"--memory-budget-gb {args.memory_budget_gb:g}",
                        f"--time-budget-s {args.time_budget_s:g}"])
    context = audit.run_context([command], **budgets)  # before the run: the commit that ran
    on_audit = (lambda result: print(result.to_json(), flush=True)) if args.json else None
    audits = audit.audit_problems(problems, on_audit=on_audit, device=args.device,
                                  input_seeds=args.input_seeds, weight_seeds=args.weight_seeds,
                                  tolerance=(args.atol, args.rtol), memory_budget_gb=args.memory_budget_gb,
                                  time_budget_s=args.time_budget_s, workers=args.workers)
    if args.flags_json:
        audit.write_flags_json(audits, args.flags_json)
    if args.markdown:
        Path(args.markdown).write_text(audit.render_markdown(audits, context), encoding="utf-8")
    if not args.json:
        for result in (a for a in audits if a.flags):
            tol = result.override
            override = f"atol={tol.atol:g}, rtol={tol.rtol:g}" if tol else "none"
            flags = ", ".join(f.value for f in result.flags)
            print(f"{result.problem_id:40s} {flags} (override: {override})")
        counts = {status.value: sum(a.status == status for a in audits) for status in audit.AuditStatus}
        print(f"\n{len(audits)} problems: {counts['audited']} audited ({sum(a.flagged for a in audits)} "
              f"flagged), {counts['skipped']} skipped, {counts['failed']} failed")
        for problem_id, reason in skipped:
            print(f"not audited (no CPU size): {problem_id}: {reason}")
    return EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    import torch
    import triton

    from tritongym import __version__
    from tritongym.evaluator.jail.sandbox import bwrap_problem

    problem = bwrap_problem()
    from tritongym.execution.forkserver import jailed_forkserver_problem
    from tritongym.execution.pool import default_workers

    # The pool's default device: the GPU where there is one.
    forkserver = problem or jailed_forkserver_problem("cuda" if torch.cuda.is_available() else "cpu")
    info = {
        "tritongym": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda_available": torch.cuda.is_available(),
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "sandbox": "bwrap" if problem is None else "none",
        "sandbox_problem": problem,
        "pool_launcher": "forkserver" if forkserver is None else "spawn",
        "pool_launcher_problem": forkserver,
        "pool_workers": default_workers(),
    }
    if args.json:
        print(json.dumps(info))
    else:
        for key, value in info.items():
            shown = "-" if value is None else ("yes" if value is True else "no" if value is False else value)
            print(f"{key:22s} {shown}")
    return EXIT_OK


def cmd_agent(args: argparse.Namespace) -> int:
    """``tritongym agent``: drive an OpenAI-compatible endpoint through KernelEnv episodes (resumable)."""
    import importlib

    try:
        importlib.import_module("tritongym.env.agent")  # the env extra (httpx, tqdm) before anything starts
    except ImportError as exc:
        print(f"tritongym agent: needs the env extra (from the clone: pip install -e '.[env]'): {exc}", file=sys.stderr)
        return EXIT_USAGE
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and api_key is None:
        print(f"tritongym agent: environment variable {args.api_key_env} is not set", file=sys.stderr)
        return EXIT_USAGE
    from contextlib import ExitStack

    from tritongym.env.scripted import ScriptedModelServer, scripted_folder

    with ExitStack() as stack:
        try:
            scripted = scripted_folder(args.model)
            if scripted is not None:  # no model server: a loopback endpoint that answers with solution files
                from tritongym.tasks import load_problems, select_problems

                problems = select_problems(load_problems(args.problems, levels=args.level), args.only,
                                           args.problems)
                args.base_url = stack.enter_context(ScriptedModelServer(scripted, problems)).base_url
        except ValueError as exc:
            print(f"tritongym agent: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if scripted is None and not args.base_url:
            print("tritongym agent: --base-url is required (an OpenAI-compatible endpoint), unless --model is "
                  "scripted:DIR (replies with the solution files in DIR, no server needed)", file=sys.stderr)
            return EXIT_USAGE
        return _run_agent(args, api_key)


def _run_agent(args: argparse.Namespace, api_key: str | None) -> int:
    from tritongym.env.agent import AgentConfig, run_agent

    options = options_from(args)
    if args.eval_workers is None:  # as `run`: one evaluation per visible GPU (clean timings), else per core
        from tritongym.execution.pool import default_workers

        args.eval_workers = default_workers(options.device)
    try:
        config = AgentConfig(
            base_url=args.base_url, model=args.model, out=args.out, problems=args.problems, levels=args.level,
            only=args.only, samples=args.samples, turns=args.turns, iterations=args.iterations,
            keep_best=args.keep_best, tts=args.tts, concurrency=args.concurrency, temperature=args.temperature,
            top_p=args.top_p, max_tokens=args.max_tokens, feedback=args.feedback,
            feedback_chars=args.feedback_chars, history=args.history, templates=args.templates,
            few_shot=args.few_shot, stop_on=args.stop_on, recheck=not args.no_recheck, api_key=api_key,
            request_timeout=args.request_timeout, max_retries=args.max_retries, eval_workers=args.eval_workers,
            size=resolve_size(args, "agent"))
        summary = run_agent(config, options=options, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as exc:
        print(f"tritongym agent: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"\ntritongym agent: interrupted; re-run the same command to resume (finished turns are kept in "
              f"{args.out})", file=sys.stderr)
        return 130
    written = Path(args.out) / "trajectories.jsonl"
    where = f"written to {written}" if written.is_file() else "no trajectory finished, so nothing was written yet"
    refused = f", {summary['refused']} problem(s) without a CPU size left out" if summary.get("refused") else ""
    outcomes = summary.get("outcomes") or {}
    best = ("; best turns: " + ", ".join(f"{n} {status}" for status, n in outcomes.items())) if outcomes else ""
    print(json.dumps({k: v for k, v in summary.items() if k != "errors"}) if args.json else
          f"{summary['finished']} trajectories finished, {summary['skipped']} already done, "
          f"{summary['failed']} left unfinished (re-run the same command to resume){refused}{best}; "
          f"{summary['wall_s']:.0f} s; {where}")
    return EXIT_OK if summary["failed"] == 0 else EXIT_EVALUATOR


def cmd_report(args: argparse.Namespace) -> int:
    """``tritongym report``: report.md/html/json and plots for an agent run, exports on request."""
    try:
        from tritongym.bench.report import write_report
        from tritongym.env.export import export_parquet, export_sft
        from tritongym.env.store import load_trajectories
    except ImportError as exc:
        print(f"tritongym report: needs the env extra (from the clone: pip install -e '.[env]'): {exc}",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        paths = write_report(args.dir, compare_to=args.compare, out=args.out)
    except FileNotFoundError as exc:
        print(f"tritongym report: {exc}", file=sys.stderr)
        return EXIT_USAGE
    trajectories = load_trajectories(args.dir) if (args.parquet or args.sft) else []
    if args.parquet:
        rows = export_parquet(trajectories, args.parquet)
        paths["parquet"] = Path(args.parquet)
        print(f"{rows} turns written to {args.parquet}", file=sys.stderr)
    if args.sft:
        records = export_sft(trajectories, args.sft, which=args.sft_turns)
        paths["sft"] = Path(args.sft)
        print(f"{records} SFT records ({args.sft_turns} turns) written to {args.sft}", file=sys.stderr)
    for label, path in paths.items():
        print(f"{label:22s} {path}")
    return EXIT_OK


def _add_agent_parser(commands) -> None:
    p_agent = commands.add_parser(
        "agent", help="run a model (any OpenAI-compatible chat endpoint) on a problem set, multi-turn",
        description="Drive an OpenAI-compatible chat endpoint (vLLM, SGLang, a hosted API) through multi-turn "
                    "KernelEnv episodes: reply, evaluation, feedback, for --turns turns per (problem, sample). "
                    "Writes OUT/trajectories.jsonl (and a per-turn journal); re-running the same command resumes. "
                    "Each trajectory's best turn is re-checked with a fresh evaluation. Exit 3 when some trajectories "
                    "were left unfinished (the endpoint kept failing). See docs/environment.md.")
    p_agent.add_argument("--base-url", help="API root, e.g. http://127.0.0.1:8000/v1 (not needed with "
                                            "--model scripted:DIR)")
    p_agent.add_argument("--model", required=True,
                         help="model name the endpoint serves; scripted:DIR tries the runner without a model server "
                              "(a loopback endpoint replies with each problem's solution file in DIR, paired as "
                              "'run' pairs them, e.g. scripted:examples/builtin)")
    p_agent.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key "
                                                               "(sent as a bearer token)")
    p_agent.add_argument("--problems", default="builtin", help="as for 'run' (default: %(default)s)")
    p_agent.add_argument("--level", type=int, action="append", help="only these KernelBench levels (repeatable)")
    p_agent.add_argument("--only", action="append", metavar="NAME", help="only this problem, by name or id "
                                                                         "(repeatable)")
    p_agent.add_argument("--samples", type=int, default=1, help="trajectories per problem (default: %(default)s)")
    p_agent.add_argument("--turns", type=int, default=3, help="turns per trajectory, or per iteration with "
                                                              "--iterations (default: %(default)s)")
    p_agent.add_argument("--iterations", type=int, default=1,
                         help="sequential test-time scaling: iterations of --turns turns, each after the first "
                              "restarting from the --keep-best best attempts (default: %(default)s)")
    p_agent.add_argument("--keep-best", type=int, default=0, metavar="K",
                         help="attempts kept in context across iterations (default: %(default)s)")
    p_agent.add_argument("--tts", choices=("sequential", "parallel"), default="sequential",
                         help="sequential: multi-turn refinement; parallel: independent single-turn samples at the "
                              "same evaluation budget T+(I-1)(T-K) (default: %(default)s)")
    p_agent.add_argument("--concurrency", type=int, default=4, help="trajectories in flight (default: %(default)s)")
    p_agent.add_argument("--eval-workers", type=int, default=None,
                         help="concurrent evaluations (default: as 'run', one per visible GPU, for clean timings, "
                              "else the number of CPU cores)")
    p_agent.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s)")
    p_agent.add_argument("--top-p", type=float, help="nucleus sampling (default: the endpoint's)")
    p_agent.add_argument("--max-tokens", type=int, default=8192, help="completion token cap (default: %(default)s)")
    p_agent.add_argument("--feedback", choices=("minimal", "standard", "full"), default="standard",
                         help="feedback detail (default: %(default)s)")
    p_agent.add_argument("--feedback-chars", type=int, help="feedback character budget (default: the level's)")
    p_agent.add_argument("--history", default="full",
                         help="history policy: full, none, last:K, best:K, chars:N, tokens:N, strip-think, or several "
                              "joined by commas (default: %(default)s)")
    p_agent.add_argument("--templates", metavar="DIR", help="folder of prompt templates overriding the packaged ones "
                                                            "(system.md, task.md, feedback.md, void.md, few_shot.md)")
    p_agent.add_argument("--few-shot", action="store_true", help="append the few-shot example to the task")
    p_agent.add_argument("--stop-on", default="never", help="end a trajectory early: never, correct or speedup:X "
                                                            "(default: %(default)s)")
    p_agent.add_argument("--no-recheck", action="store_true", help="do not re-check each trajectory's winner")
    p_agent.add_argument("--request-timeout", type=float, default=600.0, help="seconds per chat request "
                                                                             "(default: %(default)s)")
    p_agent.add_argument("--max-retries", type=int, default=4, help="retries per chat request, with exponential "
                                                                    "backoff (default: %(default)s)")
    p_agent.add_argument("--out", required=True, metavar="DIR", help="run folder (created; resumed when it exists)")
    p_agent.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p_agent.add_argument("--json", action="store_true", help="print the run summary as one JSON object")
    add_eval_options(p_agent)
    add_size_option(p_agent)
    p_agent.set_defaults(func=cmd_agent)


def _add_report_parser(commands) -> None:
    p_report = commands.add_parser(
        "report", help="metrics, plots and an HTML/Markdown/JSON report of an agent run or a 'run --run-dir' folder",
        description="Write report.md, report.html (self-contained), report.json and PNG plots for the agent run "
                    "or the 'tritongym run --run-dir' folder in DIR: correctness, fast_p (against eager and "
                    "torch.compile where timed), geomean speedup with bootstrap CIs, per-level tables, per-turn and "
                    "best-by-turn curves, void and violation rates, tokens, winners' re-check, and a diff against "
                    "another run.")
    p_report.add_argument("dir", metavar="DIR", help="a run folder holding trajectories.jsonl (tritongym agent --out, "
                                                     "tritongym run --run-dir, tritongym train --out)")
    p_report.add_argument("--compare", metavar="OTHER_DIR", help="another run to diff against")
    p_report.add_argument("--out", metavar="DIR", help="where to write the report (default: DIR)")
    p_report.add_argument("--parquet", metavar="FILE", help="also export one row per turn to Parquet")
    p_report.add_argument("--sft", metavar="FILE", help="also export SFT chat records (JSON lines)")
    p_report.add_argument("--sft-turns", choices=("best", "correct"), default="best",
                          help="SFT records of the best correct turn per trajectory, or of every correct turn "
                               "(default: %(default)s)")
    p_report.set_defaults(func=cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tritongym",
        description="Evaluate LLM-written Triton kernels: correctness, proof of Triton work, speed, "
                    "and a verdict the candidate cannot forge.",
        epilog="Exit codes: 0 verdicts produced (whatever they are); 2 usage error (missing file, invalid "
               "option, malformed problem); 3 evaluator failure.",
    )
    from tritongym import __version__

    parser.add_argument("--version", action="version", version=f"tritongym {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_eval = commands.add_parser("eval", help="evaluate one solution against one problem",
                                 description="Evaluate a candidate ModelNew against a KernelBench-format problem.")
    p_eval.add_argument("--problem", required=True, metavar="FILE|ID",
                        help="problem .py (Model, get_inputs, get_init_inputs), or an id or name that "
                             "'tritongym list' prints (builtin/07_softmax; kernelbench/level1/19 with --problems "
                             "DATASET); with --id, the problem source to look the id up in")
    p_eval.add_argument("--problems", default="builtin", metavar="SOURCE",
                        help="where an id given to --problem is looked up (default: %(default)s)")
    p_eval.add_argument("--id", help="a problem id in the source given as --problem (--problem DATASET --id "
                                     "kernelbench/level1/19)")
    p_eval.add_argument("--solution", required=True, metavar="FILE", help="solution .py defining ModelNew")
    p_eval.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_eval_options(p_eval)
    add_size_option(p_eval)
    p_eval.set_defaults(func=cmd_eval)

    p_run = commands.add_parser("run", help="evaluate a folder of solutions against a problem set",
                                description="Pair each problem with the solution file of the same name "
                                            "and evaluate them all.")
    p_run.add_argument("--problems", default="builtin",
                       help="'builtin', a problem .py, a KernelBench clone or folder, a .jsonl/.parquet file in the "
                            "Hugging Face layout, or a Hugging Face dataset id (ScalingIntelligence/KernelBench: "
                            "downloaded once, then cached; needs pip install -e '.[data]') (default: %(default)s)")
    p_run.add_argument("--solutions", required=True, metavar="DIR",
                       help="folder with one <problem name>.py per problem (levelN/ subfolders also work), or "
                            "KernelBench's level_L_problem_N_sample_S_kernel.py files (every sample is evaluated)")
    p_run.add_argument("--only", action="append", metavar="NAME",
                       help="only this problem, by name or id (repeatable)")
    p_run.add_argument("--out", metavar="FILE", help="also write every result as JSON lines to FILE (its folder "
                                                     "is created)")
    p_run.add_argument("--run-dir", metavar="DIR",
                       help="write a run folder in KernelBench's layout (runs/<run_name>/): each evaluated "
                            "level_L_problem_P_sample_S_kernel.py with its _result.json beside it, results.jsonl, "
                            "run.json and trajectories.jsonl, which 'tritongym report DIR' reads (correctness, "
                            "fast_p, per-level tables)")
    p_run.add_argument("--level", type=int, action="append", help="only these KernelBench levels (repeatable)")
    p_run.add_argument("--json", action="store_true",
                       help="print one JSON object per evaluation (JSON lines), each as it finishes")
    p_run.add_argument("--workers", type=int, default=None, metavar="N",
                       help="evaluations at once (default: one per visible GPU with --device cuda, else the "
                            "number of CPU cores)")
    p_run.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="a progress bar on stderr (default: when stderr is a terminal)")
    add_eval_options(p_run)
    add_size_option(p_run)
    p_run.set_defaults(func=cmd_run)

    p_list = commands.add_parser("list", help="list the problems of a problem source")
    p_list.add_argument("--problems", default="builtin", help="as for 'run' (default: %(default)s)")
    p_list.add_argument("--level", type=int, action="append", help="only these KernelBench levels (repeatable)")
    p_list.add_argument("--json", action="store_true", help="JSON lines")
    p_list.set_defaults(func=cmd_list)

    p_audit = commands.add_parser(
        "audit", help="find degenerate problems (a trivial output passes their correctness check)",
        description="Run each problem's reference over several input and weight seeds; flag near-zero "
                    "or near-constant outputs, insensitivity to inputs or weights, and zeros, constant or "
                    "passthrough outputs that pass the tolerance; recommend a stricter tolerance for "
                    "flagged problems. Exit 0 whenever the audit ran, whatever it found.")
    p_audit.add_argument("--problems", default="builtin", help="as for 'run' (default: %(default)s)")
    p_audit.add_argument("--level", type=int, action="append", help="only these KernelBench levels "
                                                                    "(repeatable)")
    p_audit.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                         help="where the reference runs (default: %(default)s)")
    p_audit.add_argument("--memory-budget-gb", type=float, default=1.5,
                         help="skip problems whose inputs + parameters + outputs/intermediates (measured on "
                              "the meta device) exceed this many GiB (default: %(default)s)")
    p_audit.add_argument("--time-budget-s", type=float, default=5.0,
                         help="skip problems whose first trial takes longer, seconds (default: %(default)s)")
    p_audit.add_argument("--input-seeds", type=int, default=5, help="input seeds (default: %(default)s)")
    p_audit.add_argument("--weight-seeds", type=int, default=3, help="weight seeds (default: %(default)s)")
    p_audit.add_argument("--atol", type=float, default=1e-2, help="audited atol (default: %(default)s)")
    p_audit.add_argument("--rtol", type=float, default=1e-2, help="audited rtol (default: %(default)s)")
    p_audit.add_argument("--markdown", metavar="FILE", help="write the report as Markdown")
    p_audit.add_argument("--flags-json", metavar="FILE",
                         help="write the flagged problems for the evaluator (merged into an existing file)")
    p_audit.add_argument("--json", action="store_true", help="one JSON object per problem (JSON lines)")
    p_audit.add_argument("--workers", type=int, default=1, metavar="N",
                         help="problems audited at once, each in its own reference worker (default: %(default)s)")
    p_audit.add_argument("--size", choices=("original", "cpu"), default=None,
                         help="audit the problems' CPU-size variants (the default with --device cpu) or their "
                              "original sizes")
    p_audit.set_defaults(func=cmd_audit)

    p_info = commands.add_parser("info", help="versions, devices and sandbox availability (for bug reports)")
    p_info.add_argument("--json", action="store_true", help="one JSON object")
    p_info.set_defaults(func=cmd_info)
    _add_agent_parser(commands)
    _add_report_parser(commands)
    # `tritongym serve`, and --server URL on eval/run (issue 10; the code is in service/cli.py)
    from tritongym.service import cli as service_cli

    service_cli.register(commands)
    service_cli.add_server_option(p_eval)
    service_cli.add_server_option(p_run)
    service_cli.add_local_option(p_eval)
    # `tritongym train --trainer trl` (issue 11; the code is in integrations/cli.py)
    from tritongym.integrations import cli as train_cli

    train_cli.register(commands)
    # `tritongym openenv`: the environment over OpenEnv's protocol (issue 11; integrations/openenv/cli.py)
    from tritongym.integrations.openenv import cli as openenv_cli

    openenv_cli.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    from tritongym.errors import EvaluatorError, TritongymError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader went away (`tritongym list | head`): stop quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except EvaluatorError as exc:
        print(f"tritongym {args.command}: evaluator failure: {exc}", file=sys.stderr)
        return EXIT_EVALUATOR
    except TritongymError as exc:
        print(f"tritongym {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE

