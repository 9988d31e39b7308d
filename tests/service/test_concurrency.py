"""200 concurrent submissions from many clients: every job completes once, none lost or doubled."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid

import httpx
from tests.service.conftest import NO_TRITON, SYNTAX_ERROR


def test_200_concurrent_submissions_from_many_clients(server):
    clients, per_client = 20, 10
    submitted: dict[str, list[str]] = {}
    keys: dict[str, str] = {}
    errors: list[str] = []

    def one_client(n: int) -> None:
        name = f"client-{n}"
        try:
            with httpx.Client(base_url=server.url, timeout=120, headers={"X-Client-Id": name}) as http:
                ids = []
                for i in range(per_client):
                    key = uuid.uuid4().hex
                    solution = (NO_TRITON if (n + i) % 2 else SYNTAX_ERROR) + f"# {name} {i}\n"
                    body = {"items": [{"problem": {"builtin": "builtin/01_scaled_add"}, "solution": solution,
                                       "idempotency_key": key}]}
                    response = http.post("/v1/evaluations", json=body)
                    assert response.status_code == 202, response.text
                    job = response.json()["jobs"][0]
                    # A retried submission (same key) must not make a second job.
                    if i % 5 == 0:
                        assert http.post("/v1/evaluations", json=body).json()["jobs"][0]["id"] == job["id"]
                    ids.append(job["id"])
                    keys[job["id"]] = key
                submitted[name] = ids
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{name}: {exc!r}")

    threads = [threading.Thread(target=one_client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    all_ids = [job_id for ids in submitted.values() for job_id in ids]
    assert len(all_ids) == clients * per_client == len(set(all_ids))

    with httpx.Client(base_url=server.url, timeout=300) as http:
        finished = {}
        for start in range(0, len(all_ids), 100):
            chunk = all_ids[start:start + 100]
            for line in http.get("/v1/evaluations/stream", params={"ids": ",".join(chunk)}).text.splitlines():
                job = json.loads(line)
                assert job["id"] not in finished
                finished[job["id"]] = job
    assert set(finished) == set(all_ids)
    assert all(job["state"] == "done" and job["attempts"] == 1 for job in finished.values())
    assert {job["result"]["status"] for job in finished.values()} == {"integrity_violation", "compile_error"}

    db = sqlite3.connect(server.db)
    rows = db.execute(f"SELECT id, state, idempotency_key FROM jobs WHERE id IN ({','.join('?' * len(all_ids))})",
                      all_ids).fetchall()
    db.close()
    assert len(rows) == len(all_ids)
    assert {r[0]: r[2] for r in rows} == keys
