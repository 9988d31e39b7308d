"""`Client` and `AsyncClient`: the service from Python, with retries and streaming results.

    from tritongym.service import Client

    with Client("http://127.0.0.1:8000", token=os.environ.get("TRITONGYM_TOKEN")) as client:
        result = client.evaluate("builtin/07_softmax", solution_source)           # blocking, one
        for index, result in client.evaluate_many(requests):                      # as they finish
            ...
        job_ids = client.submit(requests); client.result(job_ids[0])             # submit now, fetch later

Problems are given as a `Problem`, the path of a problem file, a built-in id (``builtin/…``),
or ``{"hash": …}`` for one registered with `register_problems`. Every item carries an
idempotency key (a fresh one unless given), so a retried submission never runs twice.
Needs only httpx.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import httpx

from tritongym.errors import TritongymError

#: Statuses worth retrying: rate limited, or the server (or a proxy) briefly unavailable.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
_STREAM_CHUNK = 200  # ids per stream request (URL length stays well under server limits)
_SUBMIT_CHUNK = 256


class ServiceHTTPError(TritongymError):
    """The service refused a request (a 4xx/5xx after retries): `status_code` and its `detail`."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"HTTP {status_code}: {detail}")
        self.status_code = status_code
        self.detail = detail


class JobFailed(TritongymError):
    """A job ended without a verdict: its evaluation raised on the server (a broken problem, an
    evaluator fault), or it was cancelled. `state` and `job_id` say which."""

    def __init__(self, job_id: str, state: str, error: str | None) -> None:
        super().__init__(f"job {job_id} {state}: {error}")
        self.job_id = job_id
        self.state = state
        self.error = error


def problem_ref(problem: Any) -> dict[str, Any]:
    """The wire form of a problem argument."""
    from tritongym.tasks import Problem

    if isinstance(problem, Problem):
        return {"source": problem.source, "name": problem.name, "problem_id": problem.problem_id}
    if isinstance(problem, dict):
        return dict(problem)
    if isinstance(problem, str) and problem.startswith("builtin/") and not Path(problem).is_file():
        return {"builtin": problem}
    if isinstance(problem, (str, os.PathLike)):
        from tritongym.tasks import load_problem_file

        loaded = load_problem_file(problem)
        return {"source": loaded.source, "name": loaded.name, "problem_id": loaded.problem_id}
    raise TypeError(f"a problem is a Problem, a path, a builtin/... id or a dict, got {type(problem).__name__}")


def _solution_text(solution: Any) -> str:
    if isinstance(solution, os.PathLike):
        return Path(solution).read_text(encoding="utf-8")
    if isinstance(solution, str):
        return solution
    raise TypeError(f"a solution is source text or a Path, got {type(solution).__name__}")


def options_fields(options: Any = None, **overrides: Any) -> dict[str, Any]:
    """The option fields that differ from the defaults (the server applies its own sandbox)."""
    from tritongym.evaluator.options import EvalOptions

    if options is None:
        out: dict[str, Any] = {}
    elif isinstance(options, dict):
        out = dict(options)
    elif isinstance(options, EvalOptions):
        default = EvalOptions()
        out = {}
        for field in dataclass_fields(EvalOptions):
            value = getattr(options, field.name)
            if field.name == "sandbox" or value == getattr(default, field.name):
                continue
            if field.name == "reward":
                value = {f.name: getattr(value, f.name) for f in dataclass_fields(value)}
            elif isinstance(value, (frozenset, tuple)):
                value = sorted(value) if isinstance(value, frozenset) else list(value)
            out[field.name] = value
    else:
        raise TypeError(f"options are EvalOptions or a dict, got {type(options).__name__}")
    out.update(overrides)
    return out


def request_item(request: Any) -> dict[str, Any]:
    """An `EvalRequest`, a ``(problem, solution[, options])`` tuple or a ready dict → an item."""
    from tritongym.execution.requests import EvalRequest

    if isinstance(request, dict):
        item = dict(request)
    elif isinstance(request, EvalRequest):
        item = {"problem": problem_ref(request.problem), "solution": _solution_text(request.solution)}
        if request.options is not None:
            item["options"] = options_fields(request.options)
        if request.id is not None:
            item["idempotency_key"] = request.id
    elif isinstance(request, tuple) and 2 <= len(request) <= 3:
        item = {"problem": problem_ref(request[0]), "solution": _solution_text(request[1])}
        if len(request) == 3 and request[2] is not None:
            item["options"] = options_fields(request[2])
    else:
        raise TypeError(f"expected EvalRequest, (problem, solution[, options]) or dict, got {type(request).__name__}")
    item.setdefault("idempotency_key", uuid.uuid4().hex)
    return item


def _result_of(job: dict[str, Any]):
    from tritongym.evaluator.result import EvalResult

    if job.get("state") == "done" and job.get("result") is not None:
        return EvalResult.from_dict(job["result"])
    raise JobFailed(job.get("id", "?"), job.get("state", "?"), job.get("error"))


def _delay(attempt: int, backoff: float, response: httpx.Response | None) -> float:
    if response is not None:
        after = response.headers.get("retry-after")
        if after:
            try:
                return min(60.0, float(after))
            except ValueError:
                pass
    return min(30.0, backoff * (2 ** attempt)) * (0.5 + random.random() / 2)


def _raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        detail = response.json().get("detail")
    except (json.JSONDecodeError, ValueError, AttributeError):
        detail = response.text[:500]
    raise ServiceHTTPError(response.status_code, detail)


def _rotate(pending: list[str], chunk: list[str]) -> list[str]:
    """The still-pending ids of the chunk just streamed go to the back of the line."""
    streamed = set(chunk)
    return [i for i in pending if i not in streamed] + [i for i in pending if i in streamed]


def _headers(token: str | None, client_id: str | None) -> dict[str, str]:
    headers = {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if client_id:
        headers["X-Client-Id"] = client_id
    return headers


class Client:
    """Blocking client of a tritongym service.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000``.
        token: the bearer token (default: ``$TRITONGYM_TOKEN`` when set).
        timeout: seconds per HTTP exchange (blocking calls wait longer: see `evaluate`).
        retries: attempts after the first on connection errors and 429/502/503/504.
        backoff: first retry delay in seconds, doubled each time (with jitter; Retry-After wins).
        client_id: sent as ``X-Client-Id`` (the server's per-client limits count by it).
    """

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 60.0, retries: int = 5,
                 backoff: float = 0.25, client_id: str | None = None, transport: httpx.BaseTransport | None = None):
        token = token if token is not None else os.environ.get("TRITONGYM_TOKEN")
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                  headers=_headers(token, client_id))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            response = None
            try:
                if timeout is not None:
                    kwargs["timeout"] = timeout
                response = self._http.request(method, path, **kwargs)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
            else:
                if response.status_code not in RETRY_STATUSES or attempt == self.retries:
                    _raise_for(response)
                    return response
            time.sleep(_delay(attempt, self.backoff, response))
        raise AssertionError("unreachable")

    # -- calls -----------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._request("GET", "/readyz").json()

    def register_problems(self, problems: Iterable[Any]) -> list[str]:
        """Register problems once; returns their content hashes (use ``{"hash": h}`` afterwards)."""
        body = {"problems": [{k: v for k, v in problem_ref(p).items() if k in ("source", "name", "problem_id")}
                             for p in problems]}
        return [p["hash"] for p in self._request("POST", "/v1/problems", json=body).json()["problems"]]

    def submit(self, requests: Iterable[Any]) -> list[str]:
        """Queue evaluations; returns their job ids (in input order) once they are on disk."""
        items = [request_item(r) for r in requests]
        ids: list[str] = []
        for start in range(0, len(items), _SUBMIT_CHUNK):
            response = self._request("POST", "/v1/evaluations", json={"items": items[start:start + _SUBMIT_CHUNK]})
            ids.extend(job["id"] for job in response.json()["jobs"])
        return ids

    def job(self, job_id: str) -> dict[str, Any]:
        """The job as the server has it (state, result or error)."""
        return self._request("GET", f"/v1/evaluations/{job_id}").json()

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._request("DELETE", f"/v1/evaluations/{job_id}").json()

    def result(self, job_id: str, *, timeout: float | None = None):
        """Wait for a job's `EvalResult` (raises `JobFailed` if it ended without one)."""
        for _, job in self._stream([job_id], timeout):
            return _result_of(job)
        raise TimeoutError(f"job {job_id} did not finish within {timeout} s")

    def evaluate(self, problem: Any, solution: Any, options: Any = None, *, timeout: float | None = None,
                 **overrides: Any):
        """Evaluate one solution on the server and return its `EvalResult`."""
        item = request_item((problem, solution, options_fields(options, **overrides) or None))
        params = {"timeout": timeout} if timeout else {}
        response = self._request("POST", "/v1/evaluate", json=item, params=params,
                                 timeout=(timeout or 24 * 3600.0) + 30.0)
        job = response.json()
        if response.status_code == 202:
            return self.result(job["id"], timeout=timeout)
        return _result_of(job)

    def evaluate_many(self, requests: Iterable[Any], *, timeout: float | None = None,
                      return_exceptions: bool = False) -> Iterator[tuple[int, Any]]:
        """Submit all, then yield ``(index, EvalResult)`` as each finishes (not in input order).

        A job that ended without a verdict raises `JobFailed`, or with `return_exceptions`
        yields it in the result's place."""
        ids = self.submit(requests)
        index = {job_id: i for i, job_id in enumerate(ids)}
        for job_id, job in self._stream(ids, timeout):
            try:
                yield index[job_id], _result_of(job)
            except JobFailed as exc:
                if not return_exceptions:
                    raise
                yield index[job_id], exc

    def _stream(self, ids: Sequence[str], timeout: float | None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Finished jobs of `ids` as they finish, reconnecting (and cycling through chunks of
        ids) until all are final or `timeout` passes."""
        pending = list(dict.fromkeys(ids))
        deadline = time.monotonic() + timeout if timeout else None
        failures = 0
        while pending:
            left = deadline - time.monotonic() if deadline else 24 * 3600.0
            if left <= 0:
                return
            chunk = pending[:_STREAM_CHUNK]
            # With more ids than one stream carries, cycle through the chunks every few seconds.
            window = min(left, 3.0 if len(pending) > len(chunk) else left)
            params = {"ids": ",".join(chunk), "timeout": max(0.05, window)}
            try:
                with self._http.stream("GET", "/v1/evaluations/stream", params=params,
                                       timeout=httpx.Timeout(self._http.timeout.connect, read=window + 30.0)) as r:
                    if r.status_code >= 400:
                        r.read()
                        if r.status_code not in RETRY_STATUSES:
                            _raise_for(r)
                        raise httpx.TransportError(f"HTTP {r.status_code}")
                    for line in r.iter_lines():
                        if not line.strip():
                            continue
                        job = json.loads(line)
                        if job.get("event") == "timeout":
                            break
                        pending.remove(job["id"])
                        failures = 0
                        yield job["id"], job
            except httpx.TransportError:
                failures += 1
                if failures > self.retries:
                    raise
                time.sleep(_delay(failures - 1, self.backoff, None))
                continue
            pending = _rotate(pending, chunk)


class AsyncClient:
    """The `Client`'s async twin (same arguments, same methods, awaited; `evaluate_many` is an
    async iterator)."""

    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 60.0, retries: int = 5,
                 backoff: float = 0.25, client_id: str | None = None,
                 transport: httpx.AsyncBaseTransport | None = None):
        token = token if token is not None else os.environ.get("TRITONGYM_TOKEN")
        self.retries = retries
        self.backoff = backoff
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), timeout=timeout, transport=transport,
                                       headers=_headers(token, client_id))

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(self, method: str, path: str, *, timeout: float | None = None,
                       **kwargs: Any) -> httpx.Response:
        for attempt in range(self.retries + 1):
            response = None
            try:
                if timeout is not None:
                    kwargs["timeout"] = timeout
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError:
                if attempt == self.retries:
                    raise
            else:
                if response.status_code not in RETRY_STATUSES or attempt == self.retries:
                    _raise_for(response)
                    return response
            await asyncio.sleep(_delay(attempt, self.backoff, response))
        raise AssertionError("unreachable")

    async def health(self) -> dict[str, Any]:
        return (await self._request("GET", "/readyz")).json()

    async def register_problems(self, problems: Iterable[Any]) -> list[str]:
        body = {"problems": [{k: v for k, v in problem_ref(p).items() if k in ("source", "name", "problem_id")}
                             for p in problems]}
        return [p["hash"] for p in (await self._request("POST", "/v1/problems", json=body)).json()["problems"]]

    async def submit(self, requests: Iterable[Any]) -> list[str]:
        items = [request_item(r) for r in requests]
        ids: list[str] = []
        for start in range(0, len(items), _SUBMIT_CHUNK):
            response = await self._request("POST", "/v1/evaluations",
                                           json={"items": items[start:start + _SUBMIT_CHUNK]})
            ids.extend(job["id"] for job in response.json()["jobs"])
        return ids

    async def job(self, job_id: str) -> dict[str, Any]:
        return (await self._request("GET", f"/v1/evaluations/{job_id}")).json()

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return (await self._request("DELETE", f"/v1/evaluations/{job_id}")).json()

    async def result(self, job_id: str, *, timeout: float | None = None):
        async for _, job in self._stream([job_id], timeout):
            return _result_of(job)
        raise TimeoutError(f"job {job_id} did not finish within {timeout} s")

    async def evaluate(self, problem: Any, solution: Any, options: Any = None, *, timeout: float | None = None,
                       **overrides: Any):
        item = request_item((problem, solution, options_fields(options, **overrides) or None))
        params = {"timeout": timeout} if timeout else {}
        response = await self._request("POST", "/v1/evaluate", json=item, params=params,
                                       timeout=(timeout or 24 * 3600.0) + 30.0)
        job = response.json()
        if response.status_code == 202:
            return await self.result(job["id"], timeout=timeout)
        return _result_of(job)

    async def evaluate_many(self, requests: Iterable[Any], *, timeout: float | None = None,
                            return_exceptions: bool = False) -> AsyncIterator[tuple[int, Any]]:
        ids = await self.submit(requests)
        index = {job_id: i for i, job_id in enumerate(ids)}
        async for job_id, job in self._stream(ids, timeout):
            try:
                yield index[job_id], _result_of(job)
            except JobFailed as exc:
                if not return_exceptions:
                    raise
                yield index[job_id], exc

    async def _stream(self, ids: Sequence[str], timeout: float | None) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        pending = list(dict.fromkeys(ids))
        deadline = time.monotonic() + timeout if timeout else None
        failures = 0
        while pending:
            left = deadline - time.monotonic() if deadline else 24 * 3600.0
            if left <= 0:
                return
            chunk = pending[:_STREAM_CHUNK]
            window = min(left, 3.0 if len(pending) > len(chunk) else left)
            params = {"ids": ",".join(chunk), "timeout": max(0.05, window)}
            try:
                async with self._http.stream("GET", "/v1/evaluations/stream", params=params,
                                             timeout=httpx.Timeout(self._http.timeout.connect,
                                                                   read=window + 30.0)) as r:
                    if r.status_code >= 400:
                        await r.aread()
                        if r.status_code not in RETRY_STATUSES:
                            _raise_for(r)
                        raise httpx.TransportError(f"HTTP {r.status_code}")
                    async for line in r.aiter_lines():
                        if not line.strip():
                            continue
                        job = json.loads(line)
                        if job.get("event") == "timeout":
                            break
                        pending.remove(job["id"])
                        failures = 0
                        yield job["id"], job
            except httpx.TransportError:
                failures += 1
                if failures > self.retries:
                    raise
                await asyncio.sleep(_delay(failures - 1, self.backoff, None))
                continue
            pending = _rotate(pending, chunk)
