"""Service failures under attack (issue 22, findings 3-6), each against a real server on loopback.

3. Lone surrogates and NUL characters in any text field are a 422 with the reason (they were a
   500 with the connection dropped: the store cannot encode them, the parser refuses NUL).
4. Limits: non-finite tolerances are refused; ``POST /v1/problems`` holds at most ``--max-batch``
   problems and the store keeps at most ``--max-problems`` registrations; ``/docs`` and
   ``/openapi.json`` need the token; the token is checked before the body is read.
5. A cancelled job leaves its one event-log line; ``tritongym_http_requests`` counts requests.
6. The two APIs' idempotency keys never name each other's jobs.

Every refusal has its honest control beside it.
"""

from __future__ import annotations

import json
import secrets
import time

import httpx
import pytest
from tests.service.conftest import EXAMPLES, NO_TRITON, Server, problem_source

TOKEN = "tg-hard-" + secrets.token_hex(12)
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
MAX_BATCH = 8
MAX_PROBLEMS = 5
HONEST = (EXAMPLES / "01_scaled_add.py").read_text(encoding="utf-8")
#: An honest-looking candidate that takes 60 s to build: cancelled while running.
SLOW = HONEST.replace("super().__init__()", "super().__init__()\n        import time\n        time.sleep(60)", 1)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(db=tmp_path_factory.mktemp("hardening") / "jobs.db", workers=1,
                 token_env={"TG_TEST_HARD_TOKEN": TOKEN},
                 extra=["--max-batch", str(MAX_BATCH), "--max-problems", str(MAX_PROBLEMS)]).start()
    yield srv
    srv.stop()


def post_raw(server, path: str, body: str, headers=HEADERS) -> httpx.Response:
    """A body sent as written: JSON escapes such as \\ud800 reach the server as they are."""
    return httpx.post(server.url + path, content=body.encode("ascii"), headers=headers, timeout=120)


def v1_item(solution: str, problem: dict | None = None, **extra) -> dict:
    return {"problem": problem or {"builtin": "builtin/01_scaled_add"}, "solution": solution, **extra}


# -- 3: text the store and the parser cannot hold ------------------------------------------------
LONE = "\\ud800"  # a JSON escape: one lone high surrogate once parsed
NUL = "\\u0000"


MARK = "@FLAW@"


@pytest.mark.parametrize(("flaw", "reason"), [(LONE, "lone surrogate (U+D800)"), (NUL, "NUL character")],
                         ids=["surrogate", "nul"])
@pytest.mark.parametrize("field", ["solution", "problem.source", "problem.name", "idempotency_key",
                                   "kernel_code", "reference_code", "task_id"])
def test_a_lone_surrogate_or_nul_in_any_text_is_a_422_with_the_reason(server, field, flaw, reason):
    source = problem_source("01_scaled_add")
    if field in ("kernel_code", "reference_code", "task_id"):
        path = "/evaluate"
        request = {"task_id": "t-" + secrets.token_hex(4), "kernel_code": HONEST, "reference_code": source,
                   "backend": "triton"}
        request[field] = request[field][:10] + MARK + request[field][10:]
    else:
        path = "/v1/evaluations"
        item = v1_item(HONEST)
        if field == "solution":
            item["solution"] = HONEST[:40] + MARK + HONEST[40:]
        elif field == "problem.source":
            item["problem"] = {"source": source[:40] + MARK + source[40:]}
        elif field == "problem.name":
            item["problem"] = {"source": source, "name": "a" + MARK + "b"}
        else:
            item["idempotency_key"] = "k" + MARK
        request = {"items": [item]}
    # The flaw goes in as a JSON escape, exactly as a client would send it.
    body = json.dumps(request).replace(MARK, flaw)
    response = post_raw(server, path, body)
    assert response.status_code == 422, (response.status_code, response.text[:500])
    # Fields with a length bound are refused by the schema already ("unable to parse raw data as a
    # unicode string"), the others by the service's own check; either way the reason is named.
    assert reason in response.text or (flaw == LONE and "unicode string" in response.text), response.text[:500]
    assert httpx.get(server.url + "/healthz", timeout=30).status_code == 200


def test_non_ascii_text_is_still_accepted(server):
    response = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120, json={"items": [
        v1_item(NO_TRITON + "# café ✓ 日本\n", idempotency_key="clé-✓-" + secrets.token_hex(4))]})
    assert response.status_code == 202, response.text


def test_a_problem_the_parser_refuses_is_a_422(server):
    nested = "X = " + "(" * 5000 + "1" + ")" * 5000 + "\n" + problem_source("01_scaled_add")
    response = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120,
                          json={"items": [v1_item(NO_TRITON, {"source": nested})]})
    assert response.status_code == 422, response.text[:500]
    assert "malformed problem" in response.text


# -- 4: limits -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", '"inf"', "1e999"])
@pytest.mark.parametrize("option", ["atol", "rtol"])
def test_non_finite_tolerances_are_refused(server, option, value):
    body = json.dumps({"items": [v1_item(NO_TRITON, options={option: MARK})]}).replace(f'"{MARK}"', value)
    response = post_raw(server, "/v1/evaluations", body)
    assert response.status_code == 422, (response.status_code, response.text[:300])
    assert option in response.text


def test_a_finite_tolerance_is_accepted(server):
    response = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120, json={"items": [
        v1_item(NO_TRITON, options={"atol": 1e-3, "rtol": 0.0})]})
    assert response.status_code == 202, response.text


def _problem(index: int) -> dict:
    return {"source": problem_source("01_scaled_add") + f"\nVARIANT = {index}\n", "name": f"variant_{index}"}


def test_registered_problems_are_bounded_per_request_and_in_the_store(server):
    too_many = [_problem(1000 + i) for i in range(MAX_BATCH + 1)]
    response = httpx.post(server.url + "/v1/problems", headers=HEADERS, json={"problems": too_many}, timeout=120)
    assert response.status_code == 422 and f"at most {MAX_BATCH}" in response.text, response.text[:300]
    hashes = []
    for start in range(0, 3 * MAX_PROBLEMS, 3):
        response = httpx.post(server.url + "/v1/problems", headers=HEADERS, timeout=120,
                              json={"problems": [_problem(start + i) for i in range(3)]})
        assert response.status_code == 201, response.text[:300]
        hashes += [p["hash"] for p in response.json()["problems"]]
        time.sleep(0.01)  # distinct registration times
    listed = httpx.get(server.url + "/v1/problems", headers=HEADERS, params={"limit": 1000}, timeout=60).json()
    kept = {p["hash"] for p in listed["problems"]}
    assert len(kept) <= MAX_PROBLEMS, len(kept)
    assert set(hashes[-3:]) <= kept  # the newest registrations stay
    # A pruned problem is unknown (422 naming the hash), a kept one evaluates.
    gone = next(h for h in hashes if h not in kept)
    response = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120,
                          json={"items": [v1_item(NO_TRITON, {"hash": gone})]})
    assert response.status_code == 422 and "register the problem first" in response.text
    response = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120,
                          json={"items": [v1_item(NO_TRITON, {"hash": hashes[-1]})]})
    assert response.status_code == 202, response.text


@pytest.mark.parametrize("path", ["/docs", "/openapi.json", "/no-such-route"])
def test_docs_and_schema_need_the_token(server, path):
    assert httpx.get(server.url + path, timeout=30).status_code == 401
    assert httpx.get(server.url + path, headers={"Authorization": "Bearer wrong"}, timeout=30).status_code == 401
    # The scheme is case-insensitive (RFC 7235), as FastAPI's HTTPBearer took it.
    for scheme in ("Bearer", "bearer"):
        opened = httpx.get(server.url + path, headers={"Authorization": f"{scheme} {TOKEN}"}, timeout=30)
        assert opened.status_code == (404 if path == "/no-such-route" else 200), opened.text[:200]


def test_the_token_is_checked_before_the_body_is_read(server):
    anonymous = {"Content-Type": "application/json"}
    malformed = post_raw(server, "/v1/evaluations", "{not json", headers=anonymous)
    huge = httpx.post(server.url + "/v1/evaluations", content=b"x" * (9 << 20), headers=anonymous, timeout=120)
    assert (malformed.status_code, huge.status_code) == (401, 401), (malformed.text, huge.text[:200])
    # With the token, the same bodies get their own refusals.
    assert post_raw(server, "/v1/evaluations", "{not json").status_code == 400
    huge = httpx.post(server.url + "/v1/evaluations", content=b"x" * (9 << 20), headers=HEADERS, timeout=120)
    assert huge.status_code == 413


# -- 5: a cancelled job's event-log line; the request counter ------------------------------------
def _events(server) -> list[dict]:
    path = server.db.with_name(server.db.stem + ".events.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _wait_state(server, job_id: str, states: set[str], timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = httpx.get(f"{server.url}/v1/evaluations/{job_id}", headers=HEADERS, timeout=30).json()
        if job["state"] in states or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def test_a_cancelled_job_leaves_exactly_one_event_line(server):
    response = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120,
                          json={"items": [v1_item(SLOW, options={"timeout": 120}), v1_item(NO_TRITON)]})
    running, queued = (job["id"] for job in response.json()["jobs"])
    assert _wait_state(server, running, {"running"})["state"] == "running"
    for job_id in (queued, running):
        cancelled = httpx.delete(f"{server.url}/v1/evaluations/{job_id}", headers=HEADERS, timeout=30).json()
        assert cancelled["state"] == "cancelled", cancelled
    # Another job after them (one worker): by its end the pool has answered for the killed one.
    after = httpx.post(server.url + "/v1/evaluate", headers=HEADERS, timeout=300, json=v1_item(NO_TRITON)).json()
    assert after["state"] == "done"
    events = _events(server)
    for job_id in (running, queued):
        lines = [e for e in events if e["job"] == job_id]
        assert len(lines) == 1 and lines[0]["state"] == "cancelled", lines
    assert len([e for e in events if e["job"] == after["id"]]) == 1


def test_http_requests_are_counted_by_route_and_code(server):
    def count(text: str, route: str, code: str) -> float:
        for line in text.splitlines():
            if line.startswith("tritongym_http_requests_total{") and f'route="{route}"' in line \
                    and f'code="{code}"' in line:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    before = httpx.get(server.url + "/metrics", headers=HEADERS, timeout=30).text
    for _ in range(3):
        assert httpx.get(f"{server.url}/v1/evaluations/nope", headers=HEADERS, timeout=30).status_code == 404
    assert httpx.get(f"{server.url}/v1/evaluations/nope", timeout=30).status_code == 401
    after = httpx.get(server.url + "/metrics", headers=HEADERS, timeout=30).text
    assert count(after, "/v1/evaluations/{job_id}", "404") == count(before, "/v1/evaluations/{job_id}", "404") + 3
    assert count(after, "(other)", "401") >= count(before, "(other)", "401") + 1


# -- 6: the two APIs' idempotency keys -------------------------------------------------------------
def test_a_v1_key_never_answers_a_kernelgym_task(server):
    task = "shared-" + secrets.token_hex(4)
    refused = httpx.post(server.url + "/v1/evaluations", headers=HEADERS, timeout=120, json={"items": [
        v1_item(HONEST, idempotency_key=f"kernelgym:{task}")]})
    assert refused.status_code == 422 and "reserved" in refused.text, refused.text
    # The same task id as a plain /v1 key is another job in another namespace.
    v1 = httpx.post(server.url + "/v1/evaluate", headers=HEADERS, timeout=300,
                    json=v1_item(HONEST, idempotency_key=task, options={"num_trials": 1, "input_families": []}))
    assert v1.status_code == 200 and v1.json()["result"]["status"] == "ok", v1.text[:500]
    kg = httpx.post(server.url + "/evaluate", headers=HEADERS, timeout=300, json={
        "task_id": task, "reference_code": problem_source("01_scaled_add"), "kernel_code": NO_TRITON,
        "backend": "triton"}).json()
    assert kg["correctness"] is False and kg["decoy_kernel"] is True, kg
    assert kg["tritongym"]["status"] == "integrity_violation"
    status = httpx.get(f"{server.url}/results/{task}", headers=HEADERS, timeout=30).json()
    assert status["decoy_kernel"] is True
