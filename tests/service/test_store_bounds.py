"""The job store's queries at their bounds, each asserted by value on a real SQLite file.

Claims (oldest first, `limit`, `exclude`), unclaims, answers only from queued/running, requeue,
counts per state and client, chunked reads past 500 ids, recent and since-queries, pruning by age
and count (and the problems no job needs any more), problem registration, listing, counting and
pruning by age and count, and a batch
whose idempotency key conflicts inserting nothing.
"""

from __future__ import annotations

import time

import pytest

from tritongym.service.store import FINAL_STATES, IdempotencyConflict, JobRecord, JobState, JobStore, NewJob


def job(n: int, key: str | None = None, fingerprint: str = "f", client: str = "c", problem: str = "h",
        extra: dict | None = None) -> NewJob:
    return NewJob(id=f"job-{n}", idempotency_key=key, fingerprint=fingerprint, client=client, api="native",
                  problem_hash=problem, solution=f"s{n}", options={"num_trials": n, "b": [1, 2]}, extra=extra)


@pytest.fixture
def store(tmp_path):
    store = JobStore(tmp_path / "sub" / "jobs.db")  # the folder is created
    yield store
    store.close()


def test_an_inserted_job_reads_back_field_by_field(store):
    before = time.time()
    ((record, created),) = store.insert_jobs([job(3, key="k", extra={"x": 1})])
    assert created
    assert record == store.get("job-3")
    assert isinstance(record, JobRecord) and record.seq == 1
    assert (record.id, record.idempotency_key, record.fingerprint, record.client, record.api, record.problem_hash,
            record.solution, record.options, record.state, record.attempts, record.started, record.finished,
            record.result, record.error, record.extra) == \
        ("job-3", "k", "f", "c", "native", "h", "s3", {"num_trials": 3, "b": [1, 2]}, JobState.QUEUED, 0, None,
         None, None, None, {"x": 1})
    assert before <= record.submitted <= time.time()
    assert not record.final and str(JobState.QUEUED) == "queued"
    assert store.get("job-404") is None and store.get_by_key("nope") is None
    assert store.insert_jobs([job(4)])[0][0].extra is None


def test_a_reused_key_returns_the_existing_job_and_a_conflict_inserts_nothing(store):
    store.insert_jobs([job(1, key="k")])
    ((again, created),) = store.insert_jobs([job(2, key="k")])  # same fingerprint: the existing job
    assert not created and again.id == "job-1" and store.get("job-2") is None
    with pytest.raises(IdempotencyConflict, match="idempotency key 'k' already names job job-1") as caught:
        store.insert_jobs([job(5), job(6, key="k", fingerprint="other")])
    assert (caught.value.key, caught.value.job_id) == ("k", "job-1")
    assert store.get("job-5") is None  # the whole batch was rolled back
    store.insert_jobs([job(7)])  # and the store still takes jobs
    assert store.get("job-7").state == JobState.QUEUED


def test_claims_take_the_oldest_up_to_the_limit_past_the_excluded(store):
    store.insert_jobs([job(n) for n in range(1, 6)])
    assert store.claim_queued(0, set()) == [] and store.claim_queued(-1, set()) == []
    before = time.time()
    claimed = store.claim_queued(2, {"job-1"})
    assert [r.id for r in claimed] == ["job-2", "job-3"]
    for record in claimed:
        stored = store.get(record.id)
        assert record == stored
        assert stored.state == JobState.RUNNING and stored.attempts == 1 and before <= stored.started <= time.time()
    # The excluded job stays queued and is the next one once no longer excluded.
    assert [r.id for r in store.claim_queued(1, set())] == ["job-1"]
    assert [r.id for r in store.claim_queued(5, {"job-4"})] == ["job-5"]
    assert store.claim_queued(5, {"job-4"}) == []
    store.unclaim("job-5")
    assert store.get("job-5").state == JobState.QUEUED and store.get("job-5").attempts == 0
    store.unclaim("job-4")  # not running: nothing changes
    assert store.get("job-4").attempts == 0
    assert [(r.id, r.attempts) for r in store.claim_queued(5, set())] == [("job-4", 1), ("job-5", 1)]


def test_finish_needs_a_final_state_and_answers_once(store):
    store.insert_jobs([job(1), job(2)])
    with pytest.raises(ValueError, match="finish needs a final state, got running"):
        store.finish("job-1", JobState.RUNNING)
    with pytest.raises(ValueError, match="got queued"):
        store.finish("job-1", JobState.QUEUED)
    assert store.finish("job-1", JobState.DONE, result={"status": "ok"}, finished=123.0)  # from queued
    record = store.get("job-1")
    assert (record.state, record.result, record.error, record.finished, record.final) == \
        (JobState.DONE, {"status": "ok"}, None, 123.0, True)
    assert not store.finish("job-1", JobState.CANCELLED)
    before = time.time()
    assert store.finish("job-2", JobState.FAILED, error="ProblemError: x")
    failed = store.get("job-2")
    assert failed.error == "ProblemError: x" and failed.result is None and failed.finished >= before
    assert not store.finish("job-404", JobState.DONE)
    assert set(FINAL_STATES) == {JobState.DONE, JobState.FAILED, JobState.CANCELLED}


def test_requeue_and_the_counts(store):
    store.insert_jobs([job(1, client="a"), job(2, client="a"), job(3, client="b"), job(4, client="b")])
    store.claim_queued(3, set())
    store.finish("job-3", JobState.DONE, result={})
    assert store.count_by_state() == {"queued": 1, "running": 2, "done": 1, "failed": 0, "cancelled": 0}
    assert (store.count_unfinished(), store.count_unfinished("a"), store.count_unfinished("b"),
            store.count_unfinished("z")) == (3, 2, 1, 0)
    assert store.requeue_unfinished() == 2
    assert store.requeue_unfinished() == 0
    requeued = store.get("job-1")
    assert requeued.state == JobState.QUEUED and requeued.started is None and requeued.attempts == 1
    assert store.get("job-3").state == JobState.DONE
    assert store.count_by_state() == {"queued": 3, "running": 0, "done": 1, "failed": 0, "cancelled": 0}
    store.delete("job-4")
    assert store.get("job-4") is None and store.count_unfinished("b") == 0


def test_reads_by_many_ids_go_past_a_chunk_of_500(store):
    store.insert_jobs([job(n) for n in range(1203)])
    wanted = [f"job-{n}" for n in range(0, 1203, 1)] + ["job-0", "job-missing"]
    found = store.get_many(wanted)
    assert len(found) == 1203 and found["job-1202"].solution == "s1202" and "job-missing" not in found
    assert store.get_many([]) == {}
    for n in (0, 499, 500, 501, 1000, 1202):
        store.finish(f"job-{n}", JobState.CANCELLED)
    final = store.final_among(wanted)
    assert sorted(r.id for r in final) == sorted(f"job-{n}" for n in (0, 499, 500, 501, 1000, 1202))
    assert store.final_among(["job-1", "job-0"])[0].id == "job-0"
    assert store.final_among([]) == []


def test_recent_and_finished_since(store):
    store.insert_jobs([job(n) for n in range(4)])
    for n, at in ((0, 100.0), (1, 300.0), (2, 200.0)):
        store.finish(f"job-{n}", JobState.DONE, result={}, finished=at)
    assert [r.id for r in store.recent_final()] == ["job-1", "job-2", "job-0"]
    assert [r.id for r in store.recent_final(2)] == ["job-1", "job-2"]
    assert (store.finished_since(200.0), store.finished_since(200.5), store.finished_since(0),
            store.finished_since(301)) == (2, 1, 3, 0)


def test_pruning_by_age_keeps_unfinished_and_recent_jobs(store):
    store.put_problem("old", "src", "n", "p", None, registered=False)
    store.put_problem("kept", "src", "n", "p", 1, registered=True)
    store.insert_jobs([job(1, problem="old"), job(2, problem="kept"), job(3, problem="h"), job(4, problem="h")])
    now = time.time()
    store.finish("job-1", JobState.DONE, result={}, finished=now - 1000)
    store.finish("job-2", JobState.FAILED, error="e", finished=now - 1000)
    store.finish("job-3", JobState.DONE, result={}, finished=now - 10)
    assert store.prune(max_age_s=None, max_finished=None) == 0
    assert store.prune(max_age_s=100, max_finished=None) == 2
    assert store.get("job-1") is None and store.get("job-2") is None
    assert store.get("job-3") is not None and store.get("job-4") is not None  # recent, and unfinished
    # The unregistered problem no job needs is gone; a registered one stays.
    assert store.get_problem("old") is None and store.get_problem("kept") is not None


def test_pruning_by_count_keeps_the_newest_finished(store):
    store.put_problem("lonely", "src", "n", "p", None, registered=False)
    store.insert_jobs([job(n) for n in range(5)])
    for n, at in ((0, 10.0), (1, 40.0), (2, 30.0), (3, 20.0)):
        store.finish(f"job-{n}", JobState.DONE, result={}, finished=at)
    assert store.prune(max_age_s=None, max_finished=2) == 2
    assert sorted(store.get_many([f"job-{n}" for n in range(5)])) == ["job-1", "job-2", "job-4"]
    assert store.get_problem("lonely") is None
    store.put_problem("lonely2", "src", "n", "p", None, registered=False)
    assert store.prune(max_age_s=None, max_finished=2) == 0
    assert store.get_problem("lonely2") is not None  # nothing was deleted: problems are not swept


def test_problems_register_list_and_page(store):
    assert store.put_problem("b", "src-b", "nb", "pb", 2, registered=False) is True
    assert store.put_problem("b", "other", "x", "y", 3, registered=False) is False
    assert store.get_problem("b").registered is False and store.get_problem("b").source == "src-b"
    assert store.list_problems() == []
    assert store.put_problem("b", "other", "x", "y", 3, registered=True) is False  # registering marks it
    problem = store.get_problem("b")
    assert (problem.hash, problem.source, problem.name, problem.problem_id, problem.level, problem.registered) == \
        ("b", "src-b", "nb", "pb", 2, True)
    time.sleep(0.002)  # distinct creation times order the listing
    store.put_problem("a", "src-a", "na", "pa", None, registered=True)
    store.put_problem("c", "src-c", "nc", "pc", None, registered=False)
    assert [p.hash for p in store.list_problems()] == ["b", "a"]
    assert [p.hash for p in store.list_problems(registered_only=False)] == ["b", "a", "c"]
    assert [p.hash for p in store.list_problems(["c", "a"], registered_only=False)] == ["a", "c"]
    assert [p.hash for p in store.list_problems(["c", "a"])] == ["a"]
    assert store.list_problems([]) == [] and store.list_problems([], registered_only=False) == []
    assert [p.hash for p in store.list_problems(registered_only=False, limit=1, offset=1)] == ["a"]
    assert [p.hash for p in store.list_problems(registered_only=False, limit=2)] == ["b", "a"]
    assert store.get_problem("zzz") is None


def test_a_store_reopened_sees_what_was_written(tmp_path):
    first = JobStore(tmp_path / "jobs.db")
    first.insert_jobs([job(1, key="k")])
    first.claim_queued(1, set())
    first.close()
    again = JobStore(tmp_path / "jobs.db")
    try:
        assert again.requeue_unfinished() == 1
        assert again.get_by_key("k").state == JobState.QUEUED
    finally:
        again.close()


def test_the_conflict_message_says_what_to_do():
    error = IdempotencyConflict("k", "job-1")
    assert str(error) == ("idempotency key 'k' already names job job-1 with a different request; use a new key for "
                          "a new request")


def test_default_page_sizes(store):
    for n in range(1001):
        store.put_problem(f"p{n:04d}", "s", "n", "p", None, registered=True)
    listed = store.list_problems()
    assert len(listed) == 1000 and all(p.registered is True for p in listed)
    store.put_problem("unregistered", "s", "n", "p", None, registered=False)
    (unregistered,) = store.list_problems(["unregistered"], registered_only=False)
    assert unregistered.registered is False
    store.insert_jobs([job(n) for n in range(21)])
    for n in range(21):
        store.finish(f"job-{n}", JobState.DONE, result={}, finished=1000.0 + n)
    recent = store.recent_final()
    assert len(recent) == 20 and recent[0].id == "job-20" and recent[-1].id == "job-1"


def test_pruning_by_age_and_count_together_counts_both(store):
    store.insert_jobs([job(n) for n in range(4)])
    now = time.time()
    for n, age in ((0, 5000), (1, 4000), (2, 30), (3, 20)):
        store.finish(f"job-{n}", JobState.DONE, result={}, finished=now - age)
    # Two are too old; of the two left, the older is beyond the newest one.
    assert store.prune(max_age_s=1000, max_finished=1) == 3
    assert sorted(store.get_many([f"job-{n}" for n in range(4)])) == ["job-3"]


def test_a_batch_goes_on_after_a_job_whose_key_exists(store):
    store.insert_jobs([job(1, key="k")])
    results = store.insert_jobs([job(2, key="k"), job(3), job(4, key="k4")])
    assert [(r.id, created) for r, created in results] == [("job-1", False), ("job-3", True), ("job-4", True)]
    assert store.get("job-3") is not None and store.get_by_key("k4").id == "job-4"


def test_options_are_stored_in_canonical_key_order(store):
    new = NewJob(id="j", idempotency_key=None, fingerprint="f", client="c", api="native", problem_hash="h",
                 solution="s", options={"zeta": 1, "alpha": {"y": 2, "x": 1}})
    ((record, _),) = store.insert_jobs([new])
    assert list(record.options) == ["alpha", "zeta"] and list(record.options["alpha"]) == ["x", "y"]


def test_the_store_is_shared_by_threads_and_creates_its_folders(tmp_path):
    import threading

    store = JobStore(tmp_path / "a" / "b" / "jobs.db")
    try:
        store.insert_jobs([job(1)])
        seen: list[object] = []

        def other_thread() -> None:
            try:
                store.insert_jobs([job(2)])
                seen.append(store.get("job-1").id)
                seen.append(store.claim_queued(5, set())[0].id)
            except Exception as exc:  # noqa: BLE001 - reported below
                seen.append(exc)

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join(timeout=30)
        assert seen == ["job-1", "job-1"]
    finally:
        store.close()


def register(store: JobStore, *hashes: str) -> None:
    """Register `hashes` in this order (each a later registration time than the one before)."""
    for content_hash in hashes:
        store.put_problem(content_hash, f"src-{content_hash}", "n", "p", None, registered=True)


def test_problem_counts_registered_only_or_all(store):
    assert (store.count_problems(), store.count_problems(registered_only=False)) == (0, 0)
    register(store, "r1", "r2")
    store.put_problem("u1", "src", "n", "p", None, registered=False)
    assert store.count_problems() == 2
    assert store.count_problems(registered_only=True) == 2
    assert store.count_problems(registered_only=False) == 3


def test_pruning_problems_by_count_keeps_the_newest_registrations_and_those_jobs_use(store):
    register(store, "used", "p2", "p3", "p4")
    store.put_problem("unregistered", "src", "n", "p", None, registered=False)
    store.insert_jobs([job(1, problem="used")])
    assert store.prune_problems(max_age_s=None, max_problems=None) == []
    assert store.count_problems() == 4
    # The newest three are p4, p3, p2: nothing unused lies beyond them ("used", the oldest, has a job).
    assert store.prune_problems(max_age_s=None, max_problems=3) == []
    assert store.prune_problems(max_age_s=None, max_problems=2) == ["p2"]
    assert store.get_problem("p2") is None and store.get_problem("used") is not None
    assert store.count_problems() == 3
    # The bound counts registrations jobs use too: of the newest one (p4) only "used" survives besides.
    assert store.prune_problems(max_age_s=None, max_problems=1) == ["p3"]
    assert sorted(p.hash for p in store.list_problems()) == ["p4", "used"]
    assert store.prune_problems(max_age_s=None, max_problems=0) == ["p4"]
    assert [p.hash for p in store.list_problems()] == ["used"]
    # Unregistered problems are `prune`'s (when no job needs them), never this bound's.
    assert store.get_problem("unregistered") is not None
    assert store.count_problems(registered_only=False) == 2


def test_registering_again_renews_a_problem_against_the_count_bound(store):
    register(store, "a", "b", "c")
    register(store, "a")  # now the newest registration
    assert store.prune_problems(max_age_s=None, max_problems=1) in (["b", "c"], ["c", "b"])
    assert [p.hash for p in store.list_problems()] == ["a"]


def test_pruning_problems_by_age(store):
    register(store, "p1", "p2")
    store.insert_jobs([job(1, problem="p1")])
    assert store.prune_problems(max_age_s=3600, max_problems=None) == []  # all registered just now
    assert store.count_problems() == 2
    assert store.prune_problems(max_age_s=0, max_problems=None) == ["p2"]  # older than now, and unused
    assert [p.hash for p in store.list_problems()] == ["p1"]


def test_pruning_problems_by_age_and_count_names_each_once(store):
    register(store, "p1", "p2", "p3")
    # The age dooms all three, the count p1 and p2 as well: each hash is deleted and returned once.
    doomed = store.prune_problems(max_age_s=0, max_problems=1)
    assert sorted(doomed) == ["p1", "p2", "p3"] and len(doomed) == 3
    assert store.count_problems(registered_only=False) == 0
    register(store, "q1", "q2")
    doomed = store.prune_problems(max_age_s=0, max_problems=0)
    assert sorted(doomed) == ["q1", "q2"] and len(doomed) == 2
