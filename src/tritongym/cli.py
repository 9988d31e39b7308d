"""The ``tritongym`` command line: thin subcommands over the public API.

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
from pathlib import Path

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EVALUATOR = 3


def _add_eval_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("evaluation options")
    group.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                       help="where the candidate runs: cuda when available (auto), the Triton interpreter "
                            "on the CPU (correctness only), or cuda (default: %(default)s)")
    group.add_argument("--timeout", type=float, default=180.0, metavar="SECONDS",
                       help="wall-clock budget of the candidate; it is killed with its descendants on expiry "
                            "(default: %(default)s)")
    group.add_argument("--trials", type=int, default=5, help="correctness trials on fresh secret inputs "
                                                             "(default: %(default)s)")
    group.add_argument("--tolerance", choices=("kernelbench", "strict"), default="kernelbench",
                       help="tolerance preset: kernelbench = atol=rtol=1e-2 (v0.1/KernelGYM); strict = 1e-4 "
                            "for float32, 1e-2 for half precision (default: %(default)s)")
    group.add_argument("--atol", type=float, help="absolute tolerance, overriding the preset")
    group.add_argument("--rtol", type=float, help="relative tolerance, overriding the preset")
    group.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                       help="OS sandbox of the candidate: bubblewrap when it works (auto), required (bwrap), "
                            "or none; without it every result carries a notice (default: %(default)s)")
    group.add_argument("--memory-limit-gb", type=float, default=8.0,
                       help="host-memory cap of the candidate process on the CPU, GiB (default: %(default)s)")
    group.add_argument("--seed", type=int, help="fixed master seed for reproducible debugging (inputs become "
                                                "predictable: never for training)")
    group.add_argument("--disable-check", action="append", default=[], metavar="CODE",
                       help="report this violation code as a notice instead of failing (repeatable; e.g. "
                            "forbidden_construct, which also lets the run-time policy record instead of refuse, "
                            "to test the OS sandbox alone); codes are listed in docs/integrity.md")


def _options_from(args: argparse.Namespace):
    from tritongym.evaluator import EvalOptions

    return EvalOptions(device=args.device, timeout=args.timeout, num_trials=args.trials,
                       tolerance=args.tolerance, atol=args.atol, rtol=args.rtol, sandbox=args.sandbox,
                       memory_limit_gb=args.memory_limit_gb, seed=args.seed,
                       disabled_checks=frozenset(args.disable_check))


def cmd_eval(args: argparse.Namespace) -> int:
    from tritongym.evaluator import evaluate

    for label, path in (("problem", args.problem), ("solution", args.solution)):
        if not Path(path).is_file():
            print(f"tritongym eval: {label} file not found: {path}", file=sys.stderr)
            return EXIT_USAGE
    result = evaluate(args.problem, Path(args.solution), _options_from(args))
    print(result.to_json() if args.json else result.summary())
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from tritongym.evaluator import evaluate
    from tritongym.tasks import load_problems

    problems = load_problems(args.problems, levels=args.level)
    solutions = Path(args.solutions)
    if not solutions.is_dir():
        print(f"tritongym run: solutions folder not found: {solutions}", file=sys.stderr)
        return EXIT_USAGE
    options = _options_from(args)
    paired = []
    for problem in problems:
        candidates = [solutions / f"{problem.name}.py"]
        if problem.level is not None:
            candidates.insert(0, solutions / f"level{problem.level}" / f"{problem.name}.py")
        found = next((c for c in candidates if c.is_file()), None)
        paired.append((problem, found))
    missing = [p.problem_id for p, s in paired if s is None]
    if len(missing) == len(paired):
        print(f"tritongym run: no solution in {solutions} matches any problem "
              "(expected files named like the problems, e.g. 03_gelu.py)", file=sys.stderr)
        return EXIT_USAGE
    started = time.monotonic()
    counts: dict[str, int] = {}
    rewards = []
    if not args.json:
        print(f"{'problem':40s} {'status':20s} {'reward':>7s} {'trials':>7s} {'seconds':>8s}")
    for problem, solution in paired:
        if solution is None:
            if not args.json:
                print(f"{problem.problem_id:40s} {'(no solution)':20s}")
            continue
        result = evaluate(problem, solution, options)
        counts[str(result.status)] = counts.get(str(result.status), 0) + 1
        rewards.append(result.reward)
        if args.json:
            print(json.dumps({"problem": problem.problem_id, "solution": str(solution), **result.to_dict()}))
        else:
            passed = sum(t.passed for t in result.trials)
            print(f"{problem.problem_id:40s} {str(result.status):20s} {result.reward:7.3f} "
                  f"{passed:>3d}/{len(result.trials):<3d} {result.duration_s:8.1f}")
            if result.error and not result.correct:
                print("    " + result.error.strip().splitlines()[-1][:150])
    if not args.json:
        total = sum(counts.values())
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        print(f"\n{total} evaluated: {summary}; mean reward {mean:.3f}; "
              f"{time.monotonic() - started:.0f} s")
        if missing:
            print(f"{len(missing)} problem(s) had no solution file: {', '.join(missing[:10])}")
    return EXIT_OK


def cmd_list(args: argparse.Namespace) -> int:
    from tritongym.tasks import load_problems

    problems = load_problems(args.problems, levels=args.level)
    for problem in problems:
        if args.json:
            print(json.dumps({"problem_id": problem.problem_id, "name": problem.name, "level": problem.level,
                              "content_hash": problem.content_hash, "origin": problem.origin}))
        else:
            print(f"{problem.problem_id:40s} {problem.content_hash[:12]}  {problem.origin}")
    if not args.json:
        print(f"{len(problems)} problems")
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    from tritongym.bench import audit
    from tritongym.tasks import load_problems

    problems = load_problems(args.problems, levels=args.level)
    budgets = {"device": args.device, "memory budget": f"{args.memory_budget_gb:g} GiB",
               "time budget": f"{args.time_budget_s:g} s (first trial)", "input seeds": args.input_seeds,
               "weight seeds": args.weight_seeds, "tolerance": f"atol={args.atol:g}, rtol={args.rtol:g}"}
    command = " ".join(["tritongym audit", f"--problems {args.problems}",
                        *(f"--level {n}" for n in args.level or []), f"--device {args.device}",
                        f"--memory-budget-gb {args.memory_budget_gb:g}",
                        f"--time-budget-s {args.time_budget_s:g}"])
    context = audit.run_context([command], **budgets)  # before the run: the commit that ran
    on_audit = (lambda result: print(result.to_json(), flush=True)) if args.json else None
    audits = audit.audit_problems(problems, on_audit=on_audit, device=args.device,
                                  input_seeds=args.input_seeds, weight_seeds=args.weight_seeds,
                                  tolerance=(args.atol, args.rtol), memory_budget_gb=args.memory_budget_gb,
                                  time_budget_s=args.time_budget_s)
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
    return EXIT_OK


def cmd_info(args: argparse.Namespace) -> int:
    import torch
    import triton

    from tritongym import __version__
    from tritongym.evaluator.sandbox import bwrap_problem

    problem = bwrap_problem()
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
    }
    if args.json:
        print(json.dumps(info))
    else:
        for key, value in info.items():
            print(f"{key:16s} {value}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tritongym",
        description="Evaluate LLM-written Triton kernels: correctness, proof of Triton work, speed, "
                    "and a verdict the candidate cannot forge.",
        epilog="Exit codes: 0 verdicts produced (whatever they are); 2 usage error (missing file, invalid "
               "option, malformed problem); 3 evaluator failure.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p_eval = commands.add_parser("eval", help="evaluate one solution against one problem",
                                 description="Evaluate a candidate ModelNew against a KernelBench-format problem.")
    p_eval.add_argument("--problem", required=True, metavar="FILE", help="problem .py (Model, get_inputs, "
                                                                       "get_init_inputs)")
    p_eval.add_argument("--solution", required=True, metavar="FILE", help="solution .py defining ModelNew")
    p_eval.add_argument("--json", action="store_true", help="print the result as one JSON object")
    _add_eval_options(p_eval)
    p_eval.set_defaults(func=cmd_eval)

    p_run = commands.add_parser("run", help="evaluate a folder of solutions against a problem set",
                                description="Pair each problem with the solution file of the same name "
                                            "and evaluate them all.")
    p_run.add_argument("--problems", default="builtin",
                       help="'builtin', a problem .py, a KernelBench folder, or a .jsonl/.parquet file in the "
                            "Hugging Face layout (default: %(default)s)")
    p_run.add_argument("--solutions", required=True, metavar="DIR",
                       help="folder with one <problem name>.py per problem (levelN/ subfolders also work)")
    p_run.add_argument("--level", type=int, action="append", help="only these KernelBench levels (repeatable)")
    p_run.add_argument("--json", action="store_true", help="print one JSON object per evaluation (JSON lines)")
    _add_eval_options(p_run)
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
    p_audit.set_defaults(func=cmd_audit)

    p_info = commands.add_parser("info", help="versions, devices and sandbox availability (for bug reports)")
    p_info.add_argument("--json", action="store_true", help="one JSON object")
    p_info.set_defaults(func=cmd_info)
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


if __name__ == "__main__":
    sys.exit(main())
