"""A KernelGYM-style client session against tritongym: the calls Dr.Kernel's reward client makes
(POST /evaluate, poll /status/{task_id}, GET /results/{task_id}) and its reward, computed from
the response fields the way its `calculate_reward_speedup` reads them."""

from __future__ import annotations

import re
import time
import uuid

import httpx
import pytest
from tests.service.conftest import EXAMPLES, NO_TRITON, SYNTAX_ERROR, problem_source

# Dr.Kernel recipe weights (kernelgym-drkernel.md §4): correctness 0.5, speedup 0.5 clipped to
# [0, 3], coverage 0.5 on time coverage; penalty 0.
W_CORRECT, W_SPEED, W_COVERAGE, SPEEDUP_CAP, PENALTY = 0.5, 0.5, 0.5, 3.0, 0.0


def kernelgym_reward(result: dict) -> float:
    """The reward a KernelGYM client derives from a response (fields only, no tritongym key)."""
    if result.get("status") != "completed" or result.get("decoy_kernel", False):
        return PENALTY
    correct = bool(result.get("correctness", False))
    speedup = min(max(float(result.get("speedup") or 0.0), 0.0), SPEEDUP_CAP)
    reward = W_CORRECT * correct + W_SPEED * speedup
    if correct:
        metadata = result.get("metadata") or {}
        total = metadata.get("total_kernel_run_time_in_profiling_us") or 0
        custom = metadata.get("custom_kernel_cuda_time_in_profiling_us") or 0
        reward += W_COVERAGE * (custom / total if total > 0 else 0.0)
    return reward


def session(http: httpx.Client, task: dict, poll_s: float = 0.2, limit_s: float = 300.0) -> dict:
    """Submit, poll the status until final, fetch the results (Dr.Kernel's reward-client loop)."""
    response = http.post("/evaluate", json=task)
    assert response.status_code == 200, response.text
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status = http.get(f"/status/{task['task_id']}").json()["status"]
        if status in ("completed", "failed", "timeout", "cancelled"):
            break
        time.sleep(poll_s)
    results = http.get(f"/results/{task['task_id']}")
    assert results.status_code == 200
    body = results.json()
    assert body["status"] == status == response.json()["status"]
    return body


def task(kernel_code: str, **extra) -> dict:
    return {"task_id": f"kg-{uuid.uuid4().hex[:12]}", "reference_code": problem_source("01_scaled_add"),
            "kernel_code": kernel_code, "backend": "triton", "num_correct_trials": 2, "num_perf_trials": 10,
            "timeout": 120, "entry_point": "Model", "reference_backend": None,
            # KernelGYM fields tritongym ignores, and one nobody knows: all accepted.
            "toolkit": "kernelbench", "priority": "high", "num_warmup": 3, "enable_triton_detection": True,
            "uuid": "abc", "some_future_field": {"x": 1}, **extra}


def test_decoy_kernel_session(http):
    body = session(http, task(NO_TRITON))
    assert body["status"] == "completed" and body["compiled"] is True
    assert body["decoy_kernel"] is True and body["correctness"] is False
    assert body["metadata"]["integrity_violations"][0]["code"] == "no_triton_kernel"
    assert body["tritongym"]["status"] == "integrity_violation"  # the full EvalResult rides along
    assert body["speedup"] == 0.0 and body["kernel_runtime"] == -1.0
    assert kernelgym_reward(body) == 0.0


def test_compile_error_session(http):
    body = session(http, task(SYNTAX_ERROR))
    assert body["status"] == "failed" and body["compiled"] is False and body["correctness"] is False
    assert body["error_code"] == "COMPILATION_ERROR" and "SyntaxError" in body["error_message"]
    assert body["metadata"]["compilation_error"]
    assert "SyntaxError" in http.get(f"/status/{body['task_id']}").json()["error_message"]
    assert kernelgym_reward(body) == 0.0


@pytest.mark.slow
def test_correct_kernel_session(http):
    body = session(http, task((EXAMPLES / "01_scaled_add.py").read_text()))
    assert body["status"] == "completed", body["error_message"]
    assert body["compiled"] and body["correctness"] and not body["decoy_kernel"]
    # 2 trials on the task's inputs plus one per perturbed input family, all passed; the metadata's
    # num_correct_trials is what ran (it agrees with "(k / n)", as in KernelGYM), the request's 2 beside it.
    ran = int(re.fullmatch(r"\((\d+) / \1\)", body["metadata"]["correctness_trials"]).group(1))
    assert ran > 2 and body["metadata"]["num_correct_trials"] == ran == len(body["tritongym"]["trials"])
    assert body["metadata"]["tritongym_requested_correct_trials"] == 2
    assert body["metadata"]["triton_profiler_used"] is True
    assert body["metadata"]["num_total_kernels"] == 0  # no profiler on a CPU: coverage reads as 0
    # No GPU: no timing, so speedup 0 and the reward is the correctness term alone.
    assert body["speedup"] == 0.0 and body["reference_runtime"] == -1.0
    assert kernelgym_reward(body) == pytest.approx(W_CORRECT)
    assert body["tritongym"]["status"] == "ok"


def test_task_id_reuse_returns_the_stored_result_unless_force_refresh(http):
    first = task(NO_TRITON)
    done = session(http, first)
    again = http.post("/evaluate", json={**first, "kernel_code": SYNTAX_ERROR}).json()
    assert again["tritongym"]["status"] == "integrity_violation"  # KernelGYM's cache by task_id
    assert again["submitted_at"] == done["submitted_at"]
    refreshed = http.post("/evaluate", json={**first, "kernel_code": SYNTAX_ERROR, "force_refresh": True}).json()
    assert refreshed["tritongym"]["status"] == "compile_error"
    assert http.get(f"/results/{first['task_id']}").json()["tritongym"]["status"] == "compile_error"


def test_batch_runs_all_and_reports_refused_tasks_as_failed_entries(http):
    tasks = [task(NO_TRITON), task(SYNTAX_ERROR), task(NO_TRITON, backend="cuda")]
    body = http.post("/evaluate/batch", json={"batch_id": "b1", "tasks": tasks}).json()
    assert body["batch_id"] == "b1" and body["total_tasks"] == 3
    statuses = [r["status"] for r in body["results"]]
    assert statuses == ["completed", "failed", "failed"]
    assert body["completed_tasks"] == 1 and body["failed_tasks"] == 2
    assert body["results"][2]["error_code"] == "VALIDATION_ERROR" and "cuda" in body["results"][2]["error_message"]
    assert [r["task_id"] for r in body["results"]] == [t["task_id"] for t in tasks]


@pytest.mark.parametrize(("change", "status", "reason"), [
    ({"backend": "cuda"}, 422, "Triton kernels"),
    ({"entry_point": "Net"}, 422, "entry_point"),
    ({"reference_code": None}, 422, "reference_code is required"),
    ({"reference_code": "def f(:\n"}, 422, "not valid Python"),
    ({"task_id": ""}, 422, "task_id"),
    ({"num_correct_trials": 0}, 422, "num_correct_trials"),
])
def test_kernelgym_refusals(http, change, status, reason):
    response = http.post("/evaluate", json={**task(NO_TRITON), **change})
    assert response.status_code == status
    assert reason in str(response.json()["detail"])


def test_unknown_task_and_health(http):
    assert http.get("/status/never-submitted").status_code == 404
    assert http.get("/results/never-submitted").status_code == 404
    health = http.get("/health").json()
    assert health["status"] == "healthy" and health["total_processed"] >= 1 and health["uptime"] > 0
