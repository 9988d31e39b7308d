"""A `tritongym serve` running on this machine, found by `tritongym eval` (issue 46).

One evaluation in a fresh process starts three workers (reference, jailed candidate, clean room),
each importing torch and Triton, and runs the pre-flight probe: about 10 s on a 2-core machine,
where a warm server's pool answers the same evaluation in about 0.6 s. So ``tritongym serve`` on a
loopback address records itself here, and ``tritongym eval`` without ``--server`` evaluates through
it when one is running (``--local`` opts out). The verdict is the same code's: the server runs
`tritongym.evaluate` in its pool with the options the command line gave.

The record, ``<data dir>/local-server.json`` (`default_data_dir`; mode 0600), holds the URL, the
server's pid, its sandbox and whether it needs a token. It is used only when that process is alive
and ``/readyz`` answers 200 within half a second; a stale record (a server killed with SIGKILL)
costs one failed ``kill(pid, 0)`` and is ignored. Standard library only: the check runs before the
CLI knows whether it will import torch.
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

from tritongym.service.config import default_data_dir

RECORD_NAME = "local-server.json"
#: How long `find_local_server` waits for ``/readyz``: longer means a busy server (its pool is full).
READY_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class LocalServer:
    """What a running ``tritongym serve`` says about itself."""

    url: str
    pid: int
    sandbox: str
    #: whether requests need the bearer token (`eval` sends ``$TRITONGYM_TOKEN``)
    token: bool


def record_path() -> Path:
    return default_data_dir() / RECORD_NAME


def register(server: LocalServer, path: Path | None = None) -> Path:
    """Write `server`'s record (atomically, mode 0600); the last server started wins."""
    path = path or record_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".local-server-", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as out:  # mkstemp's file is 0600 already
        json.dump(asdict(server), out)
    os.replace(temporary, path)
    return path


def unregister(pid: int, path: Path | None = None) -> None:
    """Remove the record if it is still `pid`'s (a later server's record stays)."""
    path = path or record_path()
    recorded = read_record(path)
    if recorded is not None and recorded.pid == pid:
        path.unlink(missing_ok=True)


def read_record(path: Path | None = None) -> LocalServer | None:
    """The record as written, or None when there is none or it is not one of ours."""
    try:
        data = json.loads((path or record_path()).read_text(encoding="utf-8"))
        return LocalServer(url=str(data["url"]), pid=int(data["pid"]), sandbox=str(data["sandbox"]),
                           token=bool(data["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid: not our server
        return False
    return True


def find_local_server(path: Path | None = None, timeout: float = READY_TIMEOUT_S) -> LocalServer | None:
    """The recorded server if its process is alive and ready now, else None."""
    server = read_record(path)
    if server is None or not _alive(server.pid):
        return None
    # No proxy: the server is on loopback, and a proxy from the environment would answer for it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(server.url.rstrip("/") + "/readyz", timeout=timeout) as reply:
            return server if reply.status == 200 else None
    except (urllib.error.URLError, OSError, ValueError):
        return None
