"""The native /v1 API against a real server: submission, results, streaming, problems, refusals,
metrics, status page, event log, and the Python clients."""

from __future__ import annotations

import asyncio
import json
import re
import uuid

import pytest
from tests.service.conftest import EXAMPLES, NO_TRITON, SYNTAX_ERROR, problem_source

from tritongym.evaluator.result import Status, ViolationCode
from tritongym.service.client import AsyncClient, Client, JobFailed, ServiceHTTPError
from tritongym.tasks import Problem


def item(solution: str = NO_TRITON, **extra):
    return {"problem": {"builtin": "builtin/01_scaled_add"}, "solution": solution, **extra}


def test_submit_then_fetch_and_list(http):
    response = http.post("/v1/evaluations", json={"items": [item(), item(SYNTAX_ERROR)]})
    assert response.status_code == 202
    jobs = response.json()["jobs"]
    assert [j["index"] for j in jobs] == [0, 1] and all(j["created"] for j in jobs)
    ids = [j["id"] for j in jobs]
    lines = [json.loads(line) for line in http.get("/v1/evaluations/stream", params={"ids": ",".join(ids)}).text
             .splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(ids)
    by_id = {line["id"]: line for line in lines}
    assert by_id[ids[0]]["result"]["status"] == "integrity_violation"
    assert [v["code"] for v in by_id[ids[0]]["result"]["violations"]] == ["no_triton_kernel"]
    assert by_id[ids[1]]["result"]["status"] == "compile_error"
    one = http.get(f"/v1/evaluations/{ids[1]}").json()
    assert one["state"] == "done" and one["attempts"] == 1 and one["result"]["status"] == "compile_error"
    listed = http.get("/v1/evaluations", params={"ids": f"{ids[0]},nope"}).json()
    assert [j["id"] for j in listed["jobs"]] == [ids[0]] and listed["missing"] == ["nope"]


def test_server_sent_events(http):
    ids = [j["id"] for j in http.post("/v1/evaluations", json={"items": [item(), item()]}).json()["jobs"]]
    text = http.get("/v1/evaluations/stream", params=[("ids", ids[0]), ("ids", ids[1]), ("format", "sse")]).text
    events = re.findall(r"event: (\w+)\n(?:id: (\w+)\n)?data: (.*)\n\n", text)
    assert [e[0] for e in events] == ["result", "result", "end"]
    assert sorted(e[1] for e in events[:2]) == sorted(ids)
    assert all(json.loads(e[2])["state"] == "done" for e in events[:2])


def test_idempotency_key_returns_the_same_job_and_refuses_reuse(http):
    key = uuid.uuid4().hex
    first = http.post("/v1/evaluations", json={"items": [item(idempotency_key=key)]}).json()["jobs"][0]
    again = http.post("/v1/evaluations", json={"items": [item(idempotency_key=key)]}).json()["jobs"][0]
    assert again["id"] == first["id"] and first["created"] and not again["created"]
    other = http.post("/v1/evaluations", json={"items": [item(SYNTAX_ERROR, idempotency_key=key)]})
    assert other.status_code == 409 and key in other.json()["detail"]


def test_blocking_evaluate_and_cancel(http):
    done = http.post("/v1/evaluate", json=item(SYNTAX_ERROR))
    assert done.status_code == 200 and done.json()["result"]["status"] == "compile_error"
    cancelled = http.delete(f"/v1/evaluations/{done.json()['id']}")
    assert cancelled.json()["state"] == "done"  # a finished job stays as it is
    assert http.delete("/v1/evaluations/unknown").status_code == 404


def test_problems_register_once_then_by_hash(http):
    source = problem_source("02_leaky_relu")
    registered = http.post("/v1/problems", json={"problems": [{"source": source, "name": "leaky"}]})
    assert registered.status_code == 201
    content_hash = registered.json()["problems"][0]["hash"]
    assert content_hash == Problem.from_source(source).content_hash
    listed = http.get("/v1/problems", params={"hash": content_hash}).json()["problems"]
    assert [p["name"] for p in listed] == ["leaky"]
    job = http.post("/v1/evaluate", json={"problem": {"hash": content_hash}, "solution": NO_TRITON}).json()
    assert job["problem_hash"] == content_hash and job["result"]["status"] == "integrity_violation"


@pytest.mark.parametrize(("body", "status", "reason"), [
    (b'{"items": [', 400, "malformed JSON"),
    (json.dumps({"items": []}).encode(), 422, "at least 1"),
    (json.dumps({"items": [item(colour="red")]}).encode(), 422, "Extra inputs"),
    (json.dumps({"items": [{"problem": {"builtin": "builtin/nope"}, "solution": "x"}]}).encode(), 422,
     "unknown built-in problem"),
    (json.dumps({"items": [{"problem": {"hash": "0" * 32}, "solution": "x"}]}).encode(), 422,
     "unknown problem hash"),
    (json.dumps({"items": [{"problem": {"source": "import torch\nx = 1\n"}, "solution": "x"}]}).encode(), 422,
     "does not define Model, get_inputs, get_init_inputs"),
    (json.dumps({"items": [{"problem": {"source": "class Model(:\n"}, "solution": "x"}]}).encode(), 422,
     "not valid Python"),
    (json.dumps({"items": [{"problem": {"builtin": "builtin/01_scaled_add", "hash": "ab"}, "solution": "x"}]})
     .encode(), 422, "exactly one of"),
    (json.dumps({"items": [item(options={"sandbox": "none"})]}).encode(), 422, "Extra inputs"),
    (json.dumps({"items": [item(options={"timeout": 1e9})]}).encode(), 422, "exceeds this server's limit"),
    (json.dumps({"items": [item(options={"disabled_checks": ["no_such_check"]})]}).encode(), 422,
     "unknown disabled_checks"),
    (json.dumps({"items": [item("x" * (300 << 10))]}).encode(), 413, "solution is larger"),
    (b"{" + b" " * (9 << 20) + b"}", 413, "request body larger"),
])
def test_refusals_are_4xx_with_a_reason(http, body, status, reason):
    response = http.post("/v1/evaluations", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text[:500]
    assert reason in json.dumps(response.json()["detail"])


def test_one_line_solution_naming_a_file_is_source_not_a_path(http, tmp_path):
    # A str solution is source text everywhere; the service must never read the server's files for a client.
    secret = EXAMPLES / "01_scaled_add.py"
    job = http.post("/v1/evaluate", json=item(str(secret))).json()
    assert job["result"]["status"] == "compile_error"
    assert "not Python source" in job["result"]["error"] and "_scaled_add_kernel" not in job["result"]["error"]


def test_metrics_status_page_docs_and_event_log(http, server):
    http.post("/v1/evaluate", json=item())
    metrics = http.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    verdicts = re.search(r'tritongym_verdicts_total\{status="integrity_violation"\} (\d+)', text)
    assert verdicts and int(float(verdicts.group(1))) >= 1
    assert re.search(r'tritongym_violations_total\{code="no_triton_kernel"\} [1-9]', text)
    assert re.search(r'tritongym_phase_seconds_count\{phase="queue"\} [1-9]', text)
    assert "tritongym_queue_depth" in text and "tritongym_jobs_in_flight" in text
    assert re.search(r"tritongym_worker_restarts_total \d", text)
    assert re.search(r'tritongym_sandbox_info\{.*mode="(bwrap|none)"', text)
    page = http.get("/")
    assert page.status_code == 200 and "Last evaluations" in page.text and "integrity_violation" in page.text
    for html in (page.text, http.get("/docs").text):
        assert "<script" not in html and not re.search(r'(src|href)="https?://', html)
    assert "/v1/evaluations" in http.get("/docs").text
    assert http.get("/openapi.json").json()["paths"]["/evaluate"]["post"]
    events = [json.loads(line) for line in server.db.with_name("jobs.events.jsonl").read_text().splitlines()]
    assert events and {"job", "state", "result", "problem_hash"} <= set(events[-1])
    assert len({e["job"] for e in events}) == len(events)  # one line per finished job


def test_health_probes(http):
    assert http.get("/healthz").json()["status"] == "ok"
    ready = http.get("/readyz").json()
    assert ready["status"] == "ready" and ready["workers"] == 2 and ready["sandbox"] in ("bwrap", "none")


def test_client_evaluate_and_evaluate_many(server):
    with Client(server.url) as client:
        result = client.evaluate("builtin/01_scaled_add", SYNTAX_ERROR)
        assert result.status == Status.COMPILE_ERROR
        requests = [("builtin/01_scaled_add", NO_TRITON if i % 2 else SYNTAX_ERROR) for i in range(12)]
        seen = dict(client.evaluate_many(requests))
        assert sorted(seen) == list(range(12))
        for index, verdict in seen.items():
            assert verdict.status == (Status.INTEGRITY_VIOLATION if index % 2 else Status.COMPILE_ERROR)
        ids = client.submit([("builtin/01_scaled_add", NO_TRITON)])
        assert client.result(ids[0]).violations[0].code == ViolationCode.NO_TRITON_KERNEL
        with pytest.raises(ServiceHTTPError) as refused:
            client.evaluate("builtin/nope", NO_TRITON)
        assert refused.value.status_code == 422


def test_async_client(server):
    async def main():
        async with AsyncClient(server.url) as client:
            one = await client.evaluate("builtin/01_scaled_add", SYNTAX_ERROR)
            many = [pair async for pair in client.evaluate_many([("builtin/01_scaled_add", NO_TRITON)] * 4)]
            return one, many

    one, many = asyncio.run(main())
    assert one.status == Status.COMPILE_ERROR
    assert sorted(i for i, _ in many) == [0, 1, 2, 3]
    assert {r.status for _, r in many} == {Status.INTEGRITY_VIOLATION}


def test_a_failed_job_is_reported_not_lost(server):
    # A problem whose own reference raises is the evaluation's exception: the job ends `failed`
    # with the reason, and the client raises JobFailed.
    broken = ("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
              "        raise ValueError('boom')\n"
              "def get_inputs():\n    return [torch.ones(4)]\ndef get_init_inputs():\n    return []\n")
    honest = ("import torch\nimport triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, n):\n"
              "    pass\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        k[(1,)](x, 4)\n"
              "        return x\n")
    with Client(server.url) as client:
        with pytest.raises(JobFailed) as failed:
            client.evaluate({"source": broken}, honest, timeout=120)
        assert failed.value.state == "failed"
        assert "ProblemError" in failed.value.error and "the reference failed" in failed.value.error
        assert client.job(failed.value.job_id)["state"] == "failed"


@pytest.mark.slow
def test_real_triton_candidate_end_to_end(server):
    with Client(server.url) as client:
        result = client.evaluate("builtin/01_scaled_add", EXAMPLES / "01_scaled_add.py", num_trials=2,
                                 input_families=[])
    assert result.status == Status.OK, result.error
    assert result.correct and all(t.passed for t in result.trials)
    assert result.phase_seconds.get("trials", 0) > 0


def test_a_chunked_body_over_the_limit_is_413(http):
    # No Content-Length: the limit is enforced while the body streams in.
    def body():
        yield b'{"items": ['
        for _ in range(10):
            yield b" " * (1 << 20)
        yield b"]}"

    response = http.post("/v1/evaluations", content=body(), headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and "request body larger" in response.json()["detail"]


def test_the_streamed_job_is_the_schema_s_job_view():
    from tritongym.service.models import JobView, job_view_dict
    from tritongym.service.store import JobRecord, JobState

    record = JobRecord(seq=1, id="a", idempotency_key="k", fingerprint="f", client="c", api="native",
                       problem_hash="h", solution="s", options={}, state=JobState.DONE, attempts=2, submitted=1.0,
                       started=2.0, finished=3.0, result={"status": "ok"}, error=None, extra=None)
    assert job_view_dict(record) == JobView.of(record).model_dump()
