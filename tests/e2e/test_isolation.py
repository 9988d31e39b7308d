"""End-to-end: timeouts, crashes and hostile candidates end in a verdict; the evaluator survives, the
candidate's processes do not, and the candidate runs in a fresh, scrubbed process of its own."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import pytest

from tritongym import Status, ViolationCode, evaluate

from .helpers import CANDIDATES, TINY_RELU, kill_all, processes_with, run_cli, run_eval

# -- timeout ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_endless_loop_times_out_and_everything_it_started_is_killed(tmp_path, sandbox):
    """The forward forks a setsid grandchild (outside the worker's process group) and loops forever.

    With bwrap the PID namespace takes the grandchild down; without it, the sweep of processes that
    carry the job's TRITONGYM_JOB token must find it.
    """
    marker = f"tritongym-e2e-grandchild-{uuid.uuid4().hex}"
    source = (CANDIDATES / "relu_endless_loop.py").read_text().replace("MARKER_PLACEHOLDER", marker)
    timeout = 5.0
    started = time.monotonic()
    try:
        # The run-time policy would refuse the fork; disabling forbidden_construct lets it happen so
        # that the kill path (PID namespace, or the token sweep) is what this test exercises.
        result = evaluate(TINY_RELU, source, device="cpu", num_trials=1, timeout=timeout, sandbox=sandbox,
                          disabled_checks=frozenset({"forbidden_construct"}))
        elapsed = time.monotonic() - started
        survivors = processes_with(marker)
    finally:
        kill_all(processes_with(marker))
    assert result.status == Status.TIMEOUT, (result.status, result.error)
    assert result.reward == 0.0 and not result.correct
    assert f"exceeded the {timeout:g} s budget" in result.error
    assert f"grandchild started {marker}" in result.candidate_log  # the grandchild did exist
    assert survivors == [], f"processes of the candidate survived the timeout: {survivors}"
    assert elapsed < timeout + 15, f"a {timeout} s timeout took {elapsed:.1f} s"
    assert result.duration_s < timeout + 15


def test_endless_loop_during_import_times_out():
    started = time.monotonic()
    result = run_eval("relu_import_loop", fresh=True, timeout=4.0)
    assert result.status == Status.TIMEOUT
    assert "during import" in result.error
    assert time.monotonic() - started < 4 + 15
    assert result.trials == []


# -- crashed ---------------------------------------------------------------------------------------


def test_os_exit_in_forward_is_a_crash():
    result = run_eval("relu_os_exit", fresh=True)
    assert result.status == Status.CRASHED
    assert "exited with code 0" in result.error
    assert result.reward == 0.0


def test_segfault_in_forward_is_a_crash():
    # faulthandler is forbidden: with the policy on the attempt is refused before it crashes...
    refused = run_eval("relu_segfault", fresh=True, num_trials=1)
    assert refused.status == Status.INTEGRITY_VIOLATION
    assert [v.code for v in refused.violations] == [ViolationCode.FORBIDDEN_CONSTRUCT]
    # ...and with it off the segfault happens and is a crash verdict.
    result = run_eval("relu_segfault", fresh=True, num_trials=1, disabled_checks=frozenset({"forbidden_construct"}))
    assert result.status == Status.CRASHED
    assert "SIGSEGV" in result.error


def test_garbage_on_every_descriptor_is_a_crash_not_a_parse():
    result = run_eval("relu_garbage_fds", fresh=True)
    assert result.status == Status.CRASHED
    assert "during import" in result.error
    assert "exceeds" in result.error  # the bogus frame length was refused, not allocated


@pytest.mark.parametrize("name", ["relu_os_exit_literal", "relu_segfault_ctypes", "relu_kill_parent_literal"])
def test_plainly_spelled_hostile_calls_never_pass(name):
    """os._exit, ctypes.string_at(0), os.kill(getppid()) in plain sight: the static gate may refuse them
    (forbidden_construct) or the process dies (crashed); either way a verdict, never ok."""
    started = time.monotonic()
    completed = run_cli(
        "eval",
        "--problem",
        str(TINY_RELU),
        "--solution",
        str(CANDIDATES / f"{name}.py"),
        "--device",
        "cpu",
        "--trials",
        "1",
        "--json",
    )
    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["status"] in ("crashed", "integrity_violation"), result
    if result["status"] == "integrity_violation":
        assert [v["code"] for v in result["violations"]] == [ViolationCode.FORBIDDEN_CONSTRUCT]
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("sandbox", [pytest.param("bwrap", marks=pytest.mark.sandbox), "none"])
def test_killing_its_parent_cannot_kill_the_evaluator(sandbox):
    """Run through the CLI so that, if the signal ever reached the evaluator, only a subprocess dies.

    In the jail the parent it sees is bubblewrap's init; without one, a waiting shell stands between
    the worker and the evaluator, so the signal kills the shell and the evaluator carries on.
    """
    completed = run_cli(
        "eval",
        "--problem",
        str(TINY_RELU),
        "--solution",
        str(CANDIDATES / "relu_kill_parent.py"),
        "--device",
        "cpu",
        "--sandbox",
        sandbox,
        "--trials",
        "1",
        "--disable-check",
        "forbidden_construct",  # let the kill happen: this test is about containing it
        "--json",
    )
    assert completed.returncode == 0, (completed.returncode, completed.stderr[-2000:])
    result = json.loads(completed.stdout)
    assert result["status"] == "crashed"
    assert "killing parent" in result["candidate_log"]
    if sandbox == "bwrap":
        assert "exited with code 17" in result["error"]  # it outlived its own kill attempt, then exited


# -- isolation of the candidate process ------------------------------------------------------------


@pytest.fixture(scope="module")
def probe():
    result = run_eval("relu_probe_environment", fresh=True, num_trials=1)
    line = next(line for line in result.candidate_log.splitlines() if line.startswith("PROBE "))
    return result, json.loads(line[len("PROBE ") :])


def test_candidate_runs_in_a_fresh_spawned_process_with_a_scrubbed_environment(probe):
    result, seen = probe
    assert result.status == Status.OK
    assert seen["pid"] != os.getpid()
    # A forked copy of this pytest process would keep pytest's argv and environment.
    assert seen["argv"][0].endswith("worker/candidate.py")
    assert "--fd" in seen["argv"]
    assert seen["env"]["PYTEST_CURRENT_TEST"] is None and seen["env"]["VIRTUAL_ENV"] is None
    assert os.environ.get("PYTEST_CURRENT_TEST")  # ... which this process does have
    assert seen["env"]["TRITON_INTERPRET"] == "1"
    assert seen["env"]["TRITONGYM_JOB"]  # the token the process sweep looks for


def test_the_evaluator_never_imports_candidate_code(probe):
    for module in list(sys.modules.values()):
        assert getattr(module, "TRITONGYM_FIXTURE_MARKER", None) != "candidate-probe-5b1e", module


@pytest.mark.sandbox
def test_sandboxed_candidate_sees_only_its_job_folder():
    result = run_eval("relu_probe_environment", fresh=True, num_trials=1, sandbox="bwrap")
    assert result.status == Status.OK and result.sandbox == "bwrap"
    seen = json.loads(
        next(line for line in result.candidate_log.splitlines() if line.startswith("PROBE "))[len("PROBE ") :]
    )
    assert seen["cwd"] == "/job" and seen["env"]["HOME"] == "/job"
    assert not any(n.code == "sandbox_disabled" for n in result.notices)


def test_unsandboxed_run_says_so():
    result = run_eval("relu_honest", fresh=True, sandbox="none")
    assert result.status == Status.OK and result.sandbox == "none"
    assert any(n.code == "sandbox_disabled" and "without the OS sandbox" in n.message for n in result.notices)
