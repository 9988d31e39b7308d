"""The FastAPI app: the native ``/v1`` API, KernelGYM's API, health, metrics and a status page.

    app = create_app(ServiceConfig(db_path="jobs.db", workers=2))
    uvicorn.run(app, host="127.0.0.1", port=8000)

Every route but the health probes needs the bearer token when one is configured, checked before
the body is read (`TokenGuard`). Refusals are 4xx with a reason in ``detail``: 400 malformed JSON,
401 token, 404 unknown job, 409 reused idempotency key, 413 too large, 422 invalid request or
malformed problem, 429 too many jobs.
"""

from __future__ import annotations

import hmac
import html
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST

from tritongym.service import kernelgym as kg
from tritongym.service.config import ServiceConfig
from tritongym.service.core import EvaluationService, JobSpec, ServiceError, check_text
from tritongym.service.models import (
    BatchRequest,
    BatchResponse,
    ErrorBody,
    EvaluationItem,
    Health,
    JobList,
    JobView,
    ProblemList,
    ProblemsIn,
    ProblemView,
    SubmittedJob,
    job_view_dict,
)
from tritongym.service.store import JobRecord, JobState

_ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": ErrorBody} for code in (400, 401, 404, 409, 413, 422, 429)}
_MAX_IDS = 1000
#: Routes that answer without the token (liveness and readiness probes).
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/health"})
#: KernelGYM's task ids are stored as idempotency keys under this prefix; /v1 keys may not use it,
#: so a key of one API never names a job of the other.
KERNELGYM_KEY_PREFIX = "kernelgym:"


class TokenGuard:
    """Refuse every request but the probes without the bearer token, before anything else runs:
    a body is neither read nor parsed (no 400 or 413 for a caller without the token), and
    ``/docs`` and ``/openapi.json`` are closed too."""

    def __init__(self, app: Any, token: str | None) -> None:
        self.app = app
        self.expected = token.encode() if token else None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.expected is None or scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = next((value for name, value in scope.get("headers", []) if name == b"authorization"), b"")
        scheme, _, credentials = given.partition(b" ")
        # The scheme is case-insensitive (RFC 7235); the token is compared in constant time.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(credentials.strip(), self.expected):
            response = JSONResponse({"detail": "missing or wrong bearer token (send 'Authorization: Bearer <token>')"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class RequestCounter:
    """``tritongym_http_requests{route, code}``: one count per answered request, by route template
    (``/v1/evaluations/{job_id}``, never the raw path: bounded label values)."""

    def __init__(self, app: Any, counter: Any) -> None:
        self.app = app
        self.counter = counter

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def recording(message: Any) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, recording)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None)
            if path is None:
                path = scope.get("path") if scope.get("path") in OPEN_PATHS else "(other)"
            self.counter.labels(route=path, code=str(status["code"])).inc()


class _BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body larger than {limit} bytes")


class BodyLimit:
    """Refuse bodies over `limit` bytes with 413: by Content-Length up front, else while reading."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    too_large = int(value) > self.limit
                except ValueError:
                    too_large = False
                if too_large:
                    response = JSONResponse({"detail": f"request body larger than {self.limit} bytes"},
                                            status_code=413)
                    await response(scope, receive, send)
                    return
        received = 0

        async def limited() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited, send)


def _client_id(request: Request) -> str:
    """Who the per-client limit counts against: the ``X-Client-Id`` header, else the peer address."""
    given = request.headers.get("x-client-id")
    if given:
        return given[:100]
    return request.client.host if request.client else "unknown"


def create_app(config: ServiceConfig, *, service: EvaluationService | None = None,
               on_started: Callable[[], None] | None = None, on_stopping: Callable[[], None] | None = None) -> FastAPI:
    """The service's ASGI app. It starts the `EvaluationService` (store, pool, dispatcher) on
    startup and stops it on shutdown; pass `service` to share one (tests, embedding).

    `on_started` runs once the service is up, `on_stopping` when the app shuts down (``tritongym
    serve`` records and removes its local-server record there: uvicorn re-raises a SIGTERM after
    its shutdown, so code after ``uvicorn.run`` never runs)."""
    own = service is None
    svc = service or EvaluationService(config)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if own:
            await run_in_threadpool(svc.start)
        if on_started is not None:
            on_started()
        try:
            yield
        finally:
            if on_stopping is not None:
                on_stopping()
            if own:
                await run_in_threadpool(svc.stop)

    app = FastAPI(
        title="tritongym evaluation service",
        version="1",
        description="Durable, sandboxed evaluation of Triton kernels: a native /v1 API and a KernelGYM-compatible "
                    "API. See docs/service.md.",
        lifespan=lifespan,
        # FastAPI's Swagger/ReDoc pages load their scripts from a CDN; /docs here is a plain page.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = svc
    # Added last runs first: the count wraps everything, then the token, then the body limit.
    app.add_middleware(BodyLimit, limit=config.max_body_bytes)
    app.add_middleware(TokenGuard, token=config.token)
    app.add_middleware(RequestCounter, counter=svc.metrics.requests)
    bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer <token>, when the server has one")

    # A default, not Annotated[...]: the annotation is a string here and `bearer` a local name.
    def require_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        if config.token is None:
            return
        if credentials is None or not hmac.compare_digest(credentials.credentials.encode(), config.token.encode()):
            raise HTTPException(401, "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
                                headers={"WWW-Authenticate": "Bearer"})

    auth = [Depends(require_token)]

    @app.exception_handler(ServiceError)
    async def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            reason = next(e for e in errors if e.get("type") == "json_invalid")
            return JSONResponse({"detail": f"malformed JSON: {reason.get('ctx', {}).get('error', 'invalid')} "
                                           f"at {list(reason.get('loc', []))}"}, status_code=400)
        detail = [{"loc": list(e.get("loc", [])), "msg": str(e.get("msg")), "type": str(e.get("type"))}
                  for e in errors]
        return JSONResponse({"detail": detail}, status_code=422)

    # -- items → jobs ----------------------------------------------------------------------
    def spec_of(item: EvaluationItem) -> JobSpec:
        ref = item.problem
        if ref.source is not None:
            problem = svc.problem_from_source(ref.source, ref.name, ref.problem_id)
        elif ref.builtin is not None:
            problem = svc.problem_by_builtin(ref.builtin)
        else:
            problem = svc.problem_by_hash(str(ref.hash))
        options = item.options.fields() if item.options is not None else {}
        problem = svc.problem_at_size(problem, ref.size, options)
        if item.idempotency_key is not None and item.idempotency_key.startswith(KERNELGYM_KEY_PREFIX):
            raise ServiceError(422, f"idempotency keys starting with {KERNELGYM_KEY_PREFIX!r} are reserved for "
                                    "KernelGYM's task ids; choose another key")
        return JobSpec(problem_hash=problem.content_hash, solution=svc.check_solution(item.solution),
                       options=options, idempotency_key=item.idempotency_key)

    def submit_items(items: list[EvaluationItem], client: str) -> list[tuple[JobRecord, bool]]:
        if len(items) > config.max_batch:
            raise ServiceError(422, f"a batch holds at most {config.max_batch} items, got {len(items)}")
        return svc.submit([spec_of(item) for item in items], client=client)

    def ids_param(ids: list[str]) -> list[str]:
        out = [part for value in ids for part in value.split(",") if part]
        if not out:
            raise ServiceError(422, "give at least one job id (ids=a,b or ids=a&ids=b)")
        if len(out) > _MAX_IDS:
            raise ServiceError(422, f"at most {_MAX_IDS} ids per request")
        return out

    # -- health ----------------------------------------------------------------------------
    @app.get("/healthz", response_model=Health, tags=["health"])
    def healthz() -> Health:
        """Liveness: the process answers."""
        return Health(status="ok", uptime_s=time.time() - svc.started_at)

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    def readyz() -> Any:
        """Readiness: the store is open and the pool accepts jobs."""
        pool = svc.pool
        if not svc.ready or pool is None:
            return JSONResponse(Health(status="starting", uptime_s=time.time() - svc.started_at).model_dump(),
                                status_code=503)
        stats = pool.stats()
        return Health(status="ready", uptime_s=time.time() - svc.started_at, workers=stats.slots,
                      sandbox=str(stats.sandbox))

    # -- native API ------------------------------------------------------------------------
    @app.post("/v1/evaluations", status_code=202, response_model=BatchResponse, responses=_ERRORS,
              dependencies=auth, tags=["evaluations"])
    def submit_evaluations(batch: BatchRequest, request: Request) -> BatchResponse:
        """Queue a batch; every job is on disk before this answers. Results: GET by id, or stream."""
        out = submit_items(batch.items, _client_id(request))
        return BatchResponse(jobs=[SubmittedJob(index=i, id=r.id, state=r.state.value, created=created,
                                                idempotency_key=r.idempotency_key)
                                   for i, (r, created) in enumerate(out)])

    @app.get("/v1/evaluations", response_model=JobList, responses=_ERRORS, dependencies=auth, tags=["evaluations"])
    def list_evaluations(ids: Annotated[list[str], Query(max_length=_MAX_IDS)]) -> JobList:
        """Jobs by id (``ids=a,b`` or repeated ``ids``); unknown ids are listed under ``missing``."""
        wanted = ids_param(ids)
        found = svc.store.get_many(wanted)
        return JobList(jobs=[JobView.of(found[i]) for i in dict.fromkeys(wanted) if i in found],
                       missing=[i for i in dict.fromkeys(wanted) if i not in found])

    @app.get("/v1/evaluations/stream", responses={**_ERRORS, 200: {"content": {"application/x-ndjson": {},
                                                                           "text/event-stream": {}}}},
             dependencies=auth, tags=["evaluations"], response_class=StreamingResponse)
    async def stream_evaluations(ids: Annotated[list[str], Query(max_length=_MAX_IDS)],
                                 format: Annotated[str, Query(pattern="^(jsonl|sse)$")] = "jsonl",  # noqa: A002
                                 timeout: Annotated[float, Query(gt=0, le=86400)] = 3600.0) -> StreamingResponse:
        """Each job as it finishes (already finished ones first): JSON lines, or server-sent
        events (``format=sse``). Ends when all are final, or with a ``timeout`` line/event."""
        wanted = list(dict.fromkeys(ids_param(ids)))
        known = await run_in_threadpool(svc.store.get_many, wanted)
        missing = [i for i in wanted if i not in known]
        if missing:
            raise ServiceError(404, f"unknown job ids: {', '.join(missing[:20])}")
        sse = format == "sse"

        def frame(kind: str, payload: dict[str, Any], job_id: str | None = None) -> str:
            data = json.dumps(payload)
            if sse:
                return f"event: {kind}\n" + (f"id: {job_id}\n" if job_id else "") + f"data: {data}\n\n"
            return data + "\n"

        async def events() -> AsyncIterator[str]:
            pending = list(wanted)
            deadline = time.monotonic() + timeout
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    yield frame("timeout", {"event": "timeout", "pending": pending})
                    return
                done = await svc.next_final(pending, timeout=min(left, 15.0))
                if not done:
                    if sse:
                        yield ": keep-alive\n\n"
                    continue
                finished = {r.id for r in done}
                pending = [i for i in pending if i not in finished]
                for record in done:
                    # A plain dict (JobView's fields): no validation pass over a large result per line.
                    yield frame("result", job_view_dict(record), record.id)
            if sse:
                yield frame("end", {"event": "end"})

        media = "text/event-stream" if sse else "application/x-ndjson"
        return StreamingResponse(events(), media_type=media, headers={"Cache-Control": "no-cache"})

    @app.get("/v1/evaluations/{job_id}", response_model=JobView, responses=_ERRORS, dependencies=auth,
             tags=["evaluations"])
    def get_evaluation(job_id: str) -> JobView:
        """One job: its state, and the EvalResult when done."""
        record = svc.get(job_id)
        if record is None:
            raise ServiceError(404, f"no job {job_id!r} (unknown, or pruned after its retention time)")
        return JobView.of(record)

    @app.delete("/v1/evaluations/{job_id}", response_model=JobView, responses=_ERRORS, dependencies=auth,
                tags=["evaluations"])
    def cancel_evaluation(job_id: str) -> JobView:
        """Cancel a queued or running job (a running candidate is killed); a finished one is unchanged."""
        record = svc.cancel(job_id)
        if record is None:
            raise ServiceError(404, f"no job {job_id!r}")
        return JobView.of(record)

    @app.post("/v1/evaluate", response_model=JobView, responses={**_ERRORS, 202: {"model": JobView}},
              dependencies=auth, tags=["evaluations"])
    async def evaluate_blocking(item: EvaluationItem, request: Request,
                                timeout: Annotated[float | None, Query(gt=0, le=86400)] = None) -> Any:
        """Evaluate one request and answer with the finished job (202 with the job if `timeout`
        passes first; it keeps running and can be fetched by id)."""
        out = await run_in_threadpool(submit_items, [item], _client_id(request))
        job_id = out[0][0].id
        final = await svc.wait_final([job_id], timeout or config.wait_timeout_s)
        record = final.get(job_id) or await run_in_threadpool(svc.get, job_id)
        if record is None:
            raise ServiceError(404, f"job {job_id} was pruned")
        view = JobView.of(record)
        return view if record.final else JSONResponse(view.model_dump(), status_code=202)

    @app.post("/v1/problems", status_code=201, response_model=ProblemList, responses=_ERRORS, dependencies=auth,
              tags=["problems"])
    def register_problems(body: ProblemsIn) -> ProblemList:
        """Register problems once; refer to them by ``hash`` afterwards. A malformed problem is a
        422 with the loader's message (nothing of the batch is registered)."""
        if len(body.problems) > config.max_batch:
            raise ServiceError(422, f"register at most {config.max_batch} problems per request, got "
                                    f"{len(body.problems)}")
        parsed = [svc.problem_from_source(p.source, p.name, p.problem_id, registered=False) for p in body.problems]
        for problem in parsed:
            svc.store_problem(problem, registered=True)
        # The store keeps at most max_problems registrations (the oldest unused ones go first).
        svc.prune_problems()
        return ProblemList(problems=[ProblemView(hash=p.content_hash, name=p.name, problem_id=p.problem_id,
                                                 level=p.level) for p in parsed])

    @app.get("/v1/problems", response_model=ProblemList, responses=_ERRORS, dependencies=auth, tags=["problems"])
    def list_problems(hash: Annotated[list[str] | None, Query(max_length=_MAX_IDS)] = None,  # noqa: A002
                      limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                      offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0) -> ProblemList:
        """Registered problems (all, or those with the given hashes)."""
        wanted = [part for value in hash for part in value.split(",") if part] if hash else None
        rows = svc.store.list_problems(wanted, limit=limit, offset=offset)
        return ProblemList(problems=[ProblemView(hash=p.hash, name=p.name, problem_id=p.problem_id, level=p.level)
                                     for p in rows])

    # -- KernelGYM-compatible API ----------------------------------------------------------
    def kg_submit(request: kg.KernelGymRequest, client: str) -> JobRecord:
        if request.backend.lower() != "triton":
            raise ServiceError(422, f"backend {request.backend!r} is not evaluated here: tritongym evaluates "
                                    "Triton kernels (backend 'triton')")
        if request.entry_point != "Model":
            raise ServiceError(422, f"entry_point {request.entry_point!r} is not supported: the problem must "
                                    "define Model and the candidate ModelNew")
        if not request.reference_code:
            raise ServiceError(422, "reference_code is required (the problem: Model, get_inputs, get_init_inputs)")
        check_text("task_id", request.task_id)
        key = f"{KERNELGYM_KEY_PREFIX}{request.task_id}"
        existing = svc.store.get_by_key(key)
        if existing is not None and existing.api != "kernelgym":
            raise ServiceError(409, f"task_id {request.task_id!r} names a job of another API; choose another task_id")
        if existing is not None:
            if not request.force_refresh or not existing.final:
                return existing  # KernelGYM: a known task_id answers with its stored result
            svc.replace_final(existing)
        options = kg.options_from(request)
        problem = svc.problem_at_size(svc.problem_from_source(request.reference_code), request.size, options)
        spec = JobSpec(problem_hash=problem.content_hash, solution=svc.check_solution(request.kernel_code),
                       options=options, idempotency_key=key, extra={"task_id": request.task_id})
        return svc.submit([spec], client=client, api="kernelgym")[0][0]

    @app.post("/evaluate", response_model=kg.KernelGymResponse, responses=_ERRORS, dependencies=auth,
              tags=["kernelgym"])
    async def kernelgym_evaluate(body: kg.KernelGymRequest, request: Request) -> kg.KernelGymResponse:
        """KernelGYM's ``/evaluate``: held until the evaluation finishes (the job is durable meanwhile)."""
        record = await run_in_threadpool(kg_submit, body, _client_id(request))
        final = await svc.wait_final([record.id], config.wait_timeout_s)
        record = final.get(record.id) or record
        return kg.to_kernelgym(record, body.task_id)

    @app.post("/evaluate/batch", responses=_ERRORS, dependencies=auth, tags=["kernelgym"])
    async def kernelgym_batch(body: kg.KernelGymBatch, request: Request) -> dict[str, Any]:
        """KernelGYM's ``/evaluate/batch``, but run concurrently; a task refused on its own is a
        failed entry with ``VALIDATION_ERROR`` (the rest of the batch runs)."""
        if len(body.tasks) > config.max_batch:
            raise ServiceError(422, f"a batch holds at most {config.max_batch} tasks, got {len(body.tasks)}")
        submitted = time.time()
        client = _client_id(request)
        records: list[JobRecord | ServiceError] = []
        for task in body.tasks:
            try:
                records.append(await run_in_threadpool(kg_submit, task, client))
            except ServiceError as exc:
                if exc.status_code in (401, 429):
                    raise
                records.append(exc)
        ids = [r.id for r in records if isinstance(r, JobRecord)]
        final = await svc.wait_final(ids, config.wait_timeout_s) if ids else {}
        results = []
        for task, record in zip(body.tasks, records, strict=True):
            if isinstance(record, ServiceError):
                results.append(kg.KernelGymResponse(task_id=task.task_id, status="failed",
                                                    error_message=record.message,
                                                    error_code=kg.VALIDATION_ERROR).model_dump())
            else:
                results.append(kg.to_kernelgym(final.get(record.id, record), task.task_id).model_dump())
        completed = sum(r["status"] == "completed" for r in results)
        return {"batch_id": body.batch_id or f"batch-{int(submitted * 1000)}", "total_tasks": len(results),
                "completed_tasks": completed, "failed_tasks": len(results) - completed, "results": results,
                "batch_status": "completed", "submitted_at": kg._iso(submitted)}

    def kg_record(task_id: str) -> JobRecord:
        record = svc.store.get_by_key(f"{KERNELGYM_KEY_PREFIX}{check_text('task_id', task_id)}")
        if record is None or record.api != "kernelgym":
            raise ServiceError(404, f"Task {task_id} not found")
        return record

    @app.get("/status/{task_id}", response_model=kg.KernelGymStatus, responses=_ERRORS, dependencies=auth,
             tags=["kernelgym"])
    def kernelgym_status(task_id: str) -> kg.KernelGymStatus:
        record = kg_record(task_id)
        # Dr.Kernel's client reads a failed task's reason from the status alone.
        reason = record.error or ((record.result or {}).get("error") if kg.status_of(record) == "failed" else None)
        return kg.KernelGymStatus(task_id=task_id, status=kg.status_of(record),
                                  progress=1.0 if record.final else 0.0, error_message=reason)

    @app.get("/results/{task_id}", response_model=kg.KernelGymResponse,
             responses={**_ERRORS, 202: {"model": kg.KernelGymResponse}}, dependencies=auth, tags=["kernelgym"])
    def kernelgym_results(task_id: str) -> Any:
        """The result (202 with status pending/processing while it runs)."""
        record = kg_record(task_id)
        response = kg.to_kernelgym(record, task_id)
        return response if record.final else JSONResponse(response.model_dump(), status_code=202)

    @app.delete("/tasks/{task_id}", response_model=kg.KernelGymStatus, responses=_ERRORS, dependencies=auth,
                tags=["kernelgym"])
    def kernelgym_cancel(task_id: str) -> kg.KernelGymStatus:
        record = svc.cancel(kg_record(task_id).id) or kg_record(task_id)
        return kg.KernelGymStatus(task_id=task_id, status=kg.status_of(record), error_message=record.error)

    @app.get("/health", tags=["kernelgym"])
    def kernelgym_health() -> dict[str, Any]:
        """KernelGYM's ``/health``, with real numbers."""
        counts = svc.store.count_by_state()
        stats = svc.pool.stats() if svc.pool is not None else None
        return {"status": "healthy" if svc.ready else "starting", "timestamp": kg._iso(time.time()),
                "queue_status": {"pending": counts["queued"], "processing": counts["running"]},
                "active_tasks": stats.busy if stats else 0,
                "total_processed": counts["done"] + counts["failed"],
                "uptime": time.time() - svc.started_at}

    # -- observability ---------------------------------------------------------------------
    @app.get("/metrics", response_class=PlainTextResponse, dependencies=auth, tags=["observability"])
    def metrics() -> Response:
        """Prometheus text format."""
        return Response(svc.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse, dependencies=auth, tags=["observability"])
    def status_page() -> HTMLResponse:
        """A plain HTML status page (no scripts, no external assets)."""
        return HTMLResponse(_status_html(svc))

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False, dependencies=auth)
    def docs_page() -> HTMLResponse:
        return HTMLResponse(_docs_html(app.openapi()))

    return app


_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:72em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.2em .6em;text-align:left}}code{{background:#f4f4f4}}</style></head>
<body>{body}</body></html>"""


def _table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _status_html(svc: EvaluationService) -> str:
    stats = svc.pool.stats() if svc.pool is not None else None
    counts = svc.store.count_by_state()
    now = time.time()
    per_minute = svc.store.finished_since(now - 60)
    recent = svc.store.recent_final(25)
    verdicts: dict[str, int] = {}
    for record in svc.store.recent_final(500):
        key = str(record.result.get("status")) if record.result else record.state.value
        verdicts[key] = verdicts.get(key, 0) + 1
    parts = [f"<h1>tritongym evaluation service</h1><p>up {now - svc.started_at:.0f} s; "
             f"{svc.requeued_at_start} job(s) requeued at start</p>", "<h2>Workers</h2>"]
    if stats is not None:
        parts.append(_table(["slots", "busy", "pool queue", "completed", "failed", "restarts", "sandbox", "launcher"],
                            [[stats.slots, stats.busy, stats.queued, stats.completed, stats.failed, stats.restarts,
                              stats.sandbox, stats.launcher]]))
    parts.append("<h2>Jobs</h2>" + _table(["state", "jobs"], [[k, v] for k, v in counts.items()]))
    parts.append(f"<p>throughput: {per_minute} evaluations in the last minute</p>")
    parts.append("<h2>Verdict mix (last 500)</h2>" + _table(["verdict", "count"], sorted(
        ([k, v] for k, v in verdicts.items()), key=lambda kv: -kv[1])))
    rows = []
    for record in recent:
        result = record.result or {}
        codes = ", ".join(str(v.get("code")) for v in result.get("violations") or [])
        rows.append([time.strftime("%H:%M:%S", time.gmtime(record.finished or 0)), record.id[:12],
                     result.get("problem_id") or record.problem_hash[:12], result.get("status") or record.state.value,
                     f"{float(result.get('reward') or 0.0):.3f}", codes, f"{float(result.get('duration_s') or 0):.2f}"])
    parts.append("<h2>Last evaluations</h2>" + _table(["finished (UTC)", "job", "problem", "verdict", "reward",
                                                       "violations", "seconds"], rows))
    parts.append('<p><a href="/metrics">metrics</a> · <a href="/docs">API</a> · '
                 '<a href="/openapi.json">OpenAPI schema</a></p>')
    return _PAGE.format(title="tritongym service", body="".join(parts))


def _docs_html(schema: dict[str, Any]) -> str:
    rows = []
    for path, operations in sorted(schema.get("paths", {}).items()):
        for method, operation in operations.items():
            summary = operation.get("description") or operation.get("summary") or ""
            rows.append([method.upper(), path, summary.strip().splitlines()[0] if summary.strip() else ""])
    body = ("<h1>tritongym service API</h1><p>The machine-readable schema is "
            '<a href="/openapi.json">/openapi.json</a>; docs/service.md has the guide.</p>'
            + _table(["method", "path", "what"], rows))
    return _PAGE.format(title="tritongym service API", body=body)


__all__ = ["BodyLimit", "JobState", "create_app"]
