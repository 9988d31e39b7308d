"""A small client for OpenAI-compatible chat endpoints (vLLM, SGLang, hosted APIs), on httpx.

One request per reply, with a per-request timeout and retries with exponential backoff and
jitter on what is worth retrying: timeouts, connection errors, 408/409/429 and 5xx (honouring a
numeric ``Retry-After``). Other 4xx responses are the caller's mistake and fail at once.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})


class ChatError(RuntimeError):
    """The endpoint did not produce a reply (after retries, or a non-retryable error)."""


class ContextLengthError(ChatError):
    """The prompt (plus max_tokens) exceeds the model's context: the trajectory cannot go on."""


# How vLLM, SGLang and OpenAI word a 400 for an over-long prompt.
_CONTEXT_MARKERS = ("context length", "context_length", "maximum context", "context window", "prompt is too long",
                    "too many tokens")


@dataclass
class ChatReply:
    """One completion: the text, optional separate reasoning, token usage and request statistics."""

    content: str
    reasoning: str | None = None
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    attempts: int = 1
    wall_s: float = 0.0


class ChatClient:
    """``await client.complete(messages, temperature=1.0, max_tokens=8192)`` → `ChatReply`.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the model name the endpoint serves.
        api_key: sent as a bearer token when given.
        timeout: seconds for one request (connect, read and write each).
        max_retries: retries after the first attempt.
        backoff: first retry delay in seconds; doubled each retry, with ±25 % jitter, capped at
            `max_backoff`.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 600.0,
                 max_retries: int = 4, backoff: float = 1.0, max_backoff: float = 30.0) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout), headers=headers)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(float(retry_after), self.max_backoff)
            except ValueError:
                pass
        base = min(self.backoff * 2 ** attempt, self.max_backoff)
        return base * random.uniform(0.75, 1.25)

    async def complete(self, messages: list[dict[str, str]], **sampling: Any) -> ChatReply:
        payload = {"model": self.model, "messages": messages,
                   **{k: v for k, v in sampling.items() if v is not None}}
        started = time.monotonic()
        last_error = "no attempt made"
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                response = await self._client.post(self.url, json=payload)
            except httpx.TimeoutException as exc:
                last_error = f"timed out ({type(exc).__name__})"
            except httpx.TransportError as exc:
                last_error = f"connection failed: {exc}"
            else:
                if response.status_code == 200:
                    return self._parse(response, attempt + 1, time.monotonic() - started)
                last_error = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code == 400 and any(m in response.text.lower() for m in _CONTEXT_MARKERS):
                    raise ContextLengthError(f"{self.url}: {last_error}")
                if response.status_code not in RETRY_STATUSES:
                    raise ChatError(f"{self.url}: {last_error}")
                retry_after = response.headers.get("retry-after")
            if attempt < self.max_retries:
                await asyncio.sleep(self._delay(attempt, retry_after))
        raise ChatError(f"{self.url}: no reply after {self.max_retries + 1} attempts; last: {last_error}")

    def _parse(self, response: httpx.Response, attempts: int, wall_s: float) -> ChatReply:
        try:
            data = response.json()
            choice = data["choices"][0]
            message = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ChatError(f"{self.url}: malformed chat completion ({exc!r}): {response.text[:300]}") from None
        usage = {k: int(v) for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        return ChatReply(content=message.get("content") or "",
                         reasoning=reasoning if isinstance(reasoning, str) else None,
                         finish_reason=choice.get("finish_reason"), usage=usage, attempts=attempts, wall_s=wall_s)
