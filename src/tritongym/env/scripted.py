"""A scripted model: an OpenAI-compatible chat endpoint on loopback that answers with solution files.

``tritongym agent --model scripted:DIR`` runs the agent without a model server: every chat request
for problem P (named in the packaged task prompt, ``Task P: ...``) is answered with the solution
file that ``tritongym run`` would pair with P in DIR (``<name>.py``, ``levelN/<name>.py`` or
KernelBench's ``level_L_problem_N_sample_S_kernel.py``; the first sample), as one Python code
block. A problem without a file (or a prompt that names none, from custom templates) gets a reply
without code, which the environment scores as a void turn. The same reply comes at every turn.

It is there to try the runner end to end (journal, resume, evaluation, feedback, report) on one
machine; it is a real HTTP server (stdlib ``http.server`` in a thread) that the runner's own chat
client talks to, so nothing in the runner is bypassed.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

PREFIX = "scripted:"
_TASK = re.compile(r"Task (\S+?):")
NO_SOLUTION = "I have no solution file for this task."


def scripted_folder(model: str) -> Path | None:
    """The solutions folder of a ``scripted:DIR`` model name, None for any other model."""
    if not model.startswith(PREFIX):
        return None
    folder = Path(model[len(PREFIX):])
    if not folder.is_dir():
        raise ValueError(f"--model {model}: {folder} is not a folder of solution files")
    return folder


class ScriptedModelServer:
    """``with ScriptedModelServer(folder, problems) as server:`` serves ``server.base_url`` until the block ends.

    `problems` are the run's problems (their solution files are read once, at start).
    """

    def __init__(self, folder: str | Path, problems: Sequence[Any]) -> None:
        from tritongym.bench.solutions import pair_solutions

        jobs, _ = pair_solutions(problems, Path(folder))
        self.replies: dict[str, str] = {}
        for job in jobs:  # problem order, then sample order: the first sample answers
            self.replies.setdefault(job.problem.problem_id, job.solution.read_text(encoding="utf-8"))
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # the runner's progress bar owns the terminal
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                    content = server.reply(body.get("messages") or [])
                    payload = json.dumps({
                        "id": f"scripted-{server.requests}", "object": "chat.completion",
                        "model": body.get("model", "scripted"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": content}}],
                        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}).encode()
                    status = 200
                except (ValueError, TypeError, AttributeError) as exc:
                    payload, status = json.dumps({"error": {"message": f"bad request: {exc}"}}).encode(), 400
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="tritongym-scripted-model",
                                        daemon=True)

    def reply(self, messages: list[dict[str, Any]]) -> str:
        """The reply to one chat request: the named problem's solution as a code block, or no code."""
        self.requests += 1
        task = next((m.get("content", "") for m in messages if m.get("role") == "user"), "")
        match = _TASK.search(task)
        code = self.replies.get(match.group(1)) if match else None
        return f"```python\n{code}\n```" if code is not None else NO_SOLUTION

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
