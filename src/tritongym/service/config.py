"""`ServiceConfig`: what ``tritongym serve`` was started with, and where its files go."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from tritongym.errors import OptionsError


def default_data_dir() -> Path:
    """The user's data directory for tritongym (``$XDG_DATA_HOME/tritongym``, else
    ``~/.local/share/tritongym``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tritongym"


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class ServiceConfig:
    """Settings of one service instance.

    Attributes:
        db_path: the SQLite job store (created); the event log sits beside it by default.
        workers: concurrent evaluations (None: the pool's default, one per GPU or core).
        backend: execution backend, ``local`` or ``ray``.
        token: the bearer token every request but the health probes must carry (None: no auth,
            allowed on loopback only; see `check_bind`).
        device: the evaluation device when a request does not name one.
        sandbox: the sandbox mode of every evaluation; clients cannot change it.
        event_log: JSON-lines file with one line per finished evaluation (None: beside the db).
        max_body_bytes: largest request body accepted (413 beyond).
        max_solution_bytes: largest candidate source (413 beyond).
        max_problem_bytes: largest problem source (413 beyond).
        max_batch: most items in one batch submission (422 beyond).
        max_in_flight_per_client: queued + running jobs one client may have (429 beyond).
        max_timeout_s: largest per-evaluation timeout a client may ask for (422 beyond).
        retention_s: finished jobs are deleted this long after finishing.
        max_finished: at most this many finished jobs are kept (oldest deleted first).
        max_problems: at most this many registered problems are kept (oldest registration first;
            never one an unfinished job refers to); one ``POST /v1/problems`` holds at most
            `max_batch`.
        prune_interval_s: how often pruning runs.
        dispatch_depth: jobs handed to the pool at once (None: 4 per worker); the rest wait in
            the store, so a restart loses nothing that was accepted.
        wait_timeout_s: longest a blocking call (``/v1/evaluate``, KernelGYM ``/evaluate``) waits.
    """

    db_path: Path
    workers: int | None = None
    backend: str = "local"
    token: str | None = None
    device: str = "auto"
    sandbox: str = "auto"
    event_log: Path | None = None
    max_body_bytes: int = 8 << 20
    max_solution_bytes: int = 256 << 10
    max_problem_bytes: int = 1 << 20
    max_batch: int = 512
    max_in_flight_per_client: int = 10_000
    max_timeout_s: float = 1800.0
    retention_s: float = 7 * 24 * 3600.0
    max_finished: int = 200_000
    max_problems: int = 10_000
    prune_interval_s: float = 60.0
    dispatch_depth: int | None = None
    wait_timeout_s: float = 3600.0

    def __post_init__(self) -> None:
        self.db_path = Path(self.db_path)
        if self.event_log is None:
            self.event_log = self.db_path.with_name(self.db_path.stem + ".events.jsonl")
        self.event_log = Path(self.event_log)
        if self.backend not in ("local", "ray"):
            raise OptionsError(f"backend must be local or ray, got {self.backend!r}")
        if self.sandbox not in ("auto", "bwrap", "none"):
            raise OptionsError(f"sandbox must be auto, bwrap or none, got {self.sandbox!r}")
        for name in ("max_body_bytes", "max_solution_bytes", "max_problem_bytes", "max_batch",
                     "max_in_flight_per_client", "max_finished", "max_problems"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise OptionsError(f"{name} must be an integer >= 1, got {value!r}")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise OptionsError(f"workers must be an integer >= 1, got {self.workers!r}")


def token_from_env(variable: str | None) -> str | None:
    """The bearer token held by environment variable ``variable`` (``--token-env``); None without one.
    An unset or empty variable is refused: serving with no token by mistake would be silent."""
    if not variable:
        return None
    token = os.environ.get(variable)
    if not token:
        raise OptionsError(f"environment variable {variable} is not set or empty")
    return token


def check_bind(host: str, token: str | None) -> None:
    """Refuse to serve a non-loopback address without a token: anyone who can reach the port
    could otherwise run code in the sandboxed workers and read every result."""
    if not is_loopback(host) and not token:
        raise OptionsError(f"refusing to listen on {host} without a token: set one with --token-env VAR "
                           "(clients then send 'Authorization: Bearer <token>'), or bind 127.0.0.1")
