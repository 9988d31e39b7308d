"""LocalPool's orchestration, pinned without running an evaluation: the fast unit layer for mutation testing.

What is scripted here, and why: a GPU and a fork server that dies on cue cannot cheaply exist on a CPU
test machine, and a real jailed evaluation costs seconds to minutes. So `run_evaluation` is replaced by a
small script (answers, raises, or flips the job's cancel flag, and records the exact arguments it got),
launchers are small objects put into ``slot.launchers`` (a ``lost()`` answer per call, counted ``close``
and ``kill_current``), and `resolve_mode`, `resolve_device`, torch's CUDA counts, `SpawnLauncher.start`,
the fork server's probe and `WarmReferences` are replaced where a test needs them. No process is started
and no sandbox is needed; the whole file runs in seconds, so that `benchmarks/mutation.py pool_units`
can rerun it for each of pool.py's mutants.

The same behaviours with real processes (jailed fork servers killed from outside while a candidate
provably runs, a cancel that kills a spinning candidate, closing with a running job) are tested in
tests/execution/test_pool.py and tests/execution/test_pool_bounds.py.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

import tritongym.evaluator.parent as parent
import tritongym.execution.forkserver as forkserver
import tritongym.execution.pool as pool_module
from tritongym.errors import EvaluatorError, SolutionError
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.reference import ReferenceWorkerLost
from tritongym.execution import EvalRequest, LocalPool, PoolClosed, QueueFull
from tritongym.execution.pool import _Job, _TrackedSpawn
from tritongym.execution.references import FreshJailedReferences

OPTIONS = EvalOptions(device="cpu", sandbox="none", num_trials=2, input_families=(), timeout=30.0)
KEY = ("none", "cpu")  # the launcher key of OPTIONS: (resolved sandbox, resolved device)


def request(options: EvalOptions | None = OPTIONS, **kwargs) -> EvalRequest:
    return EvalRequest("problem.py", "solution source", options, **kwargs)


class Result:
    """Stands for an EvalResult: the pool only passes it on."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Result({self.name})"


class FakeLauncher:
    """A launcher whose `lost()` answers are scripted (False once they run out)."""

    def __init__(self, lost: tuple[bool, ...] = ()) -> None:
        self.lost_answers = list(lost)
        self.lost_calls = 0
        self.closed = 0
        self.kills = 0
        self.should_cancel = None

    def lost(self) -> bool:
        self.lost_calls += 1
        return self.lost_answers.pop(0) if self.lost_answers else False

    def close(self) -> None:
        self.closed += 1

    def kill_current(self) -> None:
        self.kills += 1


class Script:
    """Replaces `run_evaluation`: each call takes the next step (a result, an exception to raise, or a
    function of the call that returns either), and records its exact arguments."""

    def __init__(self, *steps) -> None:
        self.steps = list(steps)
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        if not self.steps:
            raise AssertionError(f"run_evaluation called {len(self.calls)} times, more than scripted")
        step = self.steps.pop(0)
        if callable(step):
            step = step(*args, **kwargs)
        if isinstance(step, BaseException):
            raise step
        return step


class FakeReferences:
    """Stands for WarmReferences: counters for `stats`, a jailed view, a counted close."""

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        self.hits = 3
        self.misses = 4
        self.closed = 0
        self.jailed_view = object()

    def jailed(self):
        return self.jailed_view

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def make_pool(monkeypatch):
    """Pools that are closed (their threads ended) after the test, before its patches are undone."""
    pools: list[LocalPool] = []
    gates: list[threading.Event] = []

    def make(workers=1, **kwargs) -> LocalPool:
        kwargs.setdefault("launcher", "spawn")
        kwargs.setdefault("reference_cache", 0)
        pool = LocalPool(workers, **kwargs)
        pools.append(pool)
        return pool

    make.gates = gates
    yield make
    for gate in gates:
        gate.set()
    for pool in pools:
        pool.close()
        for slot in pool._slots:
            slot.thread.join(timeout=10)
            assert not slot.thread.is_alive()


def script(monkeypatch, *steps) -> Script:
    fake = Script(*steps)
    monkeypatch.setattr(pool_module, "run_evaluation", fake)
    return fake


def fixed_clock(monkeypatch, now: float = 100.0) -> None:
    monkeypatch.setattr(pool_module, "time", SimpleNamespace(monotonic=lambda: now))


def new_launchers(monkeypatch, *plans: tuple[bool, ...]) -> list[FakeLauncher]:
    """Launchers the slot starts when it needs a new one (the sandbox-less path makes a _TrackedSpawn):
    the i-th new launcher answers `lost()` with plans[i]."""
    made: list[FakeLauncher] = []
    remaining = list(plans)

    def factory() -> FakeLauncher:
        launcher = FakeLauncher(remaining.pop(0) if remaining else ())
        made.append(launcher)
        return launcher

    monkeypatch.setattr(pool_module, "_TrackedSpawn", factory)
    return made


def new_job(req: EvalRequest | None = None) -> _Job:
    job = _Job(req or request())
    job.enqueued = 100.0 - 1.234567  # queued 1.234567 s before the fixed clock's 100.0
    return job


# -- _cores and default_workers ---------------------------------------------------------------------------

def test_cores_counts_this_process_affinity_and_falls_back_to_the_cpu_count(monkeypatch):
    asked = []

    def affinity(pid):
        asked.append(pid)
        return {0, 2, 5}

    monkeypatch.setattr(pool_module.os, "sched_getaffinity", affinity)
    monkeypatch.setattr(pool_module.os, "cpu_count", lambda: 11)
    assert pool_module._cores() == 3 and asked == [0]
    monkeypatch.setattr(pool_module.os, "sched_getaffinity", lambda pid: set())
    assert pool_module._cores() == 1  # never zero slots' worth of threads

    for error in (OSError("no affinity"), AttributeError("no sched_getaffinity")):
        def failing(pid, error=error):
            raise error

        monkeypatch.setattr(pool_module.os, "sched_getaffinity", failing)
        monkeypatch.setattr(pool_module.os, "cpu_count", lambda: 11)
        assert pool_module._cores() == 11
        monkeypatch.setattr(pool_module.os, "cpu_count", lambda: None)  # unknown
        assert pool_module._cores() == 1
        monkeypatch.setattr(pool_module.os, "cpu_count", lambda: 0)
        assert pool_module._cores() == 1


def test_default_workers_is_one_per_visible_gpu_for_cuda_work_and_the_cores_otherwise(monkeypatch):
    monkeypatch.setattr(pool_module, "_cores", lambda: 7)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert pool_module.default_workers("cuda") == 3
    assert pool_module.default_workers("auto") == 3
    assert pool_module.default_workers() == 3
    assert pool_module.default_workers("cpu") == 7  # CPU work: the cores, GPUs or not
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert pool_module.default_workers("cuda") == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    assert pool_module.default_workers("cuda") == 7
    assert pool_module.default_workers("auto") == 7
    assert pool_module.default_workers() == 7
    assert pool_module.default_workers("cpu") == 7


# -- _TrackedSpawn ----------------------------------------------------------------------------------------

class FakeProcess:
    def __init__(self) -> None:
        self.kills = 0

    def kill(self) -> None:
        self.kills += 1


def test_tracked_spawn_remembers_the_running_process_and_kills_one_cancelled_while_starting(monkeypatch):
    started = []

    def start(self, module, source_path, **kwargs):
        started.append((self, module, source_path, kwargs))
        return FakeProcess()

    monkeypatch.setattr(parent.SpawnLauncher, "start", start)
    launcher = _TrackedSpawn()
    assert isinstance(launcher, parent.SpawnLauncher)
    assert launcher.current is None and launcher.should_cancel() is False
    assert launcher.lost() is False
    launcher.kill_current()  # nothing running: a no-op

    first = launcher.start("tritongym.evaluator.worker", "/tmp/candidate.py", device="cpu", budget=3)
    assert started == [(launcher, "tritongym.evaluator.worker", "/tmp/candidate.py", {"device": "cpu", "budget": 3})]
    assert launcher.current is first and first.kills == 0
    launcher.kill_current()
    assert first.kills == 1

    launcher.should_cancel = lambda: True  # the job was cancelled while it was being prepared
    second = launcher.start("m", "s")
    assert launcher.current is second and second.kills == 1 and first.kills == 1
    assert started[-1] == (launcher, "m", "s", {})
    assert launcher.lost() is False  # a fresh process per candidate: nothing warm to lose

    launcher.close()
    assert launcher.current is None
    launcher.kill_current()  # closed: nothing to kill
    assert second.kills == 1


# -- _Job and the slots' threads -------------------------------------------------------------------------

def test_a_new_job_is_unstarted_and_stamped_with_its_enqueue_time(monkeypatch):
    fixed_clock(monkeypatch, 42.5)
    req = request()
    job = _Job(req)
    assert job.request is req and isinstance(job.future, Future) and not job.future.done()
    assert not job.future.running()
    assert job.enqueued == 42.5 and job.attempts == 0
    assert job.cancel_requested is False and job.slot is None


def test_each_slot_runs_its_own_daemon_thread_until_the_pool_closes(make_pool, monkeypatch):
    script(monkeypatch, Result("a"), Result("b"), Result("c"))
    pool = make_pool(2)
    assert [slot.index for slot in pool._slots] == [0, 1]
    assert all(slot.pool is pool and slot.job is None and slot.launchers == {} for slot in pool._slots)
    assert [slot.thread.name for slot in pool._slots] == ["tritongym-slot-0", "tritongym-slot-1"]
    assert all(slot.thread.daemon and slot.thread.is_alive() for slot in pool._slots)
    futures = [pool.submit(request()) for _ in range(3)]
    assert sorted(f.result(timeout=10).name for f in futures) == ["a", "b", "c"]  # the threads keep looping
    pool.close()
    assert not any(slot.thread.is_alive() for slot in pool._slots)
    assert pool.stats().completed == 3


# -- _Slot.run: the counters and the future ---------------------------------------------------------------

def slot_with_evaluate(pool: LocalPool, monkeypatch, outcome):
    """Pool slot 0 with `evaluate` replaced: `outcome(job)` returns or raises; what the slot and pool
    looked like during it is recorded."""
    slot = pool._slots[0]
    seen = []

    def evaluate(job):
        seen.append((slot.job, job.slot, pool._busy))
        return outcome(job)

    monkeypatch.setattr(slot, "evaluate", evaluate)
    return slot, seen


def preset_counters(pool: LocalPool) -> None:
    pool._busy, pool._completed, pool._failed, pool._cancelled, pool._restarts = 2, 10, 20, 30, 40


def counters(pool: LocalPool) -> tuple[int, int, int, int, int]:
    return pool._busy, pool._completed, pool._failed, pool._cancelled, pool._restarts


def test_run_answers_a_result_and_counts_it_completed(make_pool, monkeypatch):
    pool = make_pool()
    result = Result("ok")
    slot, seen = slot_with_evaluate(pool, monkeypatch, lambda job: result)
    preset_counters(pool)
    job = _Job(request())
    slot.run(job)
    assert seen == [(job, slot, 3)]  # running: the slot holds the job, the job its slot, one more busy
    assert job.future.result(timeout=0) is result
    assert counters(pool) == (2, 11, 20, 30, 40)
    assert slot.job is None and job.slot is None


def test_run_answers_an_exception_and_counts_it_failed(make_pool, monkeypatch):
    pool = make_pool()
    error = SolutionError("no ModelNew")

    def outcome(job):
        raise error

    slot, seen = slot_with_evaluate(pool, monkeypatch, outcome)
    preset_counters(pool)
    job = _Job(request())
    slot.run(job)
    assert seen == [(job, slot, 3)]
    assert job.future.exception(timeout=0) is error
    assert counters(pool) == (2, 10, 21, 30, 40)
    assert slot.job is None and job.slot is None


def test_run_answers_a_cancelled_job_with_cancelled_error_whatever_its_evaluation_did(make_pool, monkeypatch):
    pool = make_pool()

    def cancelled_then_raises(job):
        job.cancel_requested = True
        raise SolutionError("killed")

    def cancelled_then_answers(job):
        job.cancel_requested = True
        return Result("late")

    for outcome in (cancelled_then_raises, cancelled_then_answers):
        slot, seen = slot_with_evaluate(pool, monkeypatch, outcome)
        preset_counters(pool)
        job = _Job(request())
        slot.run(job)
        assert seen == [(job, slot, 3)]
        assert isinstance(job.future.exception(timeout=0), CancelledError)
        with pytest.raises(CancelledError):
            job.future.result(timeout=0)
        assert counters(pool) == (2, 10, 20, 31, 40)
        assert slot.job is None and job.slot is None


def test_run_skips_a_job_cancelled_in_the_queue_and_counts_it(make_pool, monkeypatch):
    pool = make_pool()
    slot, seen = slot_with_evaluate(pool, monkeypatch, lambda job: Result("never"))
    preset_counters(pool)
    job = _Job(request())
    assert job.future.cancel()
    slot.run(job)
    assert seen == []  # not evaluated
    assert counters(pool) == (2, 10, 20, 31, 40)  # not busy at any point, one more cancelled
    assert slot.job is None and job.slot is None


# -- _Slot.evaluate: the call, the device spread ---------------------------------------------------------

def test_evaluate_calls_run_evaluation_with_the_request_the_slots_launcher_and_the_queue_time(make_pool, monkeypatch):
    pool = make_pool()
    references = FakeReferences()
    pool.references = references
    result = Result("ok")
    fake = script(monkeypatch, result)
    fixed_clock(monkeypatch)
    slot = pool._slots[0]
    launcher = FakeLauncher()
    slot.launchers[KEY] = launcher
    req = request()
    job = new_job(req)
    assert slot.evaluate(job) is result
    ((args, kwargs),) = fake.calls
    assert args[0] == "problem.py" and args[1] == "solution source" and args[2] is OPTIONS and len(args) == 3
    assert set(kwargs) == {"launcher", "references", "phase_seconds"}
    assert kwargs["launcher"] is launcher and kwargs["references"] is references
    assert kwargs["phase_seconds"] == {"queue": 1.2346}  # rounded to 0.1 ms
    assert job.attempts == 1 and launcher.lost_calls == 1 and launcher.closed == 0
    assert slot.launchers == {KEY: launcher} and pool._restarts == 0
    # The launcher asks the job whether it was cancelled (a candidate started after a cancel is killed).
    assert launcher.should_cancel() is False
    job.cancel_requested = True
    assert launcher.should_cancel() is True


def test_evaluate_runs_a_client_problems_reference_where_its_options_say(make_pool, monkeypatch):
    # A problem someone else sent runs its reference in the jail of the job's sandbox mode: the mode is
    # read from the job's options (once for the reference, once for the launcher).
    modes = []
    monkeypatch.setattr(pool_module, "resolve_mode", lambda mode: modes.append(mode) or "bwrap")
    pool = make_pool()
    references = FakeReferences()
    pool.references = references
    fake = script(monkeypatch, Result("ok"))
    slot = pool._slots[0]
    launcher = FakeLauncher()
    slot.launchers[("bwrap", "cpu")] = launcher
    slot.evaluate(new_job(request(trusted_problem=False)))
    ((_, kwargs),) = fake.calls
    assert kwargs["references"] is references.jailed_view and kwargs["launcher"] is launcher
    assert modes == ["none", "none"]
    pool.references = None  # the fixture closes the pool


def test_evaluate_with_default_options_uses_eval_options_defaults_on_the_resolved_device(make_pool, monkeypatch):
    pool = make_pool()
    fake = script(monkeypatch, Result("ok"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(pool_module, "resolve_mode", lambda mode: "none")
    slot = pool._slots[0]
    slot.launchers[KEY] = FakeLauncher()
    slot.evaluate(new_job(request(options=None)))
    ((args, _),) = fake.calls
    assert args[2] == replace(EvalOptions(), device="cpu")  # auto resolved to this machine's CPU


def gpus(monkeypatch, count: int, available: bool = True) -> list[str]:
    asked: list[str] = []

    def resolve(device):
        asked.append(device)
        return "cuda" if device == "auto" else device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(parent, "resolve_device", resolve)
    return asked


@pytest.mark.parametrize("device", ["cuda", "auto"])
def test_evaluate_spreads_an_unindexed_cuda_job_over_the_gpus_by_slot(make_pool, monkeypatch, device):
    pool = make_pool(3)
    asked = gpus(monkeypatch, 2)
    options = replace(OPTIONS, device=device)
    for index, expected in ((1, "cuda:1"), (2, "cuda:0")):
        fake = script(monkeypatch, Result("ok"))
        slot = pool._slots[index]
        launcher = FakeLauncher()
        slot.launchers[("none", expected)] = launcher
        asked.clear()
        slot.evaluate(new_job(request(options)))
        ((args, kwargs),) = fake.calls
        assert args[2] == replace(options, device=expected) and kwargs["launcher"] is launcher
        assert asked == [device, expected]  # the spread, then the launcher's key


def test_evaluate_keeps_the_device_where_there_is_nothing_to_spread(make_pool, monkeypatch):
    pool = make_pool(2)
    slot = pool._slots[1]
    for count, available in ((1, True), (2, False)):
        asked = gpus(monkeypatch, count, available)
        options = replace(OPTIONS, device="cuda")
        slot.launchers[("none", "cuda")] = FakeLauncher()
        fake = script(monkeypatch, Result("ok"))
        slot.evaluate(new_job(request(options)))
        assert fake.calls[0][0][2] is options  # untouched, not a copy
        assert asked == ["cuda", "cuda"]
    # An indexed device or the CPU is never resolved for the spread (only for the launcher's key).
    asked = gpus(monkeypatch, 2)
    for device in ("cuda:1", "cpu"):
        options = replace(OPTIONS, device=device)
        slot.launchers[("none", device)] = FakeLauncher()
        fake = script(monkeypatch, Result("ok"))
        asked.clear()
        slot.evaluate(new_job(request(options)))
        assert fake.calls[0][0][2] is options and asked == [device]


# -- _Slot.evaluate: the retry loop ----------------------------------------------------------------------

def test_a_lost_reference_worker_is_retried_once_and_the_second_run_answers(make_pool, monkeypatch):
    pool = make_pool()
    result = Result("second")
    fake = script(monkeypatch, ReferenceWorkerLost("worker gone"), result)
    slot = pool._slots[0]
    launcher = FakeLauncher()
    slot.launchers[KEY] = launcher
    pool._restarts = 5
    job = new_job()
    assert slot.evaluate(job) is result
    assert len(fake.calls) == 2 and job.attempts == 2 and pool._restarts == 6
    assert fake.calls[1][1]["launcher"] is launcher  # the launcher was not at fault: kept
    assert launcher.closed == 0 and slot.launchers == {KEY: launcher}


def test_a_reference_worker_lost_twice_is_an_evaluator_error_not_the_problems(make_pool, monkeypatch):
    pool = make_pool()
    second = ReferenceWorkerLost("killed by signal 9")
    fake = script(monkeypatch, ReferenceWorkerLost("first loss"), second)
    slot = pool._slots[0]
    slot.launchers[KEY] = FakeLauncher()
    pool._restarts = 5
    job = new_job()
    with pytest.raises(EvaluatorError) as raised:
        slot.evaluate(job)
    assert not isinstance(raised.value, ReferenceWorkerLost)
    assert str(raised.value) == ("the reference worker died twice while running this job; no verdict was given "
                                 "(the problem may exhaust its memory or end its own process): killed by signal 9")
    assert raised.value.__cause__ is second
    assert len(fake.calls) == 2 and job.attempts == 2 and pool._restarts == 7


def test_a_lost_reference_worker_of_a_cancelled_job_is_not_retried(make_pool, monkeypatch):
    pool = make_pool()
    lost = ReferenceWorkerLost("killed by the cancel")

    def cancelled(*args, **kwargs):
        (job,) = jobs
        job.cancel_requested = True
        return lost

    fake = script(monkeypatch, cancelled)
    slot = pool._slots[0]
    slot.launchers[KEY] = FakeLauncher()
    pool._restarts = 5
    jobs = [new_job()]
    with pytest.raises(ReferenceWorkerLost) as raised:
        slot.evaluate(jobs[0])
    assert raised.value is lost and len(fake.calls) == 1 and pool._restarts == 5


def test_an_error_with_a_healthy_launcher_is_the_jobs_answer_at_once(make_pool, monkeypatch):
    pool = make_pool()
    error = SolutionError("the candidate does not compile")
    fake = script(monkeypatch, error)
    slot = pool._slots[0]
    launcher = FakeLauncher(lost=(False,))
    slot.launchers[KEY] = launcher
    with pytest.raises(SolutionError) as raised:
        slot.evaluate(new_job())
    assert raised.value is error and len(fake.calls) == 1
    assert launcher.lost_calls == 1 and launcher.closed == 0 and slot.launchers == {KEY: launcher}
    assert pool._restarts == 0


def slot_with_a_dying_launcher(pool: LocalPool) -> tuple[object, FakeLauncher, _Job]:
    """Slot 0 holding a launcher that is found lost after its first run, 5 restarts already counted
    (so that the tests see each restart added), and a new job."""
    slot = pool._slots[0]
    dead = FakeLauncher(lost=(True,))
    slot.launchers[KEY] = dead
    pool._restarts = 5
    return slot, dead, new_job()


def test_an_error_from_a_lost_launcher_replaces_it_and_the_second_run_answers(make_pool, monkeypatch):
    pool = make_pool()
    result = Result("second")
    fake = script(monkeypatch, EvaluatorError("fork server gone"), result)
    made = new_launchers(monkeypatch, (False,))
    slot, dead, job = slot_with_a_dying_launcher(pool)
    assert slot.evaluate(job) is result
    (replacement,) = made
    assert dead.closed == 1 and slot.launchers == {KEY: replacement}
    assert [kwargs["launcher"] for _, kwargs in fake.calls] == [dead, replacement]
    assert job.attempts == 2 and pool._restarts == 6 and replacement.closed == 0


def test_an_error_from_a_launcher_lost_twice_is_reraised_after_two_runs(make_pool, monkeypatch):
    pool = make_pool()
    first, second = EvaluatorError("fork server gone"), EvaluatorError("fork server gone again")
    fake = script(monkeypatch, first, second)
    made = new_launchers(monkeypatch, (True,), (False,))
    slot, dead, job = slot_with_a_dying_launcher(pool)
    with pytest.raises(EvaluatorError) as raised:
        slot.evaluate(job)
    assert raised.value is second and len(fake.calls) == 2 and job.attempts == 2
    (replacement,) = made
    assert dead.closed == 1 and replacement.closed == 1 and slot.launchers == {}
    assert pool._restarts == 7


def test_an_error_from_a_lost_launcher_of_a_cancelled_job_is_not_retried(make_pool, monkeypatch):
    pool = make_pool()
    error = EvaluatorError("killed")
    jobs = [new_job()]

    def cancelled(*args, **kwargs):
        jobs[0].cancel_requested = True
        return error

    fake = script(monkeypatch, cancelled)
    slot = pool._slots[0]
    launcher = FakeLauncher(lost=(True,))
    slot.launchers[KEY] = launcher
    with pytest.raises(EvaluatorError) as raised:
        slot.evaluate(jobs[0])
    assert raised.value is error and len(fake.calls) == 1
    assert launcher.closed == 0 and slot.launchers == {KEY: launcher} and pool._restarts == 0


def test_a_verdict_from_a_launcher_lost_under_the_job_is_thrown_away_and_the_job_rerun(make_pool, monkeypatch):
    pool = make_pool()
    suspect, result = Result("crash verdict"), Result("second")
    fake = script(monkeypatch, suspect, result)
    made = new_launchers(monkeypatch, (False,))
    slot, dead, job = slot_with_a_dying_launcher(pool)
    assert slot.evaluate(job) is result
    (replacement,) = made
    assert [kwargs["launcher"] for _, kwargs in fake.calls] == [dead, replacement]
    assert dead.closed == 1 and slot.launchers == {KEY: replacement}
    assert job.attempts == 2 and pool._restarts == 6


def test_a_launcher_lost_under_two_runs_of_a_job_is_an_error_never_a_verdict(make_pool, monkeypatch):
    pool = make_pool()
    fake = script(monkeypatch, Result("first"), Result("second"))
    made = new_launchers(monkeypatch, (True,))
    slot, dead, job = slot_with_a_dying_launcher(pool)
    with pytest.raises(EvaluatorError) as raised:
        slot.evaluate(job)
    assert str(raised.value) == "the fork server died twice while running this job; no verdict was given"
    assert len(fake.calls) == 2 and job.attempts == 2 and pool._restarts == 7
    (replacement,) = made
    assert dead.closed == 1 and replacement.closed == 1 and slot.launchers == {}


def test_a_cancelled_jobs_answer_is_kept_even_if_its_launcher_was_lost(make_pool, monkeypatch):
    pool = make_pool()
    jobs = [new_job()]
    result = Result("cancelled run")

    def cancelled(*args, **kwargs):
        jobs[0].cancel_requested = True
        return result

    fake = script(monkeypatch, cancelled)
    slot = pool._slots[0]
    launcher = FakeLauncher(lost=(True,))
    slot.launchers[KEY] = launcher
    assert slot.evaluate(jobs[0]) is result
    assert len(fake.calls) == 1 and launcher.closed == 0 and pool._restarts == 0


def test_a_job_answered_through_the_pool_after_a_lost_launcher_counts_one_restart(make_pool, monkeypatch):
    pool = make_pool()
    fake = script(monkeypatch, Result("crash verdict"), Result("second"))
    new_launchers(monkeypatch, (True,), (False,))  # the first launcher the slot starts dies under the job
    future = pool.submit(request())
    assert future.result(timeout=10).name == "second"
    stats = pool.stats()
    assert (stats.completed, stats.failed, stats.restarts, stats.busy, stats.cancelled) == (1, 0, 1, 0, 0)
    assert len(fake.calls) == 2


# -- _Slot.launcher_for ---------------------------------------------------------------------------------

class FakeForkServer:
    made: list[dict] = []

    def __init__(self, **kwargs) -> None:
        self.kwargs = kwargs
        FakeForkServer.made.append(kwargs)

    def close(self) -> None:
        pass


@pytest.fixture
def resolved(monkeypatch):
    """resolve_mode answers state["mode"]; resolve_device is the identity; both record what they got.
    The fork server's probe answers state["problem"]; ForkServerLauncher is FakeForkServer."""
    state = {"mode": "bwrap", "problem": None, "modes": [], "devices": [], "probed": []}

    def resolve_mode(mode):
        state["modes"].append(mode)
        return state["mode"]

    def resolve_device(device):
        state["devices"].append(device)
        return device

    def probe(device):
        state["probed"].append(device)
        return state["problem"]

    monkeypatch.setattr(pool_module, "resolve_mode", resolve_mode)
    monkeypatch.setattr(parent, "resolve_device", resolve_device)
    monkeypatch.setattr(forkserver, "jailed_forkserver_problem", probe)
    monkeypatch.setattr(forkserver, "ForkServerLauncher", FakeForkServer)
    FakeForkServer.made = []
    return state


def test_launcher_for_spawn_pools_starts_fresh_processes_one_launcher_per_mode_and_device(make_pool, resolved):
    pool = make_pool(launcher="spawn")
    slot = pool._slots[0]
    jailed = replace(OPTIONS, sandbox="bwrap")
    first = slot.launcher_for(jailed)
    assert type(first) is _TrackedSpawn and resolved["modes"] == ["bwrap"] and resolved["devices"] == ["cpu"]
    assert slot.launchers == {("bwrap", "cpu"): first}
    assert slot.launcher_for(jailed) is first  # cached
    other = slot.launcher_for(replace(jailed, device="cuda:1"))
    assert type(other) is _TrackedSpawn and other is not first
    assert slot.launchers == {("bwrap", "cpu"): first, ("bwrap", "cuda:1"): other}
    resolved["mode"] = "none"
    third = slot.launcher_for(jailed)
    assert third is not first and slot.launchers[("none", "cpu")] is third
    assert resolved["probed"] == [] and FakeForkServer.made == []


def test_launcher_for_an_auto_pool_without_a_sandbox_starts_fresh_processes(make_pool, resolved):
    pool = make_pool(launcher="auto")
    resolved["mode"] = "none"
    launcher = pool._slots[0].launcher_for(OPTIONS)
    assert type(launcher) is _TrackedSpawn and resolved["probed"] == [] and FakeForkServer.made == []
    assert resolved["modes"] == ["none"]


def test_launcher_for_a_jailed_auto_pool_starts_a_fork_server_per_slot_and_device(make_pool, resolved):
    pool = make_pool(2, launcher="auto", threads=3)
    slot = pool._slots[1]
    jailed = replace(OPTIONS, sandbox="bwrap")
    server = slot.launcher_for(jailed)
    assert type(server) is FakeForkServer and resolved["probed"] == ["cpu"]
    assert server.kwargs == {"device": "cpu", "slot": 1, "threads": 3, "roles": ("candidate", "cleanroom")}
    assert slot.launcher_for(jailed) is server and len(FakeForkServer.made) == 1  # started once
    assert slot.launchers == {("bwrap", "cpu"): server}


def test_launcher_for_falls_back_to_fresh_processes_where_no_fork_server_can_run(make_pool, resolved):
    pool = make_pool(launcher="auto")
    resolved["problem"] = "no cgroup v2 delegation"
    launcher = pool._slots[0].launcher_for(replace(OPTIONS, sandbox="bwrap"))
    assert type(launcher) is _TrackedSpawn and FakeForkServer.made == [] and resolved["probed"] == ["cpu"]
    assert pool._slots[0].launchers == {("bwrap", "cpu"): launcher}


def test_launcher_for_a_pool_that_requires_the_fork_server_refuses_where_none_can_run(make_pool, resolved):
    pool = make_pool(launcher="forkserver")
    slot = pool._slots[0]
    resolved["problem"] = "no cgroup v2 delegation"
    with pytest.raises(EvaluatorError) as raised:
        slot.launcher_for(replace(OPTIONS, sandbox="bwrap"))
    assert str(raised.value) == "the fork server cannot run here: no cgroup v2 delegation"
    assert slot.launchers == {} and FakeForkServer.made == []
    resolved["problem"] = None
    server = slot.launcher_for(replace(OPTIONS, sandbox="bwrap"))
    assert type(server) is FakeForkServer and server.kwargs["slot"] == 0


def test_slot_close_closes_every_launcher_once_and_forgets_them(make_pool):
    pool = make_pool()
    slot = pool._slots[0]
    a, b = FakeLauncher(), FakeLauncher()
    slot.launchers.update({("none", "cpu"): a, ("bwrap", "cpu"): b})
    slot.close()
    assert (a.closed, b.closed) == (1, 1) and slot.launchers == {}


# -- LocalPool.__init__ ----------------------------------------------------------------------------------

def test_pool_arguments_are_checked_with_their_messages(make_pool):
    with pytest.raises(ValueError) as raised:
        LocalPool(1, launcher="fork", reference_cache=0)
    assert str(raised.value) == "launcher must be auto, forkserver or spawn, got 'fork'"
    for workers in (0, -1, 1.5, "2"):
        with pytest.raises(ValueError) as raised:
            LocalPool(workers, reference_cache=0)
        assert str(raised.value) == f"workers must be an integer >= 1, got {workers!r}"
    for kind in ("auto", "forkserver", "spawn"):
        assert make_pool(1, launcher=kind).launcher_kind == kind
    assert make_pool(1, launcher="spawn").workers == 1


def test_pool_defaults_without_arguments(make_pool, monkeypatch):
    made = []

    def references(**kwargs):
        made.append(FakeReferences(**kwargs))
        return made[-1]

    asked = []

    def workers(device):
        asked.append(device)
        return 2

    monkeypatch.setattr(pool_module, "WarmReferences", references)
    monkeypatch.setattr(pool_module, "default_workers", workers)
    monkeypatch.setattr(pool_module, "_cores", lambda: 8)
    pool = LocalPool()
    try:
        assert asked == ["auto"] and pool.workers == 2 and len(pool._slots) == 2
        assert pool.launcher_kind == "auto" and pool.threads == 4
        assert pool._queue.maxsize == 128 and pool._closed is False
        assert pool.references is made[0] and made[0].kwargs == {"max_idle": 32, "threads": 4, "slots": 2}
        assert counters(pool) == (0, 0, 0, 0, 0)
    finally:
        pool.close()
    LocalPool(device="cpu", reference_cache=0).close()
    assert asked == ["auto", "cpu"]


def test_pool_threads_queue_and_references_follow_the_arguments(make_pool, monkeypatch):
    made = []

    def references(**kwargs):
        made.append(FakeReferences(**kwargs))
        return made[-1]

    monkeypatch.setattr(pool_module, "WarmReferences", references)
    monkeypatch.setattr(pool_module, "_cores", lambda: 8)
    pool = make_pool(3, reference_cache=1)
    assert pool.threads == 2 and pool._queue.maxsize == 192  # 8 cores // 3 slots; 64 per slot
    assert pool.references is made[0] and made[0].kwargs == {"max_idle": 1, "threads": 2, "slots": 3}
    pool = make_pool(2, reference_cache=5, threads=3, queue_size=7)
    assert pool.threads == 3 and pool._queue.maxsize == 7
    assert made[1].kwargs == {"max_idle": 5, "threads": 3, "slots": 2}
    pool = make_pool(1, reference_cache=0)
    assert pool.references is None and len(made) == 2 and pool.threads == 8
    monkeypatch.setattr(pool_module, "_cores", lambda: 1)
    assert make_pool(2).threads == 1  # at least one thread, however many slots


def test_parent_threads_set_this_process_torch_threads_only_when_asked(make_pool, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    make_pool(1)
    assert calls == []
    make_pool(1, parent_threads=5)
    make_pool(1, parent_threads=0)
    assert calls == [5, 1]


def test_a_pool_is_its_own_context_manager_and_closes_on_exit(monkeypatch):
    references = FakeReferences()
    monkeypatch.setattr(pool_module, "WarmReferences", lambda **kwargs: references)
    with LocalPool(1, launcher="spawn") as pool:
        assert isinstance(pool, LocalPool) and not pool._closed
    assert pool._closed and references.closed == 1 and not pool._slots[0].thread.is_alive()


# -- references_for --------------------------------------------------------------------------------------

def test_references_for_keeps_client_problem_code_in_the_jail(make_pool, monkeypatch):
    modes = []
    answer = {"mode": "bwrap"}

    def resolve_mode(mode):
        modes.append(mode)
        return answer["mode"]

    monkeypatch.setattr(pool_module, "resolve_mode", resolve_mode)
    pool = make_pool()
    references = FakeReferences()
    pool.references = references
    trusted, client = request(), request(trusted_problem=False)
    assert pool.references_for(trusted, OPTIONS) is references and modes == []  # trusted: not even asked
    assert pool.references_for(client, OPTIONS) is references.jailed_view and modes == ["none"]
    answer["mode"] = "none"
    assert pool.references_for(client, OPTIONS) is references
    pool.references = None
    assert pool.references_for(client, OPTIONS) is None
    answer["mode"] = "bwrap"
    assert isinstance(pool.references_for(client, OPTIONS), FreshJailedReferences)
    assert pool.references_for(trusted, OPTIONS) is None


# -- submit ----------------------------------------------------------------------------------------------

def test_submit_refuses_what_is_not_a_request_and_a_closed_pool(make_pool):
    pool = make_pool()
    with pytest.raises(TypeError) as raised:
        pool.submit("relu.py")
    assert str(raised.value) == "submit takes an EvalRequest, got str"
    pool.close()
    with pytest.raises(PoolClosed) as closed:
        pool.submit(request())
    assert str(closed.value) == "the pool is closed"
    assert pool._queue.qsize() == 0


def blocked_pool(make_pool, monkeypatch, **kwargs):
    """A one-slot pool whose first job runs until `gate` is set (the next jobs answer at once)."""
    gate = threading.Event()
    make_pool.gates.append(gate)
    started = threading.Event()

    def first(*args, **kw):
        started.set()
        assert gate.wait(timeout=30)
        return Result("first")

    fake = script(monkeypatch, first, *[Result(f"job {i}") for i in range(1, 6)])
    pool = make_pool(1, **kwargs)
    future = pool.submit(request())
    assert started.wait(timeout=10)
    return pool, gate, future, fake


def test_submit_returns_the_jobs_future_and_applies_backpressure(make_pool, monkeypatch):
    pool, gate, running, _ = blocked_pool(make_pool, monkeypatch, queue_size=1)
    job = running._tritongym_job
    assert isinstance(job, _Job) and job.future is running and job.request.solution == "solution source"
    waiting = pool.submit(request())  # the queue's one place
    assert waiting._tritongym_job.future is waiting and pool.stats().queued == 1
    with pytest.raises(QueueFull) as raised:
        pool.submit(request(), block=False)
    assert str(raised.value) == "1 jobs are already waiting; retry later"
    assert isinstance(raised.value.__cause__, queue.Full)
    threading.Timer(1.2, gate.set).start()  # a submit that waits forever would get in after this
    started = time.monotonic()
    with pytest.raises(QueueFull):
        pool.submit(request(), timeout=0.2)
    assert 0.15 <= time.monotonic() - started < 1.5
    # By default submit waits for a place.
    answered: list = []
    thread = threading.Thread(target=lambda: answered.append(pool.submit(request())))
    thread.start()
    thread.join(timeout=0.3)
    assert thread.is_alive() and answered == []  # still waiting
    thread.join(timeout=10)
    assert not thread.is_alive() and len(answered) == 1
    assert [f.result(timeout=10).name for f in (running, waiting, answered[0])] == ["first", "job 1", "job 2"]


# -- stats -----------------------------------------------------------------------------------------------

def test_stats_reports_the_counters_queue_sandbox_and_reference_cache(make_pool, monkeypatch):
    modes = []
    monkeypatch.setattr(pool_module, "resolve_mode", lambda mode: modes.append(mode) or "bwrap-here")
    pool = make_pool(2)
    preset_counters(pool)
    monkeypatch.setattr(pool._queue, "qsize", lambda: 9)
    stats = pool.stats()
    assert (stats.slots, stats.busy, stats.queued, stats.completed, stats.failed, stats.cancelled,
            stats.restarts) == (2, 2, 9, 10, 20, 30, 40)
    assert stats.sandbox == "bwrap-here" and modes == ["auto"]
    assert stats.extra == {"reference_hits": 0, "reference_misses": 0}
    pool.references = FakeReferences()
    assert pool.stats().extra == {"reference_hits": 3, "reference_misses": 4}
    pool.references = None  # the fixture closes it


class ForkServerLauncher(FakeLauncher):
    """Named like the real one: `stats` reads the class names of the slots' launchers."""


@pytest.mark.parametrize("kind", ["auto", "forkserver", "spawn"])
def test_stats_names_how_candidates_start(make_pool, kind):
    pool = make_pool(2, launcher=kind)
    assert pool.stats().launcher == kind  # nothing started yet: what the pool was asked for
    pool._slots[1].launchers[("none", "cpu")] = _TrackedSpawn()
    assert pool.stats().launcher == "spawn"  # fresh processes, whatever was asked for
    pool._slots[0].launchers[("bwrap", "cpu")] = ForkServerLauncher()
    assert pool.stats().launcher == "forkserver"
    pool._slots[1].launchers.clear()
    assert pool.stats().launcher == "forkserver"


# -- close -----------------------------------------------------------------------------------------------

def test_close_cancels_the_queued_jobs_waits_for_the_running_one_and_closes_everything(make_pool, monkeypatch):
    pool, gate, running, fake = blocked_pool(make_pool, monkeypatch)
    queued = [pool.submit(request()) for _ in range(2)]
    references = FakeReferences()
    pool.references = references
    launcher = FakeLauncher()
    pool._slots[0].launchers[("bwrap", "cpu")] = launcher
    threading.Timer(0.3, gate.set).start()
    pool.close()
    assert running.done() and running.result().name == "first"  # waited for
    assert all(f.cancelled() for f in queued) and len(fake.calls) == 1
    assert not pool._slots[0].thread.is_alive()
    assert pool._slots[0].launchers == {} and launcher.closed == 1 and references.closed == 1
    stats = pool.stats()
    assert (stats.cancelled, stats.completed, stats.busy, stats.queued) == (2, 1, 0, 0)
    pool.close()  # a second close does nothing
    assert references.closed == 1 and launcher.closed == 1 and pool._queue.qsize() == 0
    with pytest.raises(PoolClosed):
        pool.submit(request())


def test_close_can_run_the_queued_jobs_first(make_pool, monkeypatch):
    pool, gate, running, fake = blocked_pool(make_pool, monkeypatch)
    queued = [pool.submit(request()) for _ in range(2)]
    threading.Timer(0.3, gate.set).start()
    pool.close(cancel_queued=False)
    assert [f.result(timeout=0).name for f in (running, *queued)] == ["first", "job 1", "job 2"]
    assert len(fake.calls) == 3
    stats = pool.stats()
    assert (stats.cancelled, stats.completed, stats.queued) == (0, 3, 0)


def test_close_without_waiting_returns_while_a_job_runs(make_pool, monkeypatch):
    pool, gate, running, _ = blocked_pool(make_pool, monkeypatch)
    references = FakeReferences()
    pool.references = references
    started = time.monotonic()
    threading.Timer(1.0, gate.set).start()
    pool.close(wait=False)
    assert time.monotonic() - started < 0.8 and not running.done()
    assert pool._closed and references.closed == 1
    assert running.result(timeout=10).name == "first"
    pool._slots[0].thread.join(timeout=10)
    assert not pool._slots[0].thread.is_alive()


def test_close_skips_a_stop_signal_found_in_the_queue(make_pool, monkeypatch):
    pool, gate, running, _ = blocked_pool(make_pool, monkeypatch)
    pool._queue.put(None)  # a slot's stop signal, queued before a job
    queued = pool.submit(request())
    threading.Timer(0.3, gate.set).start()
    pool.close()
    assert queued.cancelled() and running.result(timeout=0).name == "first"
    assert pool._cancelled == 1 and pool._completed == 1 and not pool._slots[0].thread.is_alive()


# -- cancel ----------------------------------------------------------------------------------------------

def test_cancel_drops_a_queued_job_and_flags_and_kills_a_running_one(make_pool, monkeypatch):
    pool, gate, running, _ = blocked_pool(make_pool, monkeypatch)
    launcher = FakeLauncher()
    slot = pool._slots[0]
    slot.launchers[("bwrap", "cpu")] = launcher
    waiting = pool.submit(request())
    assert pool.cancel(waiting) is True and waiting.cancelled()
    assert pool.cancel(running) is True
    assert running._tritongym_job.cancel_requested is True and launcher.kills == 1
    gate.set()
    with pytest.raises(CancelledError):
        running.result(timeout=10)
    assert pool.cancel(running) is False  # answered already
    foreign = Future()
    foreign.set_running_or_notify_cancel()
    assert pool.cancel(foreign) is False  # running, but not one of this pool's jobs
    pool.close()
    assert pool.stats().cancelled == 2 and launcher.kills == 1
