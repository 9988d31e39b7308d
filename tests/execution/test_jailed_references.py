"""Problem code a client sent runs jailed, and a lost reference worker is the machine's fault.

Issue 22: the service ran clients' problem code (KernelGYM's ``reference_code``, ``/v1``'s
``problem.source``) in unjailed reference workers: a problem could write host files, read the
server's token from ``/proc``, reach the network. Here the pool runs the same attack as a client's
problem (``trusted_problem=False``) and it must be contained, while the same problem's honest
twin still gives the same verdict as when trusted. And: ``kill -9`` of a reference fork server or
worker mid-job must not fail an honest job as the problem's error (it is rerun once), while a
problem that raises is still a `ProblemError`.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import threading

import pytest
from tests.execution.conftest import FIXTURES, RELU_PROBLEM, needs_forkserver
from tests.execution.host_probe import host_probe
from tests.execution.jail_probe import tree, visible_mounts, wait_for_depth, writable_places

from tritongym import EvalOptions, Status
from tritongym.errors import EvaluatorError, ProblemError
from tritongym.execution import EvalRequest, LocalPool
from tritongym.tasks import Problem

pytestmark = [pytest.mark.sandbox, needs_forkserver()]

OPTIONS = EvalOptions(device="cpu", sandbox="bwrap", num_trials=2, input_families=(), timeout=60.0)
HONEST = FIXTURES / "relu_honest.py"
RELU = RELU_PROBLEM.read_text(encoding="utf-8")
#: Below the fork server's host PID: the jailed server (bwrap, bwrap's init, the server) then the
#: middle, the namespace's init and the worker; the trusted one (a waiting shell, the server), then
#: the worker.
WORKER_DEPTH = {True: 5, False: 2}
SERVER_DEPTH = {True: 2, False: 1}


def problem_with(init_body: str, name: str) -> Problem:
    """The ReLU task with `init_body` run in ``get_init_inputs`` (in the reference worker's setup)."""
    body = "\n".join("    " + line for line in init_body.strip().splitlines())
    source = RELU.replace("def get_init_inputs():\n    return []", f"def get_init_inputs():\n{body}\n    return []")
    assert source != RELU
    return Problem.from_source(source, name=name, problem_id=f"test/{name}")


@pytest.fixture(scope="module")
def pool():
    with LocalPool(1, launcher="forkserver") as pool:
        yield pool


@pytest.fixture
def listener():
    """A TCP listener on loopback that records whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    server.settimeout(0.2)
    accepted: list[str] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            accepted.append("connected")
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join(timeout=5)
    server.close()


ATTACK_TAIL = '''try:
    with open("/job/problem.py", "a") as handle:
        handle.write("# rewritten")
    report["problem_file"] = "written"
except OSError as exc:
    report["problem_file"] = type(exc).__name__
report["uid"] = os.getuid()
raise RuntimeError("report %r" % (report,))
'''


def test_client_problem_code_cannot_write_the_host_read_the_server_or_reach_the_network(pool, tmp_path, listener,
                                                                                        monkeypatch):
    port, accepted = listener
    marker = "tg-marker-" + secrets.token_hex(8)
    monkeypatch.setenv("TG_TEST_SERVER_SECRET", marker)  # what the server's token would be
    target = tmp_path / "written-by-problem"
    attack = host_probe(target, marker, "TG_TEST_SERVER_SECRET", port) + ATTACK_TAIL
    problem = problem_with(attack, "attack")
    future = pool.submit(EvalRequest(problem, HONEST, OPTIONS, trusted_problem=False))
    with pytest.raises(ProblemError) as info:
        future.result(timeout=300)
    text = str(info.value)
    assert "report" in text, text
    assert not target.exists()
    assert not accepted
    assert "'host_write': 'FileNotFoundError'" in text or "'host_write': 'PermissionError'" in text, text
    assert "'proc': False" in text and "'marker_seen': False" in text, text
    assert "'network': 'connected'" not in text, text
    assert "'problem_file': 'OSError'" in text or "'problem_file': 'PermissionError'" in text, text
    assert "'uid': 65534" in text, text


def test_without_warm_servers_client_problem_code_is_still_jailed(tmp_path, listener):
    """No reference cache (and fresh candidate processes): the reference is a fresh bwrap-jailed
    process per evaluation, never an unjailed one."""
    port, accepted = listener
    target = tmp_path / "written-by-problem-fresh"
    attack = host_probe(target, "unused", "UNUSED", port) + ATTACK_TAIL
    with LocalPool(1, launcher="spawn", reference_cache=0) as fresh:
        with pytest.raises(ProblemError) as info:
            fresh.submit(EvalRequest(problem_with(attack, "fresh"), HONEST, OPTIONS,
                                     trusted_problem=False)).result(timeout=300)
    text = str(info.value)
    assert "report" in text and "'proc': False" in text and "'uid': 65534" in text, text
    assert not target.exists() and not accepted


def test_the_same_code_from_this_machine_runs_unjailed(pool, tmp_path, listener):
    """The control of the attack above: as trusted code (a local file) it reaches the host, which
    is why client code must never be trusted."""
    port, accepted = listener
    target = tmp_path / "written-by-trusted-problem"
    attack = host_probe(target, "unused", "UNUSED", port) + ATTACK_TAIL
    with pytest.raises(ProblemError, match="report"):
        pool.submit(EvalRequest(problem_with(attack, "local"), HONEST, OPTIONS)).result(timeout=300)
    assert target.exists()


def test_an_honest_client_problem_gets_the_same_verdict_jailed(pool):
    problem = Problem.from_source(RELU, name="relu", problem_id="test/relu")
    trusted = pool.submit(EvalRequest(problem, HONEST, OPTIONS)).result(timeout=300)
    jailed = [pool.submit(EvalRequest(problem, HONEST, OPTIONS, trusted_problem=False)) for _ in range(2)]
    results = [future.result(timeout=300) for future in jailed]
    assert trusted.status == Status.OK, (trusted.error, trusted.candidate_log)
    for result in results:
        assert result.status == Status.OK, (result.error, result.candidate_log)
        assert result.reward == trusted.reward
        assert [t.passed for t in result.trials] == [t.passed for t in trusted.trials]
    # Warm: the second jailed evaluation reused the first one's reference worker.
    assert pool.references.server_pid("cpu", True) is not None


def test_a_jailed_reference_has_only_its_private_tmpfs_to_write(pool):
    problem = problem_with("import time\ntime.sleep(3)", "sleepy-mounts")
    known = _reference_workers(pool, jailed=True)
    future = pool.submit(EvalRequest(problem, HONEST, OPTIONS, trusted_problem=False))
    worker = _wait_for_reference_worker(pool, jailed=True, known=known)
    places = writable_places(worker)
    mounts = {m.target: m for m in visible_mounts(worker)}
    assert future.result(timeout=300).status == Status.OK
    assert set(places) == {"/tmp", "/job", "/dev/shm"}, places
    assert not mounts["/job/problem.py"].writable and not mounts["/dev"].writable and not mounts["/"].writable
    assert "/proc" not in mounts


def _reference_workers(pool, *, jailed: bool) -> frozenset[int]:
    """Reference workers alive now (idle warm ones of earlier jobs included)."""
    server = pool.references.server_pid("cpu", jailed)
    return frozenset() if server is None else frozenset(
        pid for pid, depth in tree(server) if depth >= WORKER_DEPTH[jailed])


def _wait_for_reference_worker(pool, *, jailed: bool, known: frozenset[int]) -> int:
    """The reference worker a job just started (not one of the `known` idle ones)."""
    import time

    deadline = time.monotonic() + 120
    while pool.references.server_pid("cpu", jailed) is None:
        assert time.monotonic() < deadline, "no reference server started"
        time.sleep(0.05)
    return wait_for_depth(pool.references.server_pid("cpu", jailed), WORKER_DEPTH[jailed], known=known)


@pytest.mark.parametrize("jailed", [False, True], ids=["trusted", "jailed"])
@pytest.mark.parametrize("victim", ["server", "worker"])
def test_a_killed_reference_is_replaced_and_the_job_rerun(pool, jailed, victim):
    """``kill -9`` of the reference fork server (or of the worker, as the OOM killer would) while a
    job runs: the job is run again on a new worker and gets its honest verdict."""
    problem = problem_with(f"import time\ntag = {victim + str(jailed)!r}\ntime.sleep(2)", f"sleepy-{victim}-{jailed}")
    before = pool.stats().restarts
    known = _reference_workers(pool, jailed=jailed)
    future = pool.submit(EvalRequest(problem, HONEST, OPTIONS, trusted_problem=not jailed))
    worker = _wait_for_reference_worker(pool, jailed=jailed, known=known)
    server = pool.references.server_pid("cpu", jailed)
    if victim == "server":
        os.kill(next(pid for pid, depth in tree(server) if depth == SERVER_DEPTH[jailed]), signal.SIGKILL)
    else:
        os.kill(worker, signal.SIGKILL)
    result = future.result(timeout=300)
    assert result.status == Status.OK, (result.status, result.error)
    assert pool.stats().restarts == before + 1
    assert pool.references.server_pid("cpu", jailed) is not None
    if victim == "server":
        assert pool.references.server_pid("cpu", jailed) != server


@pytest.mark.parametrize("jailed", [False, True], ids=["trusted", "jailed"])
def test_a_reference_that_dies_every_time_is_an_evaluator_error_after_one_rerun(pool, jailed):
    problem = problem_with("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", f"suicidal-{jailed}")
    before = pool.stats().restarts
    with pytest.raises(EvaluatorError, match="the reference worker died twice") as info:
        pool.submit(EvalRequest(problem, HONEST, OPTIONS, trusted_problem=not jailed)).result(timeout=300)
    assert not isinstance(info.value, ProblemError)
    assert pool.stats().restarts == before + 2


@pytest.mark.parametrize("jailed", [False, True], ids=["trusted", "jailed"])
def test_a_problem_that_raises_is_still_a_problem_error_and_not_rerun(pool, jailed):
    problem = problem_with("raise ValueError('this problem is broken')", f"broken-{jailed}")
    before = pool.stats().restarts
    with pytest.raises(ProblemError, match="this problem is broken"):
        pool.submit(EvalRequest(problem, HONEST, OPTIONS, trusted_problem=not jailed)).result(timeout=300)
    assert pool.stats().restarts == before


def test_a_fork_server_runs_only_the_roles_of_its_fixed_table(tmp_path):
    """The job frame names a role, looked up in a fixed table on the jailed side (`WORKERS`): a role
    missing there is refused by the server, and an unjailed server runs reference workers only."""
    import socket as sockets

    from tritongym.evaluator.reference import JAILED_REFERENCE_LIMITS
    from tritongym.execution.forkserver import ForkServerLauncher

    with pytest.raises(ValueError, match="roles must be among"):
        ForkServerLauncher("cpu", roles=("anything",))
    with pytest.raises(ValueError, match="may run unjailed"):
        ForkServerLauncher("cpu", roles=("candidate",), trusted=True)
    (tmp_path / "problem.py").write_text(RELU, encoding="utf-8")
    # The host side made to send a role the server must refuse (what a corrupted frame carries): one
    # missing from the jailed side's table, and a candidate to an unjailed server.
    for trusted, module, role in ((False, "tritongym.evaluator.static", "bogus"),
                                  (True, "tritongym.evaluator.worker.candidate", "candidate")):
        server = ForkServerLauncher("cpu", trusted=trusted)
        try:
            server.modules = {module: role}
            parent_end, child_end = sockets.socketpair()
            with pytest.raises(EvaluatorError, match="is not one this server runs"):
                server.start(module, str(tmp_path / "problem.py"), job_dir=tmp_path,
                             log_path=tmp_path / "log", channel_fd=child_end.fileno(), token="t",
                             limits=JAILED_REFERENCE_LIMITS, interpret=True)
            parent_end.close()
            child_end.close()
            assert not server.lost()
        finally:
            server.close()
