"""kill -9 of the server in the middle of a batch, restart on the same database: every job
completes, with exactly one stored result (and one event-log line) each."""

from __future__ import annotations

import json
import sqlite3

import httpx
import pytest
from tests.service.conftest import NO_TRITON, SYNTAX_ERROR, Server


@pytest.mark.slow
def test_kill_9_mid_batch_then_restart_completes_every_job_once(tmp_path):
    db = tmp_path / "jobs.db"
    first = Server(db=db, workers=1).start()
    items = [{"problem": {"builtin": "builtin/01_scaled_add"},
              "solution": (NO_TRITON if i % 3 else SYNTAX_ERROR) + f"# job {i}\n",
              "idempotency_key": f"job-{i}"} for i in range(150)]
    try:
        response = httpx.post(first.url + "/v1/evaluations", json={"items": items}, timeout=120)
        assert response.status_code == 202
        ids = [job["id"] for job in response.json()["jobs"]]
        first.kill9()  # the 202 means: on disk; nothing may be lost from here on
    finally:
        first.stop()

    conn = sqlite3.connect(db)
    states = dict(conn.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall())
    conn.close()
    assert sum(states.values()) == 150
    assert states.get("queued", 0) + states.get("running", 0) > 0, f"the kill came too late to test much: {states}"

    second = Server(db=db, workers=2).start()
    try:
        # The same idempotency keys name the same jobs after the restart.
        again = httpx.post(second.url + "/v1/evaluations", json={"items": items[:5]}, timeout=120).json()["jobs"]
        assert [job["id"] for job in again] == ids[:5] and not any(job["created"] for job in again)
        text = httpx.get(second.url + "/v1/evaluations/stream", params={"ids": ",".join(ids)}, timeout=300).text
        finished = [json.loads(line) for line in text.splitlines()]
    finally:
        second.stop()
    assert sorted(job["id"] for job in finished) == sorted(ids)
    for index, job in enumerate(sorted(finished, key=lambda j: ids.index(j["id"]))):
        assert job["state"] == "done"
        assert job["result"]["status"] == ("integrity_violation" if index % 3 else "compile_error")
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT id, state, result IS NOT NULL FROM jobs").fetchall()
    conn.close()
    assert len(rows) == 150 and all(state == "done" and has for _, state, has in rows)
    events = [json.loads(line) for line in db.with_name("jobs.events.jsonl").read_text().splitlines()]
    assert sorted(e["job"] for e in events) == sorted(ids)  # one line per job across both processes
