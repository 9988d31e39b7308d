"""A real ``tritongym serve`` on loopback, in a subprocess, over a real SQLite file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parents[2]
BUILTIN = ROOT / "src" / "tritongym" / "tasks" / "builtin"
EXAMPLES = ROOT / "examples" / "builtin"

#: A candidate refused at the static gate (it never imports triton): a real evaluation with a
#: real verdict (integrity_violation / no_triton_kernel) that takes milliseconds.
NO_TRITON = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x, y):\n        return x + y\n"
#: Not Python: a compile_error verdict, also at once.
SYNTAX_ERROR = "def ModelNew(:\n    pass\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """One ``tritongym serve`` process; `restart` keeps the database."""

    db: Path
    workers: int = 2
    token_env: dict[str, str] | None = None
    extra: list[str] = field(default_factory=list)
    port: int = 0
    process: subprocess.Popen | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> Server:
        self.port = free_port()
        command = [sys.executable, "-m", "tritongym.cli", "serve", "--port", str(self.port), "--db", str(self.db),
                   "--workers", str(self.workers), "--device", "cpu", "--log-level", "warning", *self.extra]
        env = dict(os.environ)
        if self.token_env:
            env.update(self.token_env)
            command += ["--token-env", next(iter(self.token_env))]
        self.log = self.db.with_suffix(f".{self.port}.log")
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited {self.process.returncode}: {self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server not ready in {timeout} s: {self.log.read_text()[-3000:]}")

    def kill9(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


@pytest.fixture(scope="package")
def server(tmp_path_factory) -> Server:
    """A server shared by the API tests (2 workers, CPU)."""
    srv = Server(db=tmp_path_factory.mktemp("service") / "jobs.db").start()
    yield srv
    srv.stop()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=120) as client:
        yield client


def problem_source(name: str) -> str:
    return (BUILTIN / f"{name}.py").read_text(encoding="utf-8")
