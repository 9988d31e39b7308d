"""``tritongym serve``, and ``--server URL`` for ``tritongym eval`` / ``tritongym run``.

`register(subparsers)` adds the ``serve`` command; `add_server_option(parser)` adds
``--server``; `cmd_eval_remote` / `cmd_run_remote` are what ``eval`` and ``run`` call when it
is given. The server's imports (FastAPI, uvicorn) happen only when ``serve`` runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_EVALUATOR = 3


def register(subparsers: Any) -> None:
    """Add ``tritongym serve`` to the CLI's subcommands."""
    from tritongym.service.config import default_data_dir

    p = subparsers.add_parser(
        "serve", help="run the evaluation service (HTTP API, durable queue, KernelGYM-compatible)",
        description="Serve evaluations over HTTP: the native /v1 API and KernelGYM's /evaluate, /status, /results. "
                    "Jobs are kept in a SQLite file (--db) and survive restarts. Off loopback a bearer token is "
                    "required (--token-env). See docs/service.md.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    p.add_argument("--workers", type=int, help="concurrent evaluations (default: one per GPU, else the core count)")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="execution backend "
                                                                              "(default: %(default)s)")
    p.add_argument("--db", default=str(default_data_dir() / "service.db"), metavar="PATH",
                   help="SQLite job store, created if missing (default: %(default)s)")
    p.add_argument("--token-env", metavar="VAR", help="environment variable holding the bearer token clients must "
                                                      "send; required to bind a non-loopback address")
    p.add_argument("--device", default="auto", help="evaluation device when a request names none "
                                                    "(default: %(default)s)")
    p.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                   help="sandbox of every evaluation; clients cannot change it (default: %(default)s)")
    p.add_argument("--event-log", metavar="PATH", help="JSON lines of finished evaluations (default: beside --db)")
    p.add_argument("--max-batch", type=int, default=512, help="items per submission (default: %(default)s)")
    p.add_argument("--max-in-flight", type=int, default=10_000,
                   help="unfinished jobs per client (X-Client-Id, else address) (default: %(default)s)")
    p.add_argument("--max-body-mb", type=float, default=8.0, help="request body limit, MiB (default: %(default)s)")
    p.add_argument("--retention-hours", type=float, default=168.0,
                   help="finished jobs are deleted after this long (default: %(default)s)")
    p.add_argument("--max-finished", type=int, default=200_000,
                   help="finished jobs kept at most (oldest deleted first) (default: %(default)s)")
    p.add_argument("--max-problems", type=int, default=10_000,
                   help="registered problems kept at most (oldest registration first; also deleted "
                        "--retention-hours after their last registration once no job uses them) (default: %(default)s)")
    p.add_argument("--access-log", action="store_true", help="log every HTTP request")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=cmd_serve)


def add_server_option(parser: argparse.ArgumentParser) -> None:
    """``--server URL``: evaluate through a running ``tritongym serve`` instead of locally."""
    parser.add_argument("--server", metavar="URL", help="evaluate on this tritongym service (e.g. "
                                                        "http://127.0.0.1:8000) instead of locally; its token, "
                                                        "if any, from $TRITONGYM_TOKEN")


def cmd_serve(args: argparse.Namespace) -> int:
    from tritongym.errors import OptionsError
    from tritongym.service.config import ServiceConfig, check_bind, token_from_env

    try:
        from tritongym.evaluator.common.device import parse_device

        token = token_from_env(args.token_env)

        parse_device(args.device)  # a bad default device would refuse every request; refuse it now
        check_bind(args.host, token)
        config = ServiceConfig(db_path=Path(args.db), workers=args.workers, backend=args.backend, token=token,
                               device=args.device, sandbox=args.sandbox,
                               event_log=Path(args.event_log) if args.event_log else None,
                               max_batch=args.max_batch, max_in_flight_per_client=args.max_in_flight,
                               max_body_bytes=int(args.max_body_mb * (1 << 20)),
                               retention_s=args.retention_hours * 3600.0, max_finished=args.max_finished,
                               max_problems=args.max_problems)
    except OptionsError as exc:
        print(f"tritongym serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        import uvicorn

        from tritongym.service.app import create_app
    except ImportError as exc:
        print(f"tritongym serve: needs the service extra (pip install -e '.[service]'): {exc}", file=sys.stderr)
        return EXIT_USAGE
    app = create_app(config)
    print(f"tritongym serve: http://{args.host}:{args.port} (db {config.db_path}, events {config.event_log})",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    return EXIT_OK


def _client(args: argparse.Namespace) -> Any:
    try:
        from tritongym.service.client import Client
    except ImportError as exc:  # httpx
        raise SystemExit(f"--server needs httpx (pip install -e '.[service]'): {exc}") from None
    return Client(args.server)


def cmd_eval_remote(args: argparse.Namespace) -> int:
    """``tritongym eval --server URL``: the same evaluation, on the service."""
    from tritongym.cli.options import options_from
    from tritongym.service.client import JobFailed, ServiceHTTPError

    for label, path in (("problem", args.problem), ("solution", args.solution)):
        if not Path(path).is_file():
            print(f"tritongym eval: {label} file not found: {path}", file=sys.stderr)
            return EXIT_USAGE
    with _client(args) as client:
        try:
            result = client.evaluate(Path(args.problem), Path(args.solution), options_from(args))
        except ServiceHTTPError as exc:
            print(f"tritongym eval: the server refused the request: {exc}", file=sys.stderr)
            return EXIT_USAGE if 400 <= exc.status_code < 500 else EXIT_EVALUATOR
        except JobFailed as exc:
            print(f"tritongym eval: evaluator failure on the server: {exc}", file=sys.stderr)
            return EXIT_EVALUATOR
    print(result.to_json() if args.json else result.summary())
    return EXIT_OK


def cmd_run_remote(args: argparse.Namespace) -> int:
    """``tritongym run --server URL``: every (problem, solution) pair on the service; results
    print as they finish, in ``run``'s format."""
    from tritongym.cli.options import options_from
    from tritongym.evaluator.result import printable
    from tritongym.service.client import JobFailed, ServiceHTTPError
    from tritongym.tasks import load_problems

    problems = load_problems(args.problems, levels=args.level)
    solutions = Path(args.solutions)
    if not solutions.is_dir():
        print(f"tritongym run: solutions folder not found: {solutions}", file=sys.stderr)
        return EXIT_USAGE
    paired = []
    for problem in problems:
        candidates = [solutions / f"{problem.name}.py"]
        if problem.level is not None:
            candidates.insert(0, solutions / f"level{problem.level}" / f"{problem.name}.py")
        paired.append((problem, next((c for c in candidates if c.is_file()), None)))
    jobs = [(p, s) for p, s in paired if s is not None]
    missing = [p.problem_id for p, s in paired if s is None]
    if not jobs:
        print(f"tritongym run: no solution in {solutions} matches any problem", file=sys.stderr)
        return EXIT_USAGE
    options = options_from(args)
    started = time.monotonic()
    counts: dict[str, int] = {}
    rewards: list[float] = []
    if not args.json:
        print(f"{'problem':40s} {'status':20s} {'reward':>7s} {'trials':>7s} {'seconds':>8s}")
    with _client(args) as client:
        try:
            stream = client.evaluate_many([(p, s, options) for p, s in jobs], return_exceptions=True)
            for index, outcome in stream:
                problem, solution = jobs[index]
                if isinstance(outcome, JobFailed):
                    counts["error"] = counts.get("error", 0) + 1
                    reason = printable(str(outcome))[:300]
                    print(json.dumps({"problem": problem.problem_id, "solution": str(solution), "error": reason})
                          if args.json else f"{problem.problem_id:40s} {'(evaluator error)':20s}\n    {reason}",
                          flush=True)
                    continue
                counts[str(outcome.status)] = counts.get(str(outcome.status), 0) + 1
                rewards.append(outcome.reward)
                if args.json:
                    print(json.dumps({"problem": problem.problem_id, "solution": str(solution),
                                      **outcome.to_dict()}), flush=True)
                else:
                    passed = sum(t.passed for t in outcome.trials)
                    print(f"{problem.problem_id:40s} {str(outcome.status):20s} {outcome.reward:7.3f} "
                          f"{passed:>3d}/{len(outcome.trials):<3d} {outcome.duration_s:8.1f}", flush=True)
        except ServiceHTTPError as exc:
            print(f"tritongym run: the server refused the request: {exc}", file=sys.stderr)
            return EXIT_USAGE if 400 <= exc.status_code < 500 else EXIT_EVALUATOR
    if not args.json:
        summary = ", ".join(f"{count} {status}" for status, count in sorted(counts.items()))
        mean = sum(rewards) / len(rewards) if rewards else 0.0
        print(f"\n{sum(counts.values())} evaluated on {args.server}: {summary}; mean reward {mean:.3f}; "
              f"{time.monotonic() - started:.0f} s")
        if missing:
            print(f"{len(missing)} problem(s) had no solution file: {', '.join(missing[:10])}")
    return EXIT_OK
