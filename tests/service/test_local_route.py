"""`tritongym eval` on a machine where `tritongym serve` runs: the warm server answers (service/local.py).

Real parts: a real server in a subprocess on loopback, the real CLI in a subprocess, real jailed
evaluations on both routes. The session's private XDG_DATA_HOME (tests/conftest.py) holds the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.service.conftest import EXAMPLES, ROOT, Server

from tritongym.service import local


def _eval(*extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tritongym.cli", "eval", "--problem", "builtin/02_leaky_relu", "--solution",
               str(EXAMPLES / "02_leaky_relu.py"), "--device", "cpu", "--json", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT, env=dict(os.environ))


def test_eval_uses_a_running_local_server_says_so_and_stops_using_it_when_it_stops(tmp_path):
    server = Server(db=tmp_path / "jobs.db", workers=1).start()
    try:
        recorded = local.read_record()
        assert recorded is not None and recorded.url == server.url and recorded.pid == server.process.pid
        routed = _eval()
        assert routed.returncode == 0, routed.stderr
        assert f"evaluated by the local server at {server.url}" in routed.stderr
        result = json.loads(routed.stdout)
        assert result["status"] == "ok" and result["phase_seconds"].get("queue") is not None  # the pool's job

        here = _eval("--local")
        assert here.returncode == 0, here.stderr
        assert "local server" not in here.stderr
        local_result = json.loads(here.stdout)
        assert local_result["status"] == "ok" and "queue" not in local_result["phase_seconds"]
        assert (result["reward"], len(result["trials"])) == (local_result["reward"], len(local_result["trials"]))
    finally:
        server.stop()
    assert local.read_record() is None  # removed on a clean stop
    after = _eval()
    assert after.returncode == 0 and "local server" not in after.stderr
