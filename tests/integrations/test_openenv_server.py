"""The OpenEnv server (``tritongym openenv``) as OpenEnv's clients see it: a real server process on
loopback (the CLI, uvicorn, OpenEnv's own app), real WebSocket sessions through OpenEnv's
``EnvClient`` (tritongym's typed `KernelEnvClient`) and ``GenericEnvClient``, and real sandboxed
evaluations on the CPU (Triton's interpreter) of a built-in problem and its honest solution.

Skipped without the extra (``pip install -e '.[openenv]'``; CI: .ci/openenv).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv")
httpx = pytest.importorskip("httpx")

from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from tritongym.integrations.openenv import KernelAction, KernelEnvClient  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = "01_scaled_add"
HONEST = (ROOT / "examples" / "builtin" / f"{PROBLEM}.py").read_text(encoding="utf-8")
# The honest kernel with a wrong constant: it compiles and runs, and every output is off by one.
WRONG = HONEST.replace("alpha * x + beta * y", "alpha * x + beta * y + 1.0")
TOKEN = "openenv-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def fenced(code: str) -> str:
    return f"Here is my kernel.\n\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("openenv") / "server.log"
    command = [sys.executable, "-m", "tritongym.cli", "openenv", "--port", str(port), "--device", "cpu",
               "--trials", "2", "--max-turns", "2", "--workers", "2", "--max-sessions", "4", "--only", PROBLEM,
               "--only", "02_leaky_relu", "--token-env", "TRITONGYM_OPENENV_TEST_TOKEN", "--log-level", "warning"]
    env = {**os.environ, "TRITONGYM_OPENENV_TEST_TOKEN": TOKEN}
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited {process.returncode}: {log.read_text()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not ready in 120 s: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def test_health_and_schema_answer_and_the_token_is_required(server_url):
    assert httpx.get(server_url + "/health").json() == {"status": "healthy"}  # open: a liveness probe
    refused = httpx.get(server_url + "/schema")
    assert refused.status_code == 401 and "Bearer" in refused.json()["detail"]
    schema = httpx.get(server_url + "/schema", headers=AUTH).json()
    assert {"reply", "code"} <= set(schema["action"]["properties"])
    assert {"status", "correct", "speedup", "coverage", "feedback", "messages", "turn", "max_turns", "reward",
            "done", "metadata"} <= set(schema["observation"]["properties"])
    assert {"rewards", "statuses", "episode_id", "step_count"} <= set(schema["state"]["properties"])
    metadata = httpx.get(server_url + "/metadata", headers=AUTH).json()
    assert metadata["name"] == "tritongym" and "2 problems, 2 turns" in metadata["description"]


def test_two_concurrent_sessions_keep_independent_episodes(server_url):
    async def run():
        async with KernelEnvClient(server_url, headers=AUTH) as honest, \
                KernelEnvClient(server_url, headers=AUTH) as other:
            first_a, first_b = await asyncio.gather(honest.reset(problem=PROBLEM), other.reset(problem=0, seed=1))
            for first in (first_a, first_b):
                assert first.observation.problem_id == f"builtin/{PROBLEM}"
                assert first.reward is None and not first.done and first.observation.max_turns == 2
                assert PROBLEM in first.observation.feedback and first.observation.messages[0]["role"] == "system"
            # While the honest candidate is being evaluated, the other session's code-less turn is answered:
            # evaluations are awaited off the server's event loop, not in it.
            evaluating = asyncio.ensure_future(honest.step(KernelAction(code=HONEST)))
            void = await other.step(KernelAction(reply="I would write a kernel, but here is no code."))
            assert not evaluating.done()
            assert void.observation.status == "void" and void.reward == 0.0 and not void.done
            assert "no code to evaluate" in void.observation.feedback
            good, wrong = await asyncio.gather(evaluating, other.step(KernelAction(reply=fenced(WRONG))))
            assert good.observation.status == "ok" and good.observation.correct and good.reward > 0
            assert not good.done and good.observation.turn == 1
            assert good.metadata["device"] == "cpu" and good.metadata["eval_s"] > 0
            assert wrong.observation.status == "incorrect" and not wrong.observation.correct and wrong.reward == 0.0
            assert wrong.done and wrong.observation.turn == 2  # the budget of 2 turns is spent
            # The chat for the next reply: system, task, then the reply and its feedback.
            assert [m["role"] for m in good.observation.messages] == ["system", "user", "assistant", "user"]
            # A code action stands in the history as the fenced reply it would have been.
            assert good.observation.messages[2]["content"] == f"```python\n{HONEST}\n```"
            assert good.observation.messages[3]["content"] == good.observation.feedback
            last = await honest.step(KernelAction(reply="no code this time"))
            assert last.done and last.observation.status == "void"
            state_a, state_b = await asyncio.gather(honest.state(), other.state())
            assert state_a.statuses == ["ok", "void"] and state_a.rewards[0] > 0 and state_a.done
            assert state_b.statuses == ["void", "incorrect"] and state_b.rewards == [0.0, 0.0] and state_b.done
            assert state_a.episode_id != state_b.episode_id and state_a.best_turn == 0
            # After done, a step is refused with the fix, and a reset starts the next episode.
            with pytest.raises(RuntimeError, match="no episode in progress"):
                await other.step(KernelAction(code=HONEST))
            again = await other.reset(problem="02_leaky_relu")
            assert again.observation.problem_id == "builtin/02_leaky_relu" and not again.done
            assert (await other.state()).statuses == []

    asyncio.run(run())


def test_malformed_actions_get_clear_errors_and_the_session_survives(server_url):
    async def run():
        # OpenEnv's untyped client: the protocol with plain dicts, as a client without tritongym sends it.
        async with GenericEnvClient(server_url, headers=AUTH) as env:
            await env.reset(problem=PROBLEM)
            for bad in ({"reply": "a", "code": "b"}, {}, {"answer": "x"}, {"reply": 42}):
                with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                    await env.step(bad)
            with pytest.raises(RuntimeError, match="no problem 'nope'.*01_scaled_add"):
                await env.reset(problem="nope")
            with pytest.raises(RuntimeError, match="unknown reset argument.*difficulty"):
                await env.reset(difficulty="hard")
            # The same session still steps: the errors above changed nothing.
            await env.reset(problem=PROBLEM)
            result = await env.step({"reply": "still no code"})
            assert result.observation["status"] == "void" and result.reward == 0.0

    asyncio.run(run())
    # Over plain HTTP the validation error names the rule; a stateless /step says to use /ws.
    both = httpx.post(server_url + "/step", json={"action": {"reply": "a", "code": "b"}}, headers=AUTH)
    assert both.status_code == 422 and "exactly one of 'reply'" in both.text
    stateless = httpx.post(server_url + "/step", json={"action": {"code": HONEST}}, headers=AUTH)
    assert stateless.status_code == 409 and "/ws" in stateless.json()["detail"]
    unknown = httpx.post(server_url + "/reset", json={"problem": "nope"}, headers=AUTH)
    assert unknown.status_code == 400 and "no problem 'nope'" in unknown.json()["detail"]
    reset = httpx.post(server_url + "/reset", json={"problem": PROBLEM, "seed": 3}, headers=AUTH)
    assert reset.status_code == 200 and reset.json()["observation"]["problem_id"] == f"builtin/{PROBLEM}"


def test_a_websocket_session_needs_the_token(server_url):
    async def run():
        async with KernelEnvClient(server_url) as env:
            await env.reset(problem=PROBLEM)

    with pytest.raises(ConnectionError):
        asyncio.run(run())
