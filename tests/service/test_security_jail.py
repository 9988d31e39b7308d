"""Problem code from clients runs jailed (issue 22, finding 1), through a real server on loopback.

KernelGYM's API requires ``reference_code`` on every request and ``/v1`` accepts
``problem.source``: both are code a client sent, run in the reference worker. Here that code
tries what an attacker holding the token (or any local user of a loopback server) would: write a
file on the host, read the server's token from its environment through ``/proc``, and reach the
network (the server's own port). Each must fail; an honest client problem must still give the
verdict it gets as a built-in.
"""

from __future__ import annotations

import secrets

import httpx
import pytest
from tests.execution.host_probe import host_probe
from tests.service.conftest import EXAMPLES, Server, problem_source

from tritongym.evaluator.jail.sandbox import bwrap_problem

pytestmark = [pytest.mark.sandbox,
              pytest.mark.skipif(bwrap_problem() is not None, reason=f"no bwrap here: {bwrap_problem()}")]

TOKEN = "tg-jail-" + secrets.token_hex(12)
BUILTIN_ID, BUILTIN_NAME = "builtin/01_scaled_add", "01_scaled_add"  # a built-in's id and name
HEADERS = {"Authorization": f"Bearer {TOKEN}"}

#: After the probe ran at import (in the jailed reference worker), the problem reports from
#: get_init_inputs, the first call the evaluator makes into it.
ATTACK_TAIL = '''
import torch


class Model(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def get_inputs():
    return [torch.randn(4, 4), torch.randn(4, 4)]


def get_init_inputs():
    raise RuntimeError("report %r" % (report,))
'''


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    srv = Server(db=tmp_path_factory.mktemp("jail") / "jobs.db", workers=1,
                 token_env={"TG_TEST_JAIL_TOKEN": TOKEN}).start()
    yield srv
    srv.stop()


def attack_source(target, port: int) -> str:
    return host_probe(target, TOKEN, "TG_TEST_JAIL_TOKEN", port) + ATTACK_TAIL


def assert_contained(text: str, target) -> None:
    assert "report" in text, text
    assert not target.exists(), "the client's problem wrote a file on the host"
    assert "'host_write': 'written'" not in text, text
    assert "'proc': False" in text and "'marker_seen': False" in text, text
    assert "'network': 'connected'" not in text, text


def test_v1_problem_source_cannot_write_the_host_read_the_token_or_reach_the_network(guarded, tmp_path):
    target = tmp_path / "v1-pwned"
    response = httpx.post(guarded.url + "/v1/evaluate", headers=HEADERS, timeout=300, json={
        "problem": {"source": attack_source(target, guarded.port)},
        "solution": (EXAMPLES / "01_scaled_add.py").read_text(encoding="utf-8")})
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["state"] == "failed", job
    assert job["error"].startswith("ProblemError"), job["error"]
    assert_contained(job["error"], target)


def test_kernelgym_reference_code_cannot_write_the_host_read_the_token_or_reach_the_network(guarded, tmp_path):
    target = tmp_path / "kg-pwned"
    response = httpx.post(guarded.url + "/evaluate", headers=HEADERS, timeout=300, json={
        "task_id": "jail-" + secrets.token_hex(6), "reference_code": attack_source(target, guarded.port),
        "kernel_code": (EXAMPLES / "01_scaled_add.py").read_text(encoding="utf-8"), "backend": "triton",
        "num_correct_trials": 1})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "failed" and body["error_code"] == "VALIDATION_ERROR", body
    assert_contained(body["error_message"], target)


def test_a_client_problem_wearing_a_builtin_id_and_name_is_still_jailed(guarded, tmp_path):
    """Trust follows the problem's bytes, never the id or name a client gives it: code that calls
    itself ``builtin/01_scaled_add`` (``01_scaled_add``) is still a client's and runs jailed."""
    target = tmp_path / "named-pwned"
    response = httpx.post(guarded.url + "/v1/evaluate", headers=HEADERS, timeout=300, json={
        "problem": {"source": attack_source(target, guarded.port), "name": BUILTIN_NAME,
                    "problem_id": BUILTIN_ID},
        "solution": (EXAMPLES / "01_scaled_add.py").read_text(encoding="utf-8")})
    assert response.status_code == 200, response.text
    job = response.json()
    assert job["state"] == "failed", job
    assert job["error"].startswith("ProblemError"), job["error"]
    assert_contained(job["error"], target)


def test_an_honest_client_problem_gets_the_builtin_verdict(guarded):
    """The control: the built-in's source sent by a client (jailed) and the built-in (trusted)."""
    solution = (EXAMPLES / "01_scaled_add.py").read_text(encoding="utf-8")
    options = {"num_trials": 2, "input_families": []}
    verdicts = []
    client_source = problem_source("01_scaled_add") + "\n# sent by a client\nCLIENT = 1\n"
    for problem in ({"builtin": BUILTIN_ID}, {"source": client_source},
                    # wearing the built-in's id and name: jailed (the test above), and still its verdict
                    {"source": client_source, "name": BUILTIN_NAME, "problem_id": BUILTIN_ID}):
        response = httpx.post(guarded.url + "/v1/evaluate", headers=HEADERS, timeout=300,
                              json={"problem": problem, "solution": solution, "options": options})
        assert response.status_code == 200, response.text
        job = response.json()
        assert job["state"] == "done", job
        verdicts.append((job["result"]["status"], job["result"]["reward"],
                         [t["passed"] for t in job["result"]["trials"]]))
    assert verdicts[0] == verdicts[1] == verdicts[2] and verdicts[0][0] == "ok", verdicts
