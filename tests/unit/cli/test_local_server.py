"""`tritongym eval` and a running local `tritongym serve` (service/local.py), without the service extra.

A real HTTP server on loopback (the standard library's) stands in for `tritongym serve`'s health
probe; the end-to-end route (a real `tritongym serve`, a real `tritongym eval`) is in
tests/service/test_local_route.py.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tritongym.service import local
from tritongym.service.cli import local_server_for


class _Ready(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - the standard library's name
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def health_server():
    """A loopback server whose /readyz answers `status` (set per test)."""
    handler = type("Handler", (_Ready,), {"status": 200})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def _record(tmp_path: Path, url: str, pid: int | None = None, **fields) -> Path:
    server = local.LocalServer(url=url, pid=os.getpid() if pid is None else pid,
                               sandbox=fields.get("sandbox", "auto"), token=fields.get("token", False))
    return local.register(server, tmp_path / "tritongym" / local.RECORD_NAME)


def test_a_recorded_live_ready_server_is_found_and_its_record_is_private(tmp_path, health_server):
    server, _ = health_server
    path = _record(tmp_path, f"http://127.0.0.1:{server.server_port}")
    assert path.stat().st_mode & 0o777 == 0o600
    found = local.find_local_server(path)
    assert found == local.LocalServer(url=f"http://127.0.0.1:{server.server_port}", pid=os.getpid(),
                                      sandbox="auto", token=False)


def test_a_server_that_is_not_ready_or_not_listening_is_not_used(tmp_path, health_server):
    server, handler = health_server
    handler.status = 503  # /readyz: the pool is not up
    assert local.find_local_server(_record(tmp_path, f"http://127.0.0.1:{server.server_port}")) is None
    handler.status = 200
    server_port = server.server_port
    assert local.find_local_server(_record(tmp_path, f"http://127.0.0.1:{server_port}")) is not None
    assert local.find_local_server(_record(tmp_path, "http://127.0.0.1:9")) is None  # nothing listens


def test_a_stale_record_of_a_dead_process_is_ignored(tmp_path, health_server):
    server, _ = health_server
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = _record(tmp_path, f"http://127.0.0.1:{server.server_port}", pid=dead.pid)
    assert local.find_local_server(path) is None


def test_garbage_or_no_record_is_no_server(tmp_path):
    path = tmp_path / local.RECORD_NAME
    assert local.find_local_server(path) is None
    path.write_text("{not json")
    assert local.read_record(path) is None
    path.write_text(json.dumps({"url": "http://127.0.0.1:1"}))
    assert local.read_record(path) is None


def test_a_server_removes_only_its_own_record(tmp_path):
    path = _record(tmp_path, "http://127.0.0.1:1", pid=os.getpid())
    local.unregister(os.getpid() + 1, path)  # a second server stopping: the record is not its own
    assert path.exists()
    local.unregister(os.getpid(), path)
    assert not path.exists()
    local.unregister(os.getpid(), path)  # already gone: nothing to do


def _args(**values) -> argparse.Namespace:
    return argparse.Namespace(**{"local": False, "server": None, "sandbox": "auto", **values})


@pytest.mark.parametrize(("args", "recorded", "token_env", "used"), [
    (_args(), {}, None, True),
    (_args(local=True), {}, None, False),                         # --local
    (_args(server="http://elsewhere:8000"), {}, None, False),       # --server names its own
    (_args(sandbox="none"), {"sandbox": "bwrap"}, None, False),     # clients cannot change the sandbox
    (_args(sandbox="bwrap"), {"sandbox": "bwrap"}, None, True),
    (_args(), {"sandbox": "bwrap"}, None, True),
    (_args(), {"sandbox": "none"}, None, False),                    # auto never downgrades to no jail
    (_args(sandbox="none"), {"sandbox": "none"}, None, True),
    (_args(sandbox="bwrap"), {"sandbox": "auto"}, None, False),
    (_args(), {"token": True}, None, False),                        # a token the command does not have
    (_args(), {"token": True}, "secret", True),
])
def test_eval_uses_the_local_server_only_when_it_gives_what_the_command_asked(
        tmp_path, monkeypatch, health_server, args, recorded, token_env, used):
    server, _ = health_server
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    if token_env is None:
        monkeypatch.delenv("TRITONGYM_TOKEN", raising=False)
    else:
        monkeypatch.setenv("TRITONGYM_TOKEN", token_env)
    _record(tmp_path, f"http://127.0.0.1:{server.server_port}", **recorded)
    assert (local_server_for(args) is not None) is used


def test_building_the_evaluation_options_and_reading_the_record_import_no_torch():
    # `eval --server` (and the local route) evaluates elsewhere: the CLI process should not pay the
    # ~2 s of importing torch to parse --device or build EvalOptions.
    code = ("import sys\n"
            "from tritongym.cli import build_parser\n"
            "from tritongym.cli.options import options_from\n"
            "from tritongym.service.cli import local_server_for\n"
            "args = build_parser().parse_args(['eval', '--problem', 'builtin/07_softmax', '--solution', 'x.py',"
            " '--device', 'cuda:1', '--tolerance', 'strict'])\n"
            "options = options_from(args)\n"
            "local_server_for(args)\n"
            "assert options.device == 'cuda:1'\n"
            "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
