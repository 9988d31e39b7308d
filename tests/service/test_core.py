"""`EvaluationService` in process, over a real pool and a real SQLite file: per-client limits,
cancelling queued and running jobs, and a slot that keeps working afterwards."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.service.conftest import EXAMPLES, NO_TRITON

from tritongym.service.config import ServiceConfig
from tritongym.service.core import EvaluationService, JobSpec, ServiceError
from tritongym.service.store import JobState


@pytest.mark.slow
def test_limits_and_cancelling_queued_and_running_jobs(tmp_path):
    config = ServiceConfig(db_path=tmp_path / "jobs.db", workers=1, device="cpu", max_in_flight_per_client=3,
                           dispatch_depth=1)
    service = EvaluationService(config)
    service.start()
    try:
        problem = service.problem_by_builtin("builtin/01_scaled_add")
        # 2,000 correctness trials: minutes in Triton's interpreter (50 took 6 s here by 2026-11-25, which
        # let the job finish before the cancel below); it is cancelled long before.
        slow = JobSpec(problem.content_hash, (EXAMPLES / "01_scaled_add.py").read_text(), {"num_trials": 2000})
        cheap = JobSpec(problem.content_hash, NO_TRITON, {})
        [(running, _), (queued, _), (last, _)] = service.submit([slow, cheap, cheap], client="alice")
        with pytest.raises(ServiceError) as refused:
            service.submit([cheap], client="alice")
        assert refused.value.status_code == 429 and "limit is 3" in refused.value.message
        service.submit([cheap], client="bob")  # the limit is per client

        assert service.cancel(queued.id).state == JobState.CANCELLED
        deadline = time.monotonic() + 60
        while service.get(running.id).state != JobState.RUNNING or service.pool.stats().busy == 0:
            assert time.monotonic() < deadline, "the slow job never started"
            time.sleep(0.05)
        # Let the candidate process start: the pool kills a running candidate at once, but a cancel
        # that arrives while the slot is still preparing the reference is only honoured later.
        time.sleep(10)
        cancelled_at = time.monotonic()
        assert service.cancel(running.id).state == JobState.CANCELLED
        final = asyncio.run(service.wait_final([last.id], 120))
        assert final[last.id].state == JobState.DONE
        assert final[last.id].result["status"] == "integrity_violation"  # the slot works after the kill
        assert time.monotonic() - cancelled_at < 60  # the running candidate was killed, not awaited (minutes)
        assert service.get(queued.id).started is None  # a cancelled queued job never ran
        assert service.get(running.id).result is None and service.get(running.id).error == "cancelled by a client"
        assert service.cancel(last.id).state == JobState.DONE  # finished jobs stay as they are
    finally:
        service.stop()


def test_finished_jobs_are_pruned_by_count(tmp_path):
    config = ServiceConfig(db_path=tmp_path / "jobs.db", workers=1, device="cpu", max_finished=2,
                           prune_interval_s=0.2)
    service = EvaluationService(config)
    service.start()
    try:
        problem = service.problem_by_builtin("builtin/01_scaled_add")
        jobs = [r for r, _ in service.submit([JobSpec(problem.content_hash, NO_TRITON + f"# {i}\n", {})
                                              for i in range(6)], client="c")]
        final = asyncio.run(service.wait_final([r.id for r in jobs], 120))
        assert len(final) == 6
        deadline = time.monotonic() + 10
        while sum(service.store.count_by_state().values()) > 2:
            assert time.monotonic() < deadline, service.store.count_by_state()
            time.sleep(0.1)
        kept = service.store.get_many([r.id for r in jobs])
        newest = sorted(final.values(), key=lambda r: r.finished)[-2:]
        assert set(kept) == {r.id for r in newest}
        assert b"tritongym_jobs_pruned_total 4.0" in service.metrics.render()
    finally:
        service.stop()
