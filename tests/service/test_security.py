"""Bearer token and bind rules: off loopback a token is required; with one, requests need it."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest
from tests.service.conftest import NO_TRITON, ROOT, Server

from tritongym.service.config import check_bind, is_loopback


def test_non_loopback_bind_without_token_is_refused():
    done = subprocess.run([sys.executable, "-m", "tritongym.cli", "serve", "--host", "0.0.0.0", "--port", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "without a token" in done.stderr and "--token-env" in done.stderr


def test_token_env_must_be_set():
    done = subprocess.run([sys.executable, "-m", "tritongym.cli", "serve", "--token-env", "TG_TEST_UNSET_VAR"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={k: v for k, v in __import__("os").environ.items() if k != "TG_TEST_UNSET_VAR"})
    assert done.returncode == 2 and "TG_TEST_UNSET_VAR" in done.stderr


def test_an_invalid_default_device_is_refused_at_start():
    done = subprocess.run([sys.executable, "-m", "tritongym.cli", "serve", "--device", "gpu7", "--port", "1"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "gpu7" in done.stderr


def test_bind_rules():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3") and not is_loopback("example.org")
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", "secret")
    with pytest.raises(ValueError, match="without a token"):
        check_bind("0.0.0.0", None)


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    srv = Server(db=tmp_path_factory.mktemp("guarded") / "jobs.db", workers=1,
                 token_env={"TG_TEST_TOKEN": "s3cret-token"}).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/evaluations"), ("GET", "/v1/evaluations?ids=x"), ("GET", "/v1/problems"), ("GET", "/metrics"),
    ("GET", "/"), ("POST", "/evaluate"), ("GET", "/status/x"), ("DELETE", "/v1/evaluations/x"),
])
def test_requests_without_the_token_get_401(guarded, method, path):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic czNjcmV0LXRva2Vu"}):
        response = httpx.request(method, guarded.url + path, headers=headers, json={}, timeout=30)
        assert response.status_code == 401, (path, headers, response.text)
        assert "bearer token" in response.json()["detail"]


def test_the_token_opens_the_api_and_probes_stay_open(guarded):
    assert httpx.get(guarded.url + "/healthz", timeout=30).status_code == 200
    assert httpx.get(guarded.url + "/readyz", timeout=30).status_code == 200
    headers = {"Authorization": "Bearer s3cret-token"}
    response = httpx.post(guarded.url + "/v1/evaluate", headers=headers, timeout=120,
                          json={"problem": {"builtin": "builtin/01_scaled_add"}, "solution": NO_TRITON})
    assert response.status_code == 200 and response.json()["result"]["status"] == "integrity_violation"
