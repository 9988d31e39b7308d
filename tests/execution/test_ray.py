"""The Ray backend on a real local cluster (2 CPUs): same verdicts, and an actor killed mid-batch
loses no job and answers none twice."""

from __future__ import annotations

import time

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM

from tritongym import EvalOptions, Status
from tritongym.execution import EvalRequest, evaluate_many, make_pool

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.slow]

OPTIONS = EvalOptions(device="cpu", num_trials=2, input_families=(), timeout=60.0)


@pytest.fixture(scope="module")
def pool():
    pool = make_pool("ray", 2, ray_init={"num_cpus": 2})
    yield pool
    pool.close()
    assert not ray.is_initialized()


def test_ray_pool_gives_the_local_verdicts_in_order(pool):
    solutions = [FIXTURES / "relu_honest.py", FIXTURES / "relu_wrong.py", FIXTURES / "relu_honest.py"]
    results = evaluate_many([EvalRequest(RELU_PROBLEM, s, OPTIONS) for s in solutions], pool=pool, progress=False)
    assert [r.status for r in results] == [Status.OK, Status.INCORRECT, Status.OK]
    assert pool.stats().completed == 3


def test_an_actor_killed_mid_batch_loses_no_job_and_answers_none_twice(pool):
    answered: list[int] = []
    futures = []
    for index in range(4):
        future = pool.submit(EvalRequest(RELU_PROBLEM, FIXTURES / "relu_honest.py", OPTIONS, id=str(index)))
        future.add_done_callback(lambda _f, i=index: answered.append(i))
        futures.append(future)
    deadline = time.monotonic() + 120
    while pool.stats().busy == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    ray.kill(pool.actors()[0], no_restart=False)
    results = [future.result(timeout=600) for future in futures]
    assert [r.status for r in results] == [Status.OK] * 4
    assert sorted(answered) == [0, 1, 2, 3]
    stats = pool.stats()
    assert stats.restarts >= 1 and stats.failed == 0
