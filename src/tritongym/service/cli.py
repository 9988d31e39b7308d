"""``tritongym serve``, and ``--server URL`` for ``tritongym eval`` / ``tritongym run``.

`register(subparsers)` adds the ``serve`` command; `add_server_option(parser)` adds
``--server``; `cmd_eval_remote` / `cmd_run_remote` are what ``eval`` and ``run`` call when it
is given. The server's imports (FastAPI, uvicorn) happen only when ``serve`` runs.
"""

from __future__ import annotations

import argparse
import os
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
        from tritongym.evaluator.common.device_names import parse_device

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
    from tritongym.service import local
    from tritongym.service.config import is_loopback

    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{args.port}"
    # On loopback, `tritongym eval` on this machine finds this server once it is up and uses its warm
    # pool (service/local.py); the record goes when the server shuts down.
    announced = local.LocalServer(url=url, pid=os.getpid(), sandbox=args.sandbox, token=token is not None)
    hooks = {"on_started": lambda: local.register(announced),
             "on_stopping": lambda: local.unregister(announced.pid)} if is_loopback(args.host) else {}
    app = create_app(config, **hooks)
    print(f"tritongym serve: {url} (db {config.db_path}, events {config.event_log})", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    return EXIT_OK


def add_local_option(parser: argparse.ArgumentParser) -> None:
    """``--local``: evaluate in this process even when a local ``tritongym serve`` is running."""
    parser.add_argument("--local", action="store_true",
                        help="evaluate in this process even when a 'tritongym serve' runs on this machine "
                             "(without --server or --local, eval uses a running local server's warm workers: "
                             "the same verdict in about a second)")


def local_server_for(args: argparse.Namespace) -> Any:
    """The running local server `eval` should use for `args`, or None (then it evaluates here).

    None with ``--local`` or ``--server``; when no server is recorded, alive and ready; when the
    command asks for a sandbox other than the server's (clients cannot change it; the default
    ``auto``, bubblewrap wherever it works, is never sent to a server started with ``--sandbox
    none``); when the server needs a token and ``$TRITONGYM_TOKEN`` is unset; or without httpx (the
    service extra)."""
    if getattr(args, "local", False) or getattr(args, "server", None):
        return None
    from tritongym.service.local import find_local_server

    server = find_local_server()
    if server is None:
        return None
    same_sandbox = args.sandbox == server.sandbox or (args.sandbox == "auto" and server.sandbox != "none")
    if not same_sandbox or (server.token and not os.environ.get("TRITONGYM_TOKEN")):
        return None
    try:
        import httpx  # noqa: F401
    except ImportError:
        return None
    return server


def _client(args: argparse.Namespace) -> Any:
    try:
        from tritongym.service.client import Client
    except ImportError as exc:  # httpx
        raise SystemExit(f"--server needs httpx (pip install -e '.[service]'): {exc}") from None
    return Client(args.server)


def unreachable(command: str, args: argparse.Namespace, exc: Exception) -> int:
    """One line, no traceback, for a server that does not answer (nothing listens, or the connection
    broke): what was tried and how to start one. Exit 3: the evaluator was not available."""
    from tritongym.cli.options import first_line

    reason = first_line(f"{type(exc).__name__}: {exc}", 200)
    print(f"tritongym {command}: no tritongym server answers at {args.server} ({reason}); start one with "
          f"'tritongym serve' (pip install -e '.[service]'), or check the URL", file=sys.stderr)
    return EXIT_EVALUATOR


def remote_size(args: argparse.Namespace) -> str:
    """The ``size`` a remote evaluation asks for: ``--size`` as given; without it, ``cpu`` for
    ``--device cpu``, ``original`` for a GPU, and for ``--device auto`` the server decides
    (``auto``: CPU size when it evaluates on a CPU), as the local commands do on their machine."""
    if getattr(args, "size", None):
        return str(args.size)
    device = str(getattr(args, "device", "auto"))
    if device == "auto":
        return "auto"
    return "original" if device.startswith("cuda") else "cpu"


def _problem_at(problem: Any, size: str) -> dict[str, Any]:
    from tritongym.service.client import problem_ref

    return {**problem_ref(problem), "size": size}


def cmd_eval_remote(args: argparse.Namespace) -> int:
    """``tritongym eval --server URL``: the same evaluation, on the service."""
    from tritongym.cli.options import options_from
    from tritongym.errors import ProblemError
    from tritongym.service.client import JobFailed, ServiceHTTPError
    from tritongym.tasks import find_problem

    if not Path(args.solution).is_file():
        print(f"tritongym eval: solution file not found: {args.solution}", file=sys.stderr)
        return EXIT_USAGE
    # As the local eval: a file, or an id/name in --problems (or in the dataset given as --problem with --id).
    if getattr(args, "id", None):
        problem = find_problem(args.id, args.problem)
    else:
        problem = find_problem(args.problem, getattr(args, "problems", "builtin"))
    size = remote_size(args)
    if size == "cpu":  # sized here, where the problem's own code may run (the server sizes only known problems)
        from tritongym.tasks.sizing import cpu_variant

        try:
            problem = cpu_variant(problem)
        except ProblemError as exc:
            print(f"tritongym eval: not evaluated: {exc}", file=sys.stderr)
            return EXIT_USAGE
    client = _client(args)  # first: it names the extra to install when httpx is missing

    import httpx

    with client:
        try:
            result = client.evaluate(_problem_at(problem, size), Path(args.solution), options_from(args))
        except httpx.TransportError as exc:
            return unreachable("eval", args, exc)
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
    print as they finish, in ``run``'s format (the same pairing, ``--only``, ``--size``, ``--out``)."""
    from dataclasses import replace

    from tritongym.bench.solutions import pair_solutions
    from tritongym.cli.options import options_from
    from tritongym.cli.run_table import RunTable
    from tritongym.evaluator.result import printable
    from tritongym.service.client import JobFailed, ServiceHTTPError
    from tritongym.tasks import load_problems, select_problems

    problems = select_problems(load_problems(args.problems, levels=args.level), args.only, args.problems)
    solutions = Path(args.solutions)
    if not solutions.is_dir():
        print(f"tritongym run: solutions folder not found: {solutions}", file=sys.stderr)
        return EXIT_USAGE
    jobs, missing = pair_solutions(problems, solutions)
    if not jobs:
        print(f"tritongym run: no solution in {solutions} matches any problem", file=sys.stderr)
        return EXIT_USAGE
    size = remote_size(args)
    refused: list[tuple[str, str]] = []
    if size == "cpu":  # sized here, where the problems' own code may run (the server sizes only known problems)
        from tritongym.tasks.sizing import at_size

        sized = at_size(list({job.problem.problem_id: job.problem for job in jobs}.values()), "cpu")
        refused = [(p.problem_id, reason) for p, reason in sized.refused]
        by_id = {p.problem_id: p for p in sized.problems}
        jobs = [replace(job, problem=by_id[job.problem.problem_id]) for job in jobs if job.problem.problem_id in by_id]
    options = options_from(args)
    client = _client(args)  # before the table: it names the extra to install when httpx is missing

    import httpx

    started = time.monotonic()
    folder = None
    if getattr(args, "run_dir", None):
        from tritongym.bench.run_folder import RunFolder

        folder = RunFolder(args.run_dir, options=options, size=size)
    table = RunTable(args, write=lambda line: print(line, flush=True), folder=folder)
    table.start(refused, size)
    try:
        with client:
            stream = client.evaluate_many([(_problem_at(job.problem, size), job.solution, options) for job in jobs],
                                          return_exceptions=True) if jobs else iter(())
            for index, outcome in stream:
                job = jobs[index]
                head = {"problem": job.problem.problem_id, "name": job.problem.name, "sample": job.sample,
                        "solution": str(job.solution)}
                if isinstance(outcome, JobFailed):
                    table.error(head, job.shown, printable(str(outcome))[:300], job)
                else:
                    table.verdict(head, job.shown, outcome, job)
    except ServiceHTTPError as exc:
        print(f"tritongym run: the server refused the request: {exc}", file=sys.stderr)
        return EXIT_USAGE if 400 <= exc.status_code < 500 else EXIT_EVALUATOR
    except httpx.TransportError as exc:
        return unreachable("run", args, exc)
    finally:
        table.close()
        if folder is not None:
            folder.close([p.problem_id for p in missing])
    if not args.json:
        print(f"\n{table.summary(f' on {args.server}')}; {time.monotonic() - started:.0f} s")
        if missing:
            shown = ", ".join(p.name for p in missing[:5])
            print(f"{len(missing)} of {len(problems)} problem(s) had no solution file (e.g. {shown}); "
                  "--only NAME narrows the set")
        if getattr(args, "out", None):
            print(f"results written to {args.out} (one JSON object per line)")
        if folder is not None:
            print(f"run folder: {args.run_dir} (tritongym report {args.run_dir})")
    return EXIT_OK
