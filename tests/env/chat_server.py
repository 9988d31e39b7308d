"""A scripted OpenAI-compatible chat server on loopback (stdlib `http.server` in a thread).

Replies are scripted per (problem, turn): the problem is read from the task message ("Task
builtin/02_leaky_relu: ..."), the turn is the number of assistant messages in the request. Each
(problem, turn) has a list of responses served in order (retries move down the list; the last
one repeats). Every request is logged for assertions.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TASK = re.compile(r"Task (\S+?):")


@dataclass
class Reply:
    content: str = ""
    status: int = 200
    delay: float = 0.0


class ScriptedChatServer:
    def __init__(self, script: dict[str, list[list[Reply]]]) -> None:
        self.script = script
        self.log: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._served: dict[tuple[str, int], int] = {}
        self._stop = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                reply = server._next(body)
                if reply.delay:
                    server._stop.wait(reply.delay)
                if reply.status != 200:
                    payload = json.dumps({"error": {"message": reply.content or "scripted failure"}}).encode()
                else:
                    payload = json.dumps({
                        "id": "chatcmpl-test", "object": "chat.completion", "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": reply.content}}],
                        "usage": {"prompt_tokens": sum(len(m["content"]) for m in body["messages"]) // 4,
                                  "completion_tokens": len(reply.content) // 4,
                                  "total_tokens": 0},
                    }).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout) or was killed

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _next(self, body: dict[str, Any]) -> Reply:
        messages = body["messages"]
        problem = _TASK.search(messages[1]["content"]).group(1).rsplit("/", 1)[-1]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        with self._lock:
            count = self._served.get((problem, turn), 0)
            self._served[(problem, turn)] = count + 1
            replies = self.script[problem][turn]
            reply = replies[min(count, len(replies) - 1)]
            self.log.append({"problem": problem, "turn": turn, "messages": messages, "status": reply.status,
                             "delay": reply.delay, "sampling": {k: body.get(k) for k in ("temperature", "max_tokens")}})
        return reply

    def requests(self, problem: str, turn: int) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry in self.log if entry["problem"] == problem and entry["turn"] == turn]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
