"""LocalPool and the batch API: order, async twins, cancellation, backpressure, recovery.

Real evaluations on the CPU (Triton interpreter) through real fork servers; candidates are the e2e
fixtures. A job must be answered exactly once, whatever happens to the worker that ran it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import uuid
from concurrent.futures import CancelledError
from pathlib import Path

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM, needs_forkserver

import tritongym
from tritongym import EvalOptions, ProblemError, Status
from tritongym.execution import EvalRequest, LocalPool, PoolClosed, QueueFull, evaluate_many

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

OPTIONS = EvalOptions(device="cpu", num_trials=2, input_families=(), timeout=60.0)
HONEST = FIXTURES / "relu_honest.py"
WRONG = FIXTURES / "relu_wrong.py"
ENDLESS = FIXTURES / "relu_endless_loop.py"
SPIN = FIXTURES / "relu_spin_until_killed.py"
BROKEN_PROBLEM = FIXTURES.parent / "problems" / "broken_reference.py"


@pytest.fixture(scope="module")
def pool():
    with LocalPool(2) as pool:
        yield pool


def request(solution, **overrides) -> EvalRequest:
    options = OPTIONS if not overrides else EvalOptions(**{**OPTIONS.__dict__, **overrides})
    return EvalRequest(RELU_PROBLEM, solution, options)


def test_evaluate_many_answers_in_input_order_with_the_same_verdicts_as_evaluate(pool):
    solutions = [HONEST, WRONG, FIXTURES / "relu_no_kernel.py", HONEST]
    results = evaluate_many([request(s) for s in solutions], pool=pool, progress=False)
    assert [r.status for r in results] == [Status.OK, Status.INCORRECT, Status.INTEGRITY_VIOLATION, Status.OK]
    alone = tritongym.evaluate(RELU_PROBLEM, WRONG, OPTIONS)
    assert alone.status == results[1].status and alone.reward == results[1].reward
    assert all(r.phase_seconds.get("queue", -1) >= 0 for r in results)
    assert pool.stats().launcher == "forkserver"


def test_warm_references_serve_a_group_of_candidates_for_one_problem(pool):
    before = pool.stats().extra["reference_hits"]
    evaluate_many([request(HONEST), request(HONEST)], pool=pool, progress=False)
    assert pool.stats().extra["reference_hits"] >= before + 1
    # New references are forks of a warm trusted server (not fresh interpreters), and alive.
    idle = [runner for _, runner in pool.references._idle.values()]
    assert idle and all(type(r.process).__name__ == "ForkedWorker" and r.process.alive() for r in idle)
    assert all(r.process.pid and r.process.pid > 0 for r in idle)


def test_aevaluate_many_yields_every_job_once_as_it_finishes(pool):
    async def collect():
        return [done async for done in tritongym.aevaluate_many([request(HONEST), request(WRONG)], pool=pool)]

    done = asyncio.run(collect())
    assert sorted(d.index for d in done) == [0, 1]
    by_index = {d.index: d.result.status for d in done}
    assert by_index == {0: Status.OK, 1: Status.INCORRECT}


def test_aevaluate_matches_evaluate(pool):
    result = asyncio.run(tritongym.aevaluate(RELU_PROBLEM, HONEST, OPTIONS, pool=pool))
    assert result.status == Status.OK


def test_a_broken_problem_is_the_jobs_exception_and_the_pool_goes_on(pool):
    future = pool.submit(EvalRequest(BROKEN_PROBLEM, HONEST, OPTIONS))
    with pytest.raises(ProblemError):
        future.result(timeout=300)
    results = evaluate_many([EvalRequest(BROKEN_PROBLEM, HONEST, OPTIONS), request(HONEST)], pool=pool,
                            progress=False, return_exceptions=True)
    assert isinstance(results[0], ProblemError) and results[1].status == Status.OK


def candidate_logs_with(marker: str) -> list[Path]:
    """The evaluator's private candidate logs (``<tmp>/tritongym-*/candidate.log``) carrying `marker`."""
    found = []
    for log in Path(tempfile.gettempdir()).glob("tritongym-*/candidate.log"):
        try:
            if marker in log.read_text(errors="replace"):
                found.append(log)
        except OSError:  # another evaluation's folder, removed meanwhile
            pass
    return found


def test_cancel_drops_a_queued_job_and_kills_a_running_one():
    # The candidate spins in its forward until killed (nothing the run-time policy refuses), and says so
    # on its log first: the cancel below hits a candidate that is provably running, and only a kill ends
    # it before its 120 s budget.
    marker = f"tritongym-cancel-{uuid.uuid4().hex}"
    spinner = SPIN.read_text().replace("MARKER_PLACEHOLDER", marker)
    with LocalPool(1) as pool:
        running = pool.submit(request(spinner, timeout=120.0))
        queued = pool.submit(request(HONEST))
        deadline = time.monotonic() + 120
        while not candidate_logs_with(f"spinning {marker}") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert candidate_logs_with(f"spinning {marker}"), "the candidate never reached its loop"
        assert pool.cancel(queued) is True
        # Still running at the moment of the cancel: its future is not done and the slot holds it.
        assert running.running() and not running.done()
        assert pool._slots[0].job is not None and pool._slots[0].job.future is running
        cancelled_at = time.monotonic()
        assert pool.cancel(running) is True
        with pytest.raises(CancelledError):
            running.result(timeout=60)
        assert time.monotonic() - cancelled_at < 30  # killed, not waited out (its budget is 120 s)
        assert pool.cancel(running) is False  # an answered job cannot be cancelled again
        with pytest.raises(CancelledError):
            queued.result(timeout=1)
        # The slot is free and its fork server reusable: the next job runs there and gets its verdict.
        assert pool._slots[0].job is None and pool.stats().busy == 0
        after = pool.submit(request(HONEST)).result(timeout=300)
        assert after.status == Status.OK
        stats = pool.stats()
        assert stats.cancelled == 2 and stats.completed == 1 and stats.failed == 0 and stats.restarts == 0


def test_backpressure_and_closing():
    pool = LocalPool(1, queue_size=1)
    try:
        first = pool.submit(request(HONEST))
        deadline = time.monotonic() + 120
        while pool.stats().busy == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        second = pool.submit(request(HONEST))
        with pytest.raises(QueueFull):
            pool.submit(request(HONEST), block=False)
        assert first.result(timeout=300).status == Status.OK
    finally:
        pool.close(cancel_queued=True)
    assert second.cancelled() or second.result().status == Status.OK
    with pytest.raises(PoolClosed):
        pool.submit(request(HONEST))


def test_a_fork_server_that_dies_is_replaced_and_its_job_answered_once():
    with LocalPool(1) as pool:
        assert pool.submit(request(HONEST)).result(timeout=300).status == Status.OK
        slot = pool._slots[0]
        (launcher,) = slot.launchers.values()
        # Between jobs: the next job finds the server dead and gets a new one.
        os.killpg(launcher.process.popen.pid, signal.SIGKILL)
        launcher.process.popen.wait(timeout=30)
        result = pool.submit(request(HONEST)).result(timeout=300)
        assert result.status == Status.OK
        # During a job: the server dies under a running candidate; the job runs again on a new one.
        future = pool.submit(request(FIXTURES / "relu_honest.py", timeout=120.0))
        deadline = time.monotonic() + 60
        while pool.stats().busy == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        (current,) = slot.launchers.values()
        os.killpg(current.process.popen.pid, signal.SIGKILL)
        result = future.result(timeout=300)
        assert result.status == Status.OK, (result.status, result.error)
        stats = pool.stats()
        assert stats.restarts == 2 and stats.completed == 3 and stats.failed == 0


def test_evaluate_many_keeps_its_own_pool_warm_across_calls():
    from tritongym.execution import close_shared_pools, shared_pool

    try:
        first = evaluate_many([request(HONEST)], workers=1, progress=False)
        pool = shared_pool("local", 1)
        second = evaluate_many([request(WRONG)], workers=1, progress=False)
        assert shared_pool("local", 1) is pool
        assert [first[0].status, second[0].status] == [Status.OK, Status.INCORRECT]
        assert pool.stats().completed == 2 and pool.stats().launcher == "forkserver"
    finally:
        close_shared_pools()
    assert shared_pool("local", 1) is not pool
    close_shared_pools()


def test_a_cancel_before_the_candidate_starts_is_honoured():
    with LocalPool(1) as pool:
        future = pool.submit(request(ENDLESS, timeout=120.0))
        started = time.monotonic()
        while pool.stats().busy == 0 and time.monotonic() - started < 60:
            time.sleep(0.001)
        assert pool.cancel(future) is True  # the slot is still preparing the job
        with pytest.raises(CancelledError):
            future.result(timeout=60)
        assert time.monotonic() - started < 45  # not run to its 120 s budget


def test_a_string_solution_is_source_text_never_a_path_to_read(pool):
    # A model's one-line reply that names a file on this machine must not make the evaluator read it.
    as_text = pool.submit(EvalRequest(RELU_PROBLEM, str(HONEST), OPTIONS)).result(timeout=300)
    assert as_text.status == Status.COMPILE_ERROR, (as_text.status, as_text.error)
    # The same verdict as tritongym.evaluate gives it: the text is not read, and the message says what to pass.
    assert "not Python source" in (as_text.error or "") and "pass pathlib.Path(" in (as_text.error or "")
    as_path = pool.submit(EvalRequest(RELU_PROBLEM, HONEST, OPTIONS)).result(timeout=300)
    assert as_path.status == Status.OK


def test_slots_spread_over_the_visible_gpus():
    from tritongym.execution.pool import slot_device

    assert [slot_device("cuda", i, 4) for i in range(5)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0"]
    assert slot_device("cuda", 3, 1) == "cuda"
    assert slot_device("cuda:2", 0, 4) == "cuda:2"  # an explicit device is kept
    assert slot_device("cpu", 1, 4) == "cpu"


def test_an_env_evaluator_on_a_given_pool_evaluates_there_and_leaves_it_open(pool):
    # The env's PoolEvaluator over an existing pool (what the verl agent loop shares per process):
    # the same verdicts, sync and async, on that pool's slots; closing the evaluator keeps the pool.
    from tritongym.env import PoolEvaluator

    evaluator = PoolEvaluator(OPTIONS, pool=pool)
    served = pool.stats().completed
    honest, wrong = HONEST.read_text(), WRONG.read_text()
    assert [r.status for r in evaluator.evaluate_many([(RELU_PROBLEM, honest), (RELU_PROBLEM, wrong)])] \
        == [Status.OK, Status.INCORRECT]
    assert asyncio.run(evaluator.aevaluate(RELU_PROBLEM, honest)).status == Status.OK
    assert pool.stats().completed == served + 3
    assert evaluator.describe()["backend"] == "LocalPool" and evaluator.describe()["max_workers"] == 2
    evaluator.close()
    assert evaluator.evaluate(RELU_PROBLEM, wrong).status == Status.INCORRECT  # the pool is still open
    with pytest.raises(ValueError, match="either a pool or an evaluate_fn"):
        PoolEvaluator(OPTIONS, pool=pool, evaluate_fn=lambda *_: None)
