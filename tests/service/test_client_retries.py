"""The clients' retries, against a real HTTP server on loopback that answers 503/429 first."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tritongym.service.client import AsyncClient, Client, ServiceHTTPError


class _Flaky(BaseHTTPRequestHandler):
    script: list[tuple[int, dict]] = []
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.seen.append(self.path)
        status, body = self.script.pop(0) if self.script else (200, {"status": "ready"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if status in (429, 503):
            self.send_header("Retry-After", "0")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def flaky():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Flaky.seen = []
    yield server
    server.shutdown()
    server.server_close()


def test_retries_503_and_429_then_succeeds(flaky):
    _Flaky.script = [(503, {"detail": "starting"}), (429, {"detail": "slow down"}), (200, {"status": "ready"})]
    with Client(f"http://127.0.0.1:{flaky.server_port}", backoff=0.01) as client:
        assert client.health() == {"status": "ready"}
    assert _Flaky.seen == ["/readyz"] * 3


def test_gives_up_after_its_retries_with_the_last_reason(flaky):
    _Flaky.script = [(503, {"detail": "still starting"})] * 10
    with Client(f"http://127.0.0.1:{flaky.server_port}", retries=2, backoff=0.01) as client:
        with pytest.raises(ServiceHTTPError) as failed:
            client.health()
    assert failed.value.status_code == 503 and failed.value.detail == "still starting"
    assert len(_Flaky.seen) == 3


def test_a_4xx_is_not_retried(flaky):
    _Flaky.script = [(404, {"detail": "no job 'x'"})]
    with Client(f"http://127.0.0.1:{flaky.server_port}", backoff=0.01) as client:
        with pytest.raises(ServiceHTTPError, match="no job"):
            client.job("x")
    assert _Flaky.seen == ["/v1/evaluations/x"]


def test_async_client_retries_too(flaky):
    _Flaky.script = [(502, {"detail": "proxy"}), (200, {"status": "ready"})]

    async def main():
        async with AsyncClient(f"http://127.0.0.1:{flaky.server_port}", backoff=0.01) as client:
            return await client.health()

    assert asyncio.run(main()) == {"status": "ready"}
    assert len(_Flaky.seen) == 2


def test_connection_refused_is_retried_then_raised():
    import httpx

    with Client("http://127.0.0.1:9", retries=1, backoff=0.01) as client:
        with pytest.raises(httpx.ConnectError):
            client.health()
