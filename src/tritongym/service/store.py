"""The service's durable job store: one SQLite file in WAL mode, no other service to run.

Guarantees the service builds on:

* a job is committed with ``synchronous=FULL`` (the WAL fsynced: on disk, not just in the page
  cache) before its id is returned to the client; later state changes and results commit with
  ``NORMAL`` (they survive a killed process; after a power cut a job may run again);
* a job is answered once: `finish` only moves a job out of ``queued``/``running``, so a late or
  repeated answer (after a requeue) cannot replace a stored result;
* `requeue_unfinished` at start puts every ``running`` job back in the queue (the process that
  ran it is gone): evaluation is at-least-once, the stored result exactly-once per job id;
* an idempotency key names at most one job (a UNIQUE column), across restarts.

Every method takes the store's lock: one connection, shared by the app's threads.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any


class JobState(str, Enum):
    """Where a job is. ``done``: a verdict is stored; ``failed``: the evaluation raised (a broken
    problem, an evaluator fault), the reason is stored; ``cancelled``: a client cancelled it."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


FINAL_STATES = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS problems (
    hash TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    name TEXT NOT NULL,
    problem_id TEXT NOT NULL,
    level INTEGER,
    registered INTEGER NOT NULL DEFAULT 0,   -- 1: registered through /v1/problems
    created REAL NOT NULL                    -- stored, or last registered
);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    idempotency_key TEXT UNIQUE,
    fingerprint TEXT NOT NULL,
    client TEXT NOT NULL,
    api TEXT NOT NULL,
    problem_hash TEXT NOT NULL,
    solution TEXT NOT NULL,
    options TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    submitted REAL NOT NULL,
    started REAL,
    finished REAL,
    result TEXT,
    error TEXT,
    extra TEXT
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state, seq);
CREATE INDEX IF NOT EXISTS jobs_by_client ON jobs (client, state);
CREATE INDEX IF NOT EXISTS jobs_by_finish ON jobs (finished);
"""


@dataclass(frozen=True)
class NewJob:
    """A job to insert: everything needed to run it again after a restart."""

    id: str
    idempotency_key: str | None
    fingerprint: str
    client: str
    api: str
    problem_hash: str
    solution: str
    options: dict[str, Any]
    extra: dict[str, Any] | None = None


@dataclass(frozen=True)
class JobRecord:
    """A stored job as read back."""

    seq: int
    id: str
    idempotency_key: str | None
    fingerprint: str
    client: str
    api: str
    problem_hash: str
    solution: str
    options: dict[str, Any]
    state: JobState
    attempts: int
    submitted: float
    started: float | None
    finished: float | None
    result: dict[str, Any] | None
    error: str | None
    extra: dict[str, Any] | None

    @property
    def final(self) -> bool:
        return self.state in FINAL_STATES


@dataclass(frozen=True)
class StoredProblem:
    hash: str
    source: str
    name: str
    problem_id: str
    level: int | None
    registered: bool


class IdempotencyConflict(Exception):
    """An idempotency key was reused for a different request."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(f"idempotency key {key!r} already names job {job_id} with a different request; "
                         "use a new key for a new request")
        self.key = key
        self.job_id = job_id


_COLUMNS = ("seq, id, idempotency_key, fingerprint, client, api, problem_hash, solution, options, state, attempts, "
            "submitted, started, finished, result, error, extra")


def _record(row: Sequence[Any]) -> JobRecord:
    (seq, id_, key, fingerprint, client, api, problem_hash, solution, options, state, attempts, submitted, started,
     finished, result, error, extra) = row
    return JobRecord(seq=seq, id=id_, idempotency_key=key, fingerprint=fingerprint, client=client, api=api,
                     problem_hash=problem_hash, solution=solution, options=json.loads(options),
                     state=JobState(state), attempts=attempts, submitted=submitted, started=started,
                     finished=finished, result=json.loads(result) if result else None, error=error,
                     extra=json.loads(extra) if extra else None)


class JobStore:
    """Jobs and problems in one SQLite file (WAL, fsync on commit)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0)
        self._db.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a killed process (it is in the OS's page cache) but
        # not necessarily a power cut. That is enough for state changes and results (a lost one
        # means the job runs again: at-least-once). Accepting a job is different: `insert_jobs`
        # commits with FULL, an fsync of the WAL, before the client is told the job exists.
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        # Reads go through a second connection: in WAL mode they see the last commit without
        # waiting for a writer (a batch insert's fsync, a claim), and writers do not wait for them.
        self._read_lock = threading.Lock()
        self._reader = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0)

    def close(self) -> None:
        with self._lock, self._read_lock:
            self._reader.close()
            self._db.close()

    # -- problems --------------------------------------------------------------------------
    def put_problem(self, content_hash: str, source: str, name: str, problem_id: str, level: int | None,
                    registered: bool) -> bool:
        """Store a problem by content hash; returns True when it was new. Registering an already
        stored problem marks it registered and renews its registration time (`prune`)."""
        with self._lock:
            cursor = self._db.execute(
                "INSERT INTO problems (hash, source, name, problem_id, level, registered, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(hash) DO NOTHING",
                (content_hash, source, name, problem_id, level, int(registered), time.time()))
            if cursor.rowcount == 0 and registered:
                self._db.execute("UPDATE problems SET registered = 1, created = ? WHERE hash = ?",
                                 (time.time(), content_hash))
            return cursor.rowcount == 1

    def get_problem(self, content_hash: str) -> StoredProblem | None:
        with self._read_lock:
            row = self._reader.execute("SELECT hash, source, name, problem_id, level, registered FROM problems "
                                   "WHERE hash = ?", (content_hash,)).fetchone()
        return StoredProblem(*row[:5], registered=bool(row[5])) if row else None

    def list_problems(self, hashes: Iterable[str] | None = None, *, registered_only: bool = True,
                      limit: int = 1000, offset: int = 0) -> list[StoredProblem]:
        query = "SELECT hash, source, name, problem_id, level, registered FROM problems"
        clauses, params = [], []
        if registered_only:
            clauses.append("registered = 1")
        wanted = list(hashes) if hashes is not None else None
        if wanted is not None:
            clauses.append(f"hash IN ({','.join('?' * len(wanted))})" if wanted else "0")
            params.extend(wanted)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        query += " ORDER BY created, hash LIMIT ? OFFSET ?"
        with self._read_lock:
            rows = self._reader.execute(query, (*params, limit, offset)).fetchall()
        return [StoredProblem(*row[:5], registered=bool(row[5])) for row in rows]

    # -- jobs ------------------------------------------------------------------------------
    def insert_jobs(self, jobs: Sequence[NewJob]) -> list[tuple[JobRecord, bool]]:
        """Insert a batch in one transaction; a job whose idempotency key exists is not inserted
        and the existing one is returned instead (``created`` False). Raises `IdempotencyConflict`
        (and inserts nothing) when a key is reused for a different request."""
        now = time.time()
        out: list[tuple[JobRecord, bool]] = []
        with self._lock:
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for job in jobs:
                    if job.idempotency_key is not None:
                        row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE idempotency_key = ?",
                                               (job.idempotency_key,)).fetchone()
                        if row is not None:
                            existing = _record(row)
                            if existing.fingerprint != job.fingerprint:
                                raise IdempotencyConflict(job.idempotency_key, existing.id)
                            out.append((existing, False))
                            continue
                    self._db.execute(
                        "INSERT INTO jobs (id, idempotency_key, fingerprint, client, api, problem_hash, solution, "
                        "options, state, submitted, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (job.id, job.idempotency_key, job.fingerprint, job.client, job.api, job.problem_hash,
                         job.solution, json.dumps(job.options, sort_keys=True), JobState.QUEUED.value, now,
                         json.dumps(job.extra) if job.extra is not None else None))
                    row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job.id,)).fetchone()
                    out.append((_record(row), True))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._db.execute("PRAGMA synchronous=NORMAL")
        return out

    def get(self, job_id: str) -> JobRecord | None:
        with self._read_lock:
            row = self._reader.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _record(row) if row else None

    def get_by_key(self, key: str) -> JobRecord | None:
        with self._read_lock:
            row = self._reader.execute(f"SELECT {_COLUMNS} FROM jobs WHERE idempotency_key = ?", (key,)).fetchone()
        return _record(row) if row else None

    def get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        found: dict[str, JobRecord] = {}
        ids = list(dict.fromkeys(job_ids))
        with self._read_lock:
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                rows = self._reader.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id IN ({','.join('?' * len(chunk))})",
                                        chunk).fetchall()
                for row in rows:
                    record = _record(row)
                    found[record.id] = record
        return found

    def final_among(self, job_ids: Sequence[str]) -> list[JobRecord]:
        """The jobs of `job_ids` that have reached a final state (only those rows are read: a
        stream asks this for all its pending jobs each time one finishes)."""
        ids = list(dict.fromkeys(job_ids))
        final = tuple(s.value for s in FINAL_STATES)
        out: list[JobRecord] = []
        with self._read_lock:
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                rows = self._reader.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id IN ({','.join('?' * len(chunk))}) "
                                        "AND state IN (?, ?, ?)", (*chunk, *final)).fetchall()
                out.extend(map(_record, rows))
        return out

    def claim_queued(self, limit: int, exclude: set[str]) -> list[JobRecord]:
        """Mark up to `limit` queued jobs (oldest first) running and return them."""
        if limit <= 0:
            return []
        now = time.time()
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE state = ? ORDER BY seq LIMIT ?",
                                    (JobState.QUEUED.value, limit + len(exclude))).fetchall()
            records = [r for r in map(_record, rows) if r.id not in exclude][:limit]
            if not records:
                return []
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for record in records:
                    self._db.execute("UPDATE jobs SET state = ?, started = ?, attempts = attempts + 1 "
                                     "WHERE id = ? AND state = ?",
                                     (JobState.RUNNING.value, now, record.id, JobState.QUEUED.value))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return [replace(r, state=JobState.RUNNING, started=now, attempts=r.attempts + 1) for r in records]

    def unclaim(self, job_id: str) -> None:
        """Put a claimed job back in the queue (the pool did not take it)."""
        with self._lock:
            self._db.execute("UPDATE jobs SET state = ?, attempts = attempts - 1 WHERE id = ? AND state = ?",
                             (JobState.QUEUED.value, job_id, JobState.RUNNING.value))

    def finish(self, job_id: str, state: JobState, *, result: dict[str, Any] | None = None,
               error: str | None = None, finished: float | None = None) -> bool:
        """Store a job's outcome; False (and nothing written) when it already had one."""
        if state not in FINAL_STATES:
            raise ValueError(f"finish needs a final state, got {state}")
        text = json.dumps(result) if result is not None else None
        with self._lock:
            cursor = self._db.execute(
                "UPDATE jobs SET state = ?, finished = ?, result = ?, error = ? WHERE id = ? AND state IN (?, ?)",
                (state.value, finished or time.time(), text, error, job_id,
                 JobState.QUEUED.value, JobState.RUNNING.value))
            return cursor.rowcount == 1

    def delete(self, job_id: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def requeue_unfinished(self) -> int:
        """At start: jobs left ``running`` by a previous process go back to the queue."""
        with self._lock:
            cursor = self._db.execute("UPDATE jobs SET state = ?, started = NULL WHERE state = ?",
                                      (JobState.QUEUED.value, JobState.RUNNING.value))
            return cursor.rowcount

    def count_unfinished(self, client: str | None = None) -> int:
        query = "SELECT COUNT(*) FROM jobs WHERE state IN (?, ?)"
        params: list[Any] = [JobState.QUEUED.value, JobState.RUNNING.value]
        if client is not None:
            query += " AND client = ?"
            params.append(client)
        with self._read_lock:
            return int(self._reader.execute(query, params).fetchone()[0])

    def count_by_state(self) -> dict[str, int]:
        with self._read_lock:
            rows = self._reader.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        counts = {state.value: 0 for state in JobState}
        counts.update({state: int(n) for state, n in rows})
        return counts

    def recent_final(self, limit: int = 20) -> list[JobRecord]:
        with self._read_lock:
            rows = self._reader.execute(f"SELECT {_COLUMNS} FROM jobs WHERE finished IS NOT NULL "
                                    "ORDER BY finished DESC LIMIT ?", (limit,)).fetchall()
        return [_record(row) for row in rows]

    def finished_since(self, since: float) -> int:
        with self._read_lock:
            return int(self._reader.execute("SELECT COUNT(*) FROM jobs WHERE finished >= ?", (since,)).fetchone()[0])

    def prune_problems(self, *, max_age_s: float | None, max_problems: int | None) -> list[str]:
        """Delete registered problems that no job refers to and that were last registered more than
        `max_age_s` ago, or are beyond the newest `max_problems` registrations. Returns their hashes."""
        unused = "registered = 1 AND hash NOT IN (SELECT DISTINCT problem_hash FROM jobs)"
        doomed: list[str] = []
        with self._lock:
            if max_age_s is not None:
                doomed += [row[0] for row in self._db.execute(
                    f"SELECT hash FROM problems WHERE {unused} AND created < ?", (time.time() - max_age_s,))]
            if max_problems is not None:
                doomed += [row[0] for row in self._db.execute(
                    f"SELECT hash FROM problems WHERE {unused} AND hash NOT IN "
                    "(SELECT hash FROM problems WHERE registered = 1 ORDER BY created DESC LIMIT ?)", (max_problems,))]
            doomed = list(dict.fromkeys(doomed))
            if doomed:
                self._db.executemany("DELETE FROM problems WHERE hash = ?", [(h,) for h in doomed])
        return doomed

    def count_problems(self, registered_only: bool = True) -> int:
        with self._read_lock:
            query = "SELECT COUNT(*) FROM problems" + (" WHERE registered = 1" if registered_only else "")
            return int(self._reader.execute(query).fetchone()[0])

    def prune(self, *, max_age_s: float | None, max_finished: int | None) -> int:
        """Delete finished jobs older than `max_age_s` and beyond the newest `max_finished`, then
        the unregistered problems no job refers to. Returns the number of jobs deleted."""
        final = tuple(s.value for s in FINAL_STATES)
        deleted = 0
        with self._lock:
            if max_age_s is not None:
                deleted += self._db.execute(
                    "DELETE FROM jobs WHERE state IN (?, ?, ?) AND finished < ?",
                    (*final, time.time() - max_age_s)).rowcount
            if max_finished is not None:
                deleted += self._db.execute(
                    "DELETE FROM jobs WHERE state IN (?, ?, ?) AND seq NOT IN "
                    "(SELECT seq FROM jobs WHERE state IN (?, ?, ?) ORDER BY finished DESC LIMIT ?)",
                    (*final, *final, max_finished)).rowcount
            if deleted:
                self._db.execute("DELETE FROM problems WHERE registered = 0 AND hash NOT IN "
                                 "(SELECT DISTINCT problem_hash FROM jobs)")
        return deleted
