"""`JobStore`'s two connections' lock wait and `claim_queued`'s rollback, observed without waiting for a lock or
failing a disk: SQLite reports a connection's busy timeout (``PRAGMA busy_timeout``), and a trigger on the real
file makes the claim's `UPDATE` fail inside its transaction, as a full disk or an I/O error would."""

from __future__ import annotations

import sqlite3

import pytest

from tritongym.service.store import JobState, JobStore, NewJob

IDS = ["job-1", "job-2", "job-3"]


def job(n: int) -> NewJob:
    return NewJob(id=f"job-{n}", idempotency_key=None, fingerprint="f", client="c", api="native",
                  problem_hash="h", solution=f"s{n}", options={})


def test_both_connections_wait_30_s_for_a_lock_before_failing(tmp_path):
    # A writer (a batch insert's fsync, a claim, another process's prune) may hold the file's lock for a while:
    # the service's connections wait up to 30 s for it, not SQLite's default 5 s, before "database is locked".
    store = JobStore(tmp_path / "jobs.db")
    try:
        assert store._db.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        assert store._reader.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
    finally:
        store.close()


def test_a_claim_whose_update_fails_is_rolled_back_whole_and_the_store_stays_usable(tmp_path):
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    try:
        store.insert_jobs([job(1), job(2), job(3)])
        # The second job's UPDATE fails (the first one's has run): SQLite aborts that statement only and
        # leaves the transaction open, so the claim must roll the first job's change back itself.
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("CREATE TRIGGER fail_claim BEFORE UPDATE ON jobs WHEN OLD.id = 'job-2' "
                      "BEGIN SELECT RAISE(ABORT, 'disk I/O error (simulated)'); END")
        with pytest.raises(sqlite3.IntegrityError, match=r"disk I/O error \(simulated\)"):  # the UPDATE's error
            store.claim_queued(2, set())
        assert not store._db.in_transaction
        # Nothing of the failed claim is kept: every job is still queued and never counted as run.
        records = store.get_many(IDS)
        assert [(records[i].state, records[i].attempts, records[i].started) for i in IDS] == \
            [(JobState.QUEUED, 0, None)] * 3
        # The file is not left locked by an open transaction: another connection writes at once.
        other.execute("PRAGMA busy_timeout = 0")
        other.execute("DROP TRIGGER fail_claim")
        other.close()
        # And the store's own next claim works (an open transaction would refuse its BEGIN).
        assert [r.id for r in store.claim_queued(2, set())] == ["job-1", "job-2"]
        records = store.get_many(IDS)
        assert [records[i].state for i in IDS] == [JobState.RUNNING, JobState.RUNNING, JobState.QUEUED]
    finally:
        store.close()
