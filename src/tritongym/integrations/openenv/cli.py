"""``tritongym openenv``: serve the multi-turn environment over OpenEnv's protocol.

Importable without the extra: OpenEnv, FastAPI and uvicorn are imported only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

EXIT_OK, EXIT_USAGE = 0, 2


def register(commands: Any) -> None:
    """Add ``tritongym openenv`` to the CLI's subcommands."""
    from tritongym.cli.options import add_eval_options

    p = commands.add_parser(
        "openenv", help="serve the multi-turn kernel environment over OpenEnv's protocol (WebSocket sessions)",
        description="Serve KernelEnv episodes as an OpenEnv environment: one session per WebSocket (/ws), many at "
                    "once, all evaluating on one pool of sandboxed workers; plus OpenEnv's /reset, /step, /state, "
                    "/schema, /health, /metadata. Clients: OpenEnv's EnvClient (tritongym's KernelEnvClient), "
                    "TRL's environment_factory, SkyRL. Off loopback a bearer token is required (--token-env). "
                    "Needs pip install -e '.[openenv]' torch==2.13.0 from the clone (torch installed first); "
                    "see docs/openenv.md.")
    p.add_argument("--problems", default="builtin", help="as for 'run' (default: %(default)s)")
    p.add_argument("--level", type=int, action="append", help="only these KernelBench levels (repeatable)")
    p.add_argument("--only", action="append", metavar="NAME", help="serve only this problem, by name or id "
                                                                   "(repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8010, help="port (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1,
                   help="concurrent evaluations shared by all sessions; on a GPU keep it at the number of "
                        "devices (default: %(default)s)")
    p.add_argument("--max-sessions", type=int, default=8, help="concurrent WebSocket sessions (default: %(default)s)")
    p.add_argument("--session-timeout", type=float, metavar="SECONDS",
                   help="close sessions idle this long (default: never)")
    p.add_argument("--max-turns", type=int, default=3, help="turns per episode (default: %(default)s)")
    p.add_argument("--feedback", choices=("minimal", "standard", "full"), default="standard",
                   help="feedback detail (default: %(default)s)")
    p.add_argument("--history", default="full", help="history policy of the observation's messages, e.g. full, "
                                                     "last:2, strip-think,best:2 (default: %(default)s)")
    p.add_argument("--extract", choices=("last", "first", "whole"), default="last",
                   help="which part of a reply is the candidate (default: %(default)s)")
    p.add_argument("--success", default="never", help="when an episode ends early: never, correct, speedup:X "
                                                      "(default: %(default)s)")
    p.add_argument("--token-env", metavar="VAR", help="environment variable holding the bearer token clients must "
                                                      "send; required to bind a non-loopback address")
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    add_eval_options(p)
    p.set_defaults(func=cmd_openenv)


def cmd_openenv(args: argparse.Namespace) -> int:
    from tritongym.cli.options import options_from
    from tritongym.errors import TritongymError
    from tritongym.integrations.openenv import require_openenv
    from tritongym.service.config import check_bind, token_from_env
    from tritongym.tasks import load_problems, select_problems

    try:
        token = token_from_env(args.token_env)
        check_bind(args.host, token)
        require_openenv()
        problems = select_problems(load_problems(args.problems, levels=args.level), args.only, args.problems)
        import uvicorn

        from tritongym.integrations.openenv.app import create_app

        app = create_app(problems, options=options_from(args), workers=args.workers,
                         max_sessions=args.max_sessions, session_timeout_s=args.session_timeout, token=token,
                         max_turns=args.max_turns, feedback=args.feedback, history=args.history,
                         extract=args.extract, success=args.success)
    except (TritongymError, ValueError) as exc:
        print(f"tritongym openenv: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"tritongym openenv: ws://{args.host}:{args.port}/ws ({len(problems)} problems, {args.max_turns} turns, "
          f"{args.workers} evaluation worker(s), up to {args.max_sessions} sessions)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return EXIT_OK
