"""The SQLite job store on a real file: one result per job, requeue at start, idempotency across
reopenings, pruning by age and count."""

from __future__ import annotations

import sqlite3
import time

import pytest

from tritongym.service.store import IdempotencyConflict, JobState, JobStore, NewJob


def job(n: int, key: str | None = None, fingerprint: str = "f", client: str = "c") -> NewJob:
    return NewJob(id=f"job-{n}", idempotency_key=key, fingerprint=fingerprint, client=client, api="native",
                  problem_hash="h", solution=f"s{n}", options={"num_trials": 2})


def test_wal_mode_and_jobs_survive_reopening(tmp_path):
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.put_problem("h", "source", "name", "pid", None, registered=True)
    store.insert_jobs([job(1, "k1"), job(2)])
    store.close()
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    again = JobStore(path)
    assert again.get("job-1").state == JobState.QUEUED and again.get("job-1").options == {"num_trials": 2}
    assert again.get_by_key("k1").id == "job-1"
    assert again.get_problem("h").registered


def test_a_job_is_answered_once(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    store.insert_jobs([job(1)])
    assert [r.id for r in store.claim_queued(5, set())] == ["job-1"]
    assert store.get("job-1").state == JobState.RUNNING and store.get("job-1").attempts == 1
    assert store.finish("job-1", JobState.DONE, result={"status": "ok"})
    assert not store.finish("job-1", JobState.FAILED, error="late duplicate")
    assert not store.finish("job-1", JobState.CANCELLED)
    record = store.get("job-1")
    assert record.state == JobState.DONE and record.result == {"status": "ok"} and record.error is None
    with pytest.raises(ValueError):
        store.finish("job-1", JobState.RUNNING)


def test_running_jobs_are_requeued_at_start(tmp_path):
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    store.insert_jobs([job(1), job(2), job(3)])
    store.claim_queued(2, set())
    store.finish("job-1", JobState.DONE, result={"status": "ok"})
    store.close()  # as if the process died with job-2 running
    store = JobStore(path)
    assert store.requeue_unfinished() == 1
    assert {s: n for s, n in store.count_by_state().items() if n} == {"queued": 2, "done": 1}
    claimed = store.claim_queued(5, set())
    assert [r.id for r in claimed] == ["job-2", "job-3"]  # oldest first
    assert store.get("job-2").attempts == 2  # ran twice: at-least-once, visible


def test_idempotency_keys(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    [(first, created)] = store.insert_jobs([job(1, "key")])
    [(again, created_again)] = store.insert_jobs([job(2, "key")])
    assert created and not created_again and again.id == first.id
    with pytest.raises(IdempotencyConflict, match="different request"):
        store.insert_jobs([job(3), job(4, "key", fingerprint="other")])
    assert store.get("job-3") is None  # the whole batch was rolled back


def test_claim_skips_excluded_and_unclaim_restores(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    store.insert_jobs([job(n) for n in range(4)])
    assert [r.id for r in store.claim_queued(2, {"job-0"})] == ["job-1", "job-2"]
    store.unclaim("job-1")
    assert store.get("job-1").state == JobState.QUEUED and store.get("job-1").attempts == 0
    assert store.count_unfinished("c") == 4 and store.count_unfinished("other") == 0


def test_pruning_by_age_and_count(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    store.put_problem("h", "src", "n", "p", None, registered=False)
    store.put_problem("kept", "src2", "n2", "p2", None, registered=True)
    store.insert_jobs([job(n) for n in range(6)])
    for n in range(5):
        store.finish(f"job-{n}", JobState.DONE, result={"n": n})
        time.sleep(0.01)
    # Age first: nothing is old enough.
    assert store.prune(max_age_s=3600, max_finished=None) == 0
    # Count: keep the newest 2 finished (job-3, job-4); the unfinished job-5 is never pruned.
    assert store.prune(max_age_s=None, max_finished=2) == 3
    assert sorted(r.id for r in store.get_many([f"job-{n}" for n in range(6)]).values()) == ["job-3", "job-4",
                                                                                             "job-5"]
    time.sleep(0.05)
    assert store.prune(max_age_s=0.01, max_finished=None) == 2
    assert store.get("job-5").state == JobState.QUEUED
    assert store.get_problem("h") is not None  # still referenced by job-5
    store.finish("job-5", JobState.DONE, result={})
    time.sleep(0.05)
    store.prune(max_age_s=0.01, max_finished=None)
    assert store.get_problem("h") is None and store.get_problem("kept") is not None
