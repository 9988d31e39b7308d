"""`EvaluationService`: the job store, the execution pool and the waiters, without HTTP.

    client ──POST──▶ submit() ──commit──▶ SQLite (queued) ──202──▶ client
                                   dispatcher thread: claim (running) ──▶ pool.submit ──▶ slot
                     slot thread: future done ──▶ finish() (done/failed, once) ──▶ metrics, event log, waiters

The store is the queue: the pool only ever holds `dispatch_depth` jobs, so everything accepted
is on disk, and a restart requeues what was running (at-least-once evaluation; `JobStore.finish`
stores one result per job id).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritongym.errors import OptionsError, ProblemError
from tritongym.evaluator.options import EvalOptions
from tritongym.evaluator.result import EvalResult
from tritongym.evaluator.reward import RewardConfig
from tritongym.service.config import ServiceConfig
from tritongym.service.metrics import ServiceMetrics
from tritongym.service.store import FINAL_STATES, IdempotencyConflict, JobRecord, JobState, JobStore, NewJob
from tritongym.tasks import Problem, builtin_suite

log = logging.getLogger("tritongym.service")


class ServiceError(Exception):
    """A request the service refuses: `status_code` is the HTTP status, the message the reason."""

    def __init__(self, status_code: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.headers = headers


@dataclass(frozen=True)
class JobSpec:
    """One evaluation to enqueue, already validated: a stored problem, a solution, options."""

    problem_hash: str
    solution: str
    options: dict[str, Any]
    idempotency_key: str | None = None
    extra: dict[str, Any] | None = None


def build_options(options: dict[str, Any], config: ServiceConfig) -> EvalOptions:
    """`EvalOptions` from a request's option fields; the server's sandbox mode always applies."""
    fields = dict(options)
    if "reward" in fields:
        reward = fields["reward"]
        if not isinstance(reward, dict):
            raise OptionsError("reward must be an object of RewardConfig weights")
        try:
            fields["reward"] = RewardConfig(**reward)
        except TypeError as exc:
            raise OptionsError(f"reward: {exc}") from None
    for name, collection in (("disabled_checks", frozenset), ("input_families", tuple)):
        if name in fields:
            try:
                fields[name] = collection(fields[name])
            except TypeError:  # not a list of names (a number, a list of lists): the request's flaw
                raise OptionsError(f"{name} must be a list of names, got {repr(fields[name])[:200]}") from None
    fields.setdefault("device", config.device)
    if fields.get("sandbox", config.sandbox) != config.sandbox:
        raise OptionsError(f"the sandbox mode is set by the server ({config.sandbox}); leave 'sandbox' out")
    fields["sandbox"] = config.sandbox
    timeout = fields.get("timeout")
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > config.max_timeout_s:
        raise OptionsError(f"timeout {timeout} exceeds this server's limit of {config.max_timeout_s:g} s")
    try:
        return EvalOptions(**fields)
    except TypeError as exc:
        raise OptionsError(str(exc)) from None


def _fingerprint(spec: JobSpec) -> str:
    text = json.dumps([spec.problem_hash, spec.solution, spec.options], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def check_text(field: str, value: str) -> str:
    """`value` if it is text the store and the evaluator can hold, else a 422 naming the flaw.

    JSON can carry lone UTF-16 surrogates (``"\\ud800"``), which no UTF-8 store or file can
    encode, and NUL characters, which Python's parser refuses; both reached the store or the
    parser and ended in a 500 with the connection dropped."""
    for index, char in enumerate(value):
        if char == "\0":
            raise ServiceError(422, f"{field} contains a NUL character at offset {index}; send text without NUL")
        if "\ud800" <= char <= "\udfff":
            raise ServiceError(422, f"{field} contains a lone surrogate (U+{ord(char):04X}) at offset {index}; "
                                    "send valid Unicode text (UTF-8)")
    return value


def _as_source(solution: str) -> str:
    """The evaluator reads a one-line string ending in ``.py`` as a *path*: a client must never
    make the server read its files, so a one-line solution gets a trailing newline (same code)."""
    return solution if "\n" in solution else solution + "\n"


class EventLog:
    """One JSON line per finished evaluation, appended and flushed as it happens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - kept open for the service's life

    def write(self, event: dict[str, Any]) -> None:
        line = json.dumps(event, default=str)
        with self._lock:
            if not self._file.closed:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class _Waiters:
    """Futures of event-loop coroutines waiting for jobs, set from the pool's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Future[JobRecord | None]]]] = {}

    def register(self, job_ids: Sequence[str]) -> asyncio.Future[JobRecord | None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[JobRecord | None] = loop.create_future()
        with self._lock:
            for job_id in job_ids:
                self._by_job.setdefault(job_id, []).append((loop, future))
        return future

    def unregister(self, job_ids: Sequence[str], future: asyncio.Future[JobRecord | None]) -> None:
        with self._lock:
            for job_id in job_ids:
                entries = self._by_job.get(job_id)
                if entries:
                    entries[:] = [e for e in entries if e[1] is not future]
                    if not entries:
                        del self._by_job[job_id]

    def notify(self, job_id: str, record: JobRecord | None = None) -> None:
        """Wake the waiters of `job_id`, handing them its final `record` when known (saves a read)."""
        with self._lock:
            entries = self._by_job.pop(job_id, [])
        for loop, future in entries:
            try:
                loop.call_soon_threadsafe(_resolve, future, record)
            except RuntimeError:  # that loop has closed: its waiter is gone
                pass


def _resolve(future: asyncio.Future[JobRecord | None], record: JobRecord | None) -> None:
    if not future.done():
        future.set_result(record)


class EvaluationService:
    """The durable evaluation queue over an execution pool. `start()` before use, `stop()` after."""

    def __init__(self, config: ServiceConfig, pool: Any = None) -> None:
        self.config = config
        self.store = JobStore(config.db_path)
        self.events = EventLog(config.event_log)  # type: ignore[arg-type]
        self._pool = pool
        self._own_pool = pool is None
        self._inflight: dict[str, Future[EvalResult]] = {}
        self._inflight_lock = threading.Lock()
        self._kick = threading.Event()
        self._dispatch_lock = threading.Lock()
        self._stopping = False
        self._dispatcher: threading.Thread | None = None
        self._problems: OrderedDict[str, Problem] = OrderedDict()
        self._problems_lock = threading.Lock()
        self._parsed: dict[tuple[str, str | None, str | None], Problem] = {}
        self._builtin: dict[str, Problem] | None = None
        self._trusted_hashes: frozenset[str] | None = None
        self.waiters = _Waiters()
        self.started_at = time.time()
        self.requeued_at_start = 0
        self.ready = False
        self.metrics = ServiceMetrics(self)

    # -- life cycle ------------------------------------------------------------------------
    @property
    def pool(self) -> Any:
        return self._pool

    def start(self) -> None:
        self.requeued_at_start = self.store.requeue_unfinished()
        if self.requeued_at_start:
            log.info("requeued %d job(s) left running by the previous process", self.requeued_at_start)
        if self._pool is None:
            from tritongym.execution import default_workers, make_pool

            if self.config.backend == "local":
                # This process only evaluates: its torch threads (the slots' output comparisons)
                # are split between the slots, as the pool's own are, instead of oversubscribing.
                workers = self.config.workers or default_workers(self.config.device)
                cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
                self._pool = make_pool("local", workers, parent_threads=max(1, cores // workers))
            else:
                self._pool = make_pool(self.config.backend, self.config.workers)
        self._depth = self.config.dispatch_depth or 4 * max(1, int(getattr(self._pool, "workers", 1)))
        self._dispatcher = threading.Thread(target=self._dispatch_loop, name="tritongym-service-dispatch",
                                            daemon=True)
        self._dispatcher.start()
        self.ready = True
        self._kick.set()

    def stop(self) -> None:
        """Stop dispatching; running jobs are abandoned to the next start (they stay ``running``
        in the store and are requeued then), so stopping never loses or half-stores a job."""
        self.ready = False
        self._stopping = True
        self._kick.set()
        if self._dispatcher is not None:
            self._dispatcher.join(timeout=10)
        if self._own_pool and self._pool is not None:
            self._pool.close(wait=False)
        self.events.close()
        self.store.close()

    # -- problems --------------------------------------------------------------------------
    def builtin_problems(self) -> dict[str, Problem]:
        if self._builtin is None:
            problems = builtin_suite()
            index: dict[str, Problem] = {}
            for problem in problems:
                index[problem.problem_id] = problem
                index[problem.name] = problem
            self._builtin = index
        return self._builtin

    def trusted_problem(self, content_hash: str) -> bool:
        """True for problem code from this machine (the built-in suite): its reference runs
        unjailed. Everything a client sent (``problem.source``, a registered problem, KernelGYM's
        ``reference_code``) runs in the candidate's jail, unless it is byte-for-byte a built-in."""
        if self._trusted_hashes is None:
            self._trusted_hashes = frozenset(p.content_hash for p in self.builtin_problems().values())
        return content_hash in self._trusted_hashes

    def store_problem(self, problem: Problem, *, registered: bool) -> Problem:
        self.store.put_problem(problem.content_hash, problem.source, problem.name, problem.problem_id,
                               problem.level, registered)
        self._cache_problem(problem)
        return problem

    def problem_from_source(self, source: str, name: str | None = None, problem_id: str | None = None,
                            *, registered: bool = False) -> Problem:
        """Parse, check and store a problem; a malformed one is a 422 with the loader's message."""
        if len(source.encode("utf-8", "surrogatepass")) > self.config.max_problem_bytes:
            raise ServiceError(413, f"problem source is larger than {self.config.max_problem_bytes} bytes")
        check_text("problem source", source)
        for field, value in (("problem name", name), ("problem_id", problem_id)):
            if value is not None:
                check_text(field, value)
        # Trainers send the same few problems with every request: parse each text once.
        key = (source, name, problem_id)
        with self._problems_lock:
            known = self._parsed.get(key)
        if known is not None:
            return self.store_problem(known, registered=registered)
        try:
            problem = Problem.from_source(source, name=name or "problem",
                                          problem_id=problem_id or name or "inline")
        except ProblemError as exc:
            raise ServiceError(422, f"malformed problem: {exc}") from None
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            # What the parser raises besides the loader's own errors (nesting too deep for the
            # parser, an unparsable literal): the problem's flaw, never the server's.
            raise ServiceError(422, f"malformed problem: not valid Python: {type(exc).__name__}: "
                                    f"{str(exc)[:300]}") from None
        if problem_id is None and name is None:
            problem = dataclasses.replace(problem, problem_id=f"inline/{problem.content_hash[:12]}",
                                          name=f"inline_{problem.content_hash[:12]}")
        with self._problems_lock:
            self._parsed[key] = problem
            while len(self._parsed) > 256:
                self._parsed.pop(next(iter(self._parsed)))
        return self.store_problem(problem, registered=registered)

    def problem_by_builtin(self, name: str) -> Problem:
        problem = self.builtin_problems().get(name)
        if problem is None:
            raise ServiceError(422, f"unknown built-in problem {name!r}; built-in ids are "
                                    f"{', '.join(sorted(p for p in self.builtin_problems() if '/' in p))}")
        return self.store_problem(problem, registered=False)

    def problem_at_size(self, problem: Problem, size: str | None, options: dict[str, Any]) -> Problem:
        """`problem` at the size a request asked for, stored (its hash is what the job records).

        ``original`` or absent: as given (what the service always did). ``cpu``: its CPU-size
        variant (docs/kernelbench-cpu.md); ``auto``: ``cpu`` when this evaluation runs on a CPU
        (the request's device, else the server's), ``original`` on a GPU, as the local CLI
        chooses. Only sizes known without running the problem's code are used (`known_cpu_variant`:
        KernelBench's and the built-in problems, and variants sent as such), since a client's
        problem runs nowhere but in the sandbox; ``cpu`` for any other problem is a 422 naming the
        fix, ``auto`` leaves it as given.
        """
        if size in (None, "original"):
            return problem
        if size == "auto" and not _on_cpu(str(options.get("device") or self.config.device)):
            return problem
        from tritongym.tasks.sizing import known_cpu_variant

        try:
            variant = known_cpu_variant(problem)
        except ProblemError as exc:
            if size == "auto":
                return problem  # as given, as before: its evaluation says what went wrong
            raise ServiceError(422, f"size 'cpu': {exc}") from None
        if variant is None:
            if size == "auto":
                return problem
            raise ServiceError(422, f"size 'cpu': no CPU size is known for problem {problem.problem_id!r} (this "
                                    "server sizes KernelBench's and the built-in problems; it never runs a client's "
                                    "problem code outside the sandbox to size it): send its CPU-size variant as the "
                                    "source (tritongym.tasks.sizing.cpu_variant(problem), or tritongym run --server "
                                    "--size cpu, which sizes on the client), or 'original'")
        if variant is problem:
            return problem
        return self.store_problem(variant, registered=False)

    def problem_by_hash(self, content_hash: str) -> Problem:
        problem = self._cached_problem(content_hash)
        if problem is not None:
            return problem
        stored = self.store.get_problem(content_hash)
        if stored is None:
            raise ServiceError(422, f"unknown problem hash {content_hash!r}: register the problem first "
                                    "(POST /v1/problems) or send its source")
        problem = Problem(source=stored.source, name=stored.name, problem_id=stored.problem_id, level=stored.level)
        self._cache_problem(problem)
        return problem

    def prune_problems(self, max_age_s: float | None = None) -> int:
        """Apply the store's bounds on registered problems (`ServiceConfig.max_problems`, and
        `max_age_s` since the last registration), forgetting them here too. Returns how many."""
        gone = set(self.store.prune_problems(max_age_s=max_age_s, max_problems=self.config.max_problems))
        if gone:
            with self._problems_lock:
                for content_hash in gone:
                    self._problems.pop(content_hash, None)
                for key in [k for k, p in self._parsed.items() if p.content_hash in gone]:
                    del self._parsed[key]
        return len(gone)

    def _cache_problem(self, problem: Problem) -> None:
        with self._problems_lock:
            self._problems[problem.content_hash] = problem
            self._problems.move_to_end(problem.content_hash)
            while len(self._problems) > 512:
                self._problems.popitem(last=False)

    def _cached_problem(self, content_hash: str) -> Problem | None:
        with self._problems_lock:
            return self._problems.get(content_hash)

    # -- jobs ------------------------------------------------------------------------------
    def check_solution(self, solution: str) -> str:
        if len(solution.encode("utf-8", "surrogatepass")) > self.config.max_solution_bytes:
            raise ServiceError(413, f"solution is larger than {self.config.max_solution_bytes} bytes")
        return _as_source(check_text("solution", solution))

    def submit(self, specs: Sequence[JobSpec], *, client: str, api: str = "native") -> list[tuple[JobRecord, bool]]:
        """Persist a batch (one transaction) and wake the dispatcher. Returns (record, created)."""
        if not specs:
            raise ServiceError(422, "the batch is empty")
        if len(specs) > self.config.max_batch:
            raise ServiceError(422, f"a batch holds at most {self.config.max_batch} items, got {len(specs)}")
        for spec in specs:
            build_options_checked(spec.options, self.config)
            if spec.idempotency_key is not None:
                check_text("idempotency_key", spec.idempotency_key)
        unfinished = self.store.count_unfinished(client)
        if unfinished + len(specs) > self.config.max_in_flight_per_client:
            raise ServiceError(429, f"client {client!r} has {unfinished} unfinished jobs; the limit is "
                                    f"{self.config.max_in_flight_per_client} (wait for results, then submit more)",
                               headers={"Retry-After": "5"})
        jobs = [NewJob(id=uuid.uuid4().hex, idempotency_key=spec.idempotency_key, fingerprint=_fingerprint(spec),
                       client=client, api=api, problem_hash=spec.problem_hash, solution=spec.solution,
                       options=spec.options, extra=spec.extra) for spec in specs]
        try:
            out = self.store.insert_jobs(jobs)
        except IdempotencyConflict as exc:
            raise ServiceError(409, str(exc)) from None
        self.metrics.submitted.inc(sum(created for _, created in out))
        self._dispatch_now()
        return out

    def replace_final(self, record: JobRecord) -> None:
        """Forget a finished job so that its idempotency key can name a new one (KernelGYM's
        ``force_refresh``)."""
        if record.final:
            self.store.delete(record.id)

    def get(self, job_id: str) -> JobRecord | None:
        return self.store.get(job_id)

    def cancel(self, job_id: str) -> JobRecord | None:
        """Cancel a queued or running job (a running one's candidate is killed). A finished job
        is left as it is. Returns the job as it stands afterwards (None: unknown)."""
        record = self.store.get(job_id)
        if record is None or record.final:
            return record
        # Stored like any outcome (metrics, one event-log line, waiters); the pool's own answer
        # for the killed job comes later and finds the job final (nothing stored twice).
        if self._store_outcome(record, JobState.CANCELLED, error="cancelled by a client"):
            with self._inflight_lock:
                future = self._inflight.get(job_id)
            if future is not None:
                self._pool.cancel(future)
        return self.store.get(job_id)

    async def wait_final(self, job_ids: Sequence[str], timeout: float) -> dict[str, JobRecord]:
        """Wait until every job of `job_ids` is final or `timeout` passes; returns the final ones."""
        deadline = time.monotonic() + timeout
        ids = list(dict.fromkeys(job_ids))
        final: dict[str, JobRecord] = {}
        while True:
            pending = [i for i in ids if i not in final]
            future = self.waiters.register(pending)
            try:
                for record in await asyncio.to_thread(self.store.final_among, pending):
                    final[record.id] = record
                if len(final) == len(ids):
                    return final
                left = deadline - time.monotonic()
                if left <= 0:
                    return final
                try:
                    delivered = await asyncio.wait_for(future, timeout=min(left, 30.0))
                except asyncio.TimeoutError:
                    continue
                if delivered is not None and delivered.final and len(pending) == 1 and delivered.id in pending:
                    # The common blocking call: one job, whose record came with the notice.
                    final[delivered.id] = delivered
                    return final
            finally:
                self.waiters.unregister(pending, future)

    async def next_final(self, job_ids: Sequence[str], timeout: float) -> list[JobRecord]:
        """The jobs of `job_ids` that are final now, or as soon as one becomes final (empty
        after `timeout`)."""
        future = self.waiters.register(job_ids)
        try:
            done = await asyncio.to_thread(self.store.final_among, job_ids)
            if done:
                return done
            try:
                await asyncio.wait_for(future, timeout=timeout)
            except asyncio.TimeoutError:
                return []
            return await asyncio.to_thread(self.store.final_among, job_ids)
        finally:
            self.waiters.unregister(job_ids, future)

    # -- dispatching -----------------------------------------------------------------------
    def _dispatch_loop(self) -> None:
        last_prune = 0.0
        while not self._stopping:
            self._kick.wait(timeout=1.0)
            self._kick.clear()
            if self._stopping:
                break
            try:
                with self._dispatch_lock:
                    self._dispatch_some()
                if time.monotonic() - last_prune >= self.config.prune_interval_s:
                    last_prune = time.monotonic()
                    pruned = self.store.prune(max_age_s=self.config.retention_s,
                                              max_finished=self.config.max_finished)
                    if pruned:
                        self.metrics.pruned.inc(pruned)
                    self.prune_problems(max_age_s=self.config.retention_s)
            except Exception:  # noqa: BLE001 - the dispatcher must outlive a transient store error
                log.exception("dispatch failed; retrying")
                time.sleep(0.5)

    def _dispatch_now(self) -> None:
        """Hand queued jobs to the pool from this thread (a submitting request or a finished
        job's callback): one thread switch less than waking the dispatcher. If another thread
        is dispatching, the dispatcher is woken instead, so no wake-up is lost."""
        if self._stopping or not self.ready:
            return
        if self._dispatch_lock.acquire(blocking=False):
            try:
                self._dispatch_some()
            except Exception:  # noqa: BLE001 - the dispatcher thread retries
                log.exception("dispatch failed; the dispatcher will retry")
            finally:
                self._dispatch_lock.release()
        else:
            self._kick.set()

    def _dispatch_some(self) -> None:
        from tritongym.execution import EvalRequest, PoolClosed

        with self._inflight_lock:
            room = self._depth - len(self._inflight)
            busy = set(self._inflight)
        for record in self.store.claim_queued(room, busy):
            try:
                problem = self.problem_by_hash(record.problem_hash)
                options = build_options(record.options, self.config)
            except (ServiceError, OptionsError, ProblemError) as exc:
                message = exc.message if isinstance(exc, ServiceError) else str(exc)
                self._store_outcome(record, JobState.FAILED, error=message)
                continue
            request = EvalRequest(problem, _as_source(record.solution), options, id=record.id,
                                  trusted_problem=self.trusted_problem(record.problem_hash))
            try:
                future = self._pool.submit(request)
            except PoolClosed:
                self.store.unclaim(record.id)
                return
            with self._inflight_lock:
                self._inflight[record.id] = future
            future.add_done_callback(lambda f, r=record: self._on_done(r, f))

    def _on_done(self, record: JobRecord, future: Future[EvalResult]) -> None:
        with self._inflight_lock:
            self._inflight.pop(record.id, None)
        if self._stopping:
            # Shutting down: the pool cancelled or abandoned it. It stays `running` in the store
            # and the next start requeues it.
            return
        try:
            result = future.result()
        except CancelledError:
            self._store_outcome(record, JobState.CANCELLED, error="cancelled")
        except Exception as exc:  # noqa: BLE001 - a broken problem or evaluator fault is this job's outcome
            self._store_outcome(record, JobState.FAILED, error=f"{type(exc).__name__}: {exc}")
        else:
            self._store_outcome(record, JobState.DONE, result=result)
        self._dispatch_now()

    def _store_outcome(self, record: JobRecord, state: JobState, *, result: EvalResult | None = None,
                       error: str | None = None) -> bool:
        """Store a job's outcome once (metrics, event-log line, waiters); False if it was final."""
        data = result.to_dict() if result is not None else None
        now = time.time()
        stored = self.store.finish(record.id, state, result=data, error=error, finished=now)
        final = dataclasses.replace(record, state=state, finished=now, result=data, error=error) if stored else None
        if stored:
            self.metrics.observe(state, result)
            # A claimed record already counts its run (store.claim_queued); a job cancelled in the
            # queue never ran: attempt 0.
            event = {"time": time.time(), "job": record.id, "api": record.api, "client": record.client,
                     "problem_hash": record.problem_hash, "state": state.value, "attempt": record.attempts,
                     "queued_s": round(time.time() - record.submitted, 4)}
            if data is not None:
                event["result"] = data
            if error is not None:
                event["error"] = error
            self.events.write(event)
        self.waiters.notify(record.id, final)
        return stored

    # -- introspection ---------------------------------------------------------------------
    def in_flight(self) -> int:
        with self._inflight_lock:
            return len(self._inflight)


def _on_cpu(device: str) -> bool:
    """Whether an evaluation on `device` (``auto``: CUDA when this process sees a GPU) runs on a CPU."""
    if device == "auto":
        import torch

        return not torch.cuda.is_available()
    return not device.startswith("cuda")


def build_options_checked(options: dict[str, Any], config: ServiceConfig) -> EvalOptions:
    """`build_options`, with an invalid option as a 422 naming it."""
    try:
        return build_options(options, config)
    except OptionsError as exc:
        raise ServiceError(422, f"invalid options: {exc}") from None


__all__ = ["FINAL_STATES", "EvaluationService", "JobSpec", "ServiceError", "build_options"]
