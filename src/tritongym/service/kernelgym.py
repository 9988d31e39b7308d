"""KernelGYM's API on top of the service: its request fields in, its response fields out.

Dr.Kernel's reward client POSTs ``/evaluate``, polls ``/status/{task_id}`` and reads
``/results/{task_id}``; these models and `to_kernelgym` make the same calls work against
tritongym by changing only the URL. The mapping is documented field by field in
docs/service.md; the full `EvalResult` rides along under the ``tritongym`` key.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tritongym.service.store import JobRecord, JobState

# KernelGYM's error codes (kernelgym/common.py ErrorCode), the subset our verdicts map to.
VALIDATION_ERROR = "VALIDATION_ERROR"
COMPILATION_ERROR = "COMPILATION_ERROR"
RUNTIME_ERROR = "RUNTIME_ERROR"
CORRECTNESS_ERROR = "CORRECTNESS_ERROR"
TIMEOUT_ERROR = "TIMEOUT_ERROR"
SYSTEM_ERROR = "SYSTEM_ERROR"

_KNOWN_FIELDS_DOC = (
    "Fields KernelGYM defines and tritongym ignores: toolkit, backend_adapter, num_warmup (warm-up is time-based), "
    "priority, device_preference, uuid, use_reference_cache, is_valid, verbose_errors, enable_triton_detection / "
    "run_triton_detection (every integrity check always runs), run_correctness (correctness always runs), "
    "cases, cases_code, workflow, resources. Any other unknown field is ignored too."
)


class KernelGymRequest(BaseModel):
    """KernelGYM's ``EvaluationRequest`` (unknown fields are accepted and ignored)."""

    model_config = ConfigDict(extra="ignore", json_schema_extra={"description": _KNOWN_FIELDS_DOC})

    task_id: str = Field(min_length=1, max_length=100, description="The caller's id; also the idempotency key")
    reference_code: str | None = Field(None, description="The problem: Model, get_inputs, get_init_inputs")
    kernel_code: str = Field(description="The candidate defining ModelNew")
    backend: str = Field("triton", description="Only 'triton' is evaluated; 'cuda' is refused (422)")
    num_correct_trials: int = Field(5, ge=1, le=100, description="→ EvalOptions.num_trials")
    num_perf_trials: int = Field(100, ge=1, le=10000, description="→ EvalOptions.timing_reps")
    timeout: float = Field(300, gt=0, le=86400, description="→ EvalOptions.timeout (seconds)")
    entry_point: str = Field("Model", description="Only 'Model' (candidate class ModelNew) is supported")
    reference_backend: str | None = Field(None, description="torch_compile / torch-compile / compile → "
                                                            "baseline 'compile'; anything else eager")
    force_refresh: bool = Field(False, description="Evaluate again even when task_id has a result")
    enable_profiling: bool | None = Field(None, description="False → no profiling pass (coverage null)")
    measure_performance: bool | None = Field(None, description="False → no timing")
    run_performance: bool | None = Field(None, description="Alias of measure_performance")
    # tritongym's own (KernelGYM has no such field): absent keeps KernelGYM's behaviour, the code as sent.
    size: Literal["original", "cpu", "auto"] | None = Field(
        None, description="tritongym only: cpu evaluates reference_code's CPU-size variant (KernelBench's and the "
                          "built-in problems; docs/kernelbench-cpu.md), auto does on a CPU; absent or original: "
                          "reference_code as sent")


class KernelGymBatch(BaseModel):
    model_config = ConfigDict(extra="ignore")

    batch_id: str | None = Field(None, max_length=200)
    tasks: list[KernelGymRequest] = Field(min_length=1)


class KernelGymResponse(BaseModel):
    """KernelGYM's ``EvaluationResponse`` plus ``tritongym`` (the full `EvalResult`)."""

    task_id: str
    status: str
    compiled: bool = False
    correctness: bool = False
    decoy_kernel: bool = False
    reference_runtime: float = -1.0
    kernel_runtime: float = -1.0
    speedup: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    error_message: str | None = None
    error_code: str | None = None
    submitted_at: str | None = None
    completed_at: str | None = None
    processing_time: float | None = None
    tritongym: dict[str, Any] | None = None


class KernelGymStatus(BaseModel):
    task_id: str
    status: str
    progress: float | None = None
    queue_position: int | None = None
    error_message: str | None = None


def options_from(request: KernelGymRequest) -> dict[str, Any]:
    """The `EvalOptions` fields a KernelGYM request sets."""
    reps = request.num_perf_trials
    options: dict[str, Any] = {"num_trials": request.num_correct_trials, "timing_reps": reps,
                               "timing_blocks": min(3, reps), "timeout": float(request.timeout)}
    if (request.reference_backend or "").lower().replace("-", "_") in ("torch_compile", "compile"):
        options["baseline"] = "compile"
    measure = request.measure_performance if request.measure_performance is not None else request.run_performance
    if measure is False:
        options["measure_speed"] = False
    if request.enable_profiling is False:
        options["profile_calls"] = 0
    return options


def _iso(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).isoformat()


def status_of(record: JobRecord) -> str:
    """KernelGYM's task status: pending, processing, completed, failed (or cancelled)."""
    if record.state == JobState.QUEUED:
        return "pending"
    if record.state == JobState.RUNNING:
        return "processing"
    if record.state == JobState.CANCELLED:
        return "cancelled"
    if record.state == JobState.FAILED:
        return "failed"
    return "completed" if _compiled(record.result or {}) else "failed"


def _compiled(result: dict[str, Any]) -> bool:
    """KernelGYM's ``compiled``: a ModelNew was built. Our compile errors are exactly the
    builds that failed; a timeout or crash before any trial ran is counted as not built."""
    status = result.get("status")
    if status == "compile_error":
        return False
    if status in ("timeout", "crashed", "unsupported"):
        return bool(result.get("trials"))
    return True


def _error_code(result: dict[str, Any]) -> str | None:
    return {
        "compile_error": COMPILATION_ERROR,
        "runtime_error": RUNTIME_ERROR,
        "crashed": RUNTIME_ERROR,
        "incorrect": CORRECTNESS_ERROR,
        "timeout": TIMEOUT_ERROR,
        "unsupported": SYSTEM_ERROR,
    }.get(str(result.get("status")))


def _coverage_fields(result: dict[str, Any]) -> dict[str, Any]:
    """KernelGYM's coverage metadata from our kernel profile (GPU only; zeros on a CPU, which
    Dr.Kernel's reward code reads as coverage 0). The denominator is the GPU time of all
    profiled kernels (ours counts each kernel once, with no CPU time added)."""
    profile = result.get("kernel_profile") or []
    custom = [k for k in profile if k.get("candidate")]
    custom_us = float(sum(k.get("device_us", 0.0) for k in custom))
    total_us = float(sum(k.get("device_us", 0.0) for k in profile))
    fields: dict[str, Any] = {
        "num_custom_kernels": len(custom),
        "num_total_kernels": len(profile),
        "custom_kernel_cuda_time_in_profiling_us": custom_us,
        "total_kernel_run_time_in_profiling_us": total_us,
        "triton_kernel_coverage": f"{len(custom)}/{len(profile)}",
        "custom_kernel_cuda_time_coverage": f"{custom_us / total_us:.4f}" if total_us > 0 else "0",
        "triton_kernel_in_profiling": sorted({k.get("kernel") for k in custom}),
    }
    if result.get("coverage") is not None:
        fields["tritongym_coverage"] = result["coverage"]
    return fields


def to_kernelgym(record: JobRecord, task_id: str) -> KernelGymResponse:
    """Map a finished (or unfinished) job to KernelGYM's response, field by field."""
    common = {"task_id": task_id, "submitted_at": _iso(record.submitted), "completed_at": _iso(record.finished),
              "processing_time": (record.finished - record.submitted) if record.finished else None}
    if record.state != JobState.DONE or record.result is None:
        state = status_of(record)
        code = None
        if record.state == JobState.FAILED:
            # A problem that fails on its own is KernelGYM's validation failure; anything else ours.
            code = VALIDATION_ERROR if (record.error or "").startswith("ProblemError") else SYSTEM_ERROR
        return KernelGymResponse(status=state, error_message=record.error, error_code=code,
                                 metadata={"tritongym_state": record.state.value}, **common)
    result = record.result
    status = str(result.get("status"))
    correct = status == "ok"
    decoy = status == "integrity_violation"
    options = record.options
    trials = result.get("trials") or []
    timing = result.get("timing") or None
    meaningful = bool(timing and timing.get("meaningful", True) and str(result.get("device", "")).startswith("cuda"))
    metadata: dict[str, Any] = {
        "hardware": (timing or {}).get("device_name") or result.get("device"),
        "device": result.get("device"),
        "backend": "triton",
        # What ran, so that it agrees with correctness_trials' "(k / n)" as in KernelGYM (where
        # n is always the requested count): our n adds one trial per perturbed input family (and
        # autotune rotations), and a compile error runs none. Dr.Kernel's reward never reads this
        # field (status, correctness, decoy_kernel, speedup, coverage); its feedback shows it to
        # the model, which should see one story. The request's own number is kept beside it.
        "num_correct_trials": len(trials),
        "tritongym_requested_correct_trials": options.get("num_trials", 5),
        "num_perf_trials": options.get("timing_reps", 30),
        "correctness_trials": f"({sum(1 for t in trials if t.get('passed'))} / {len(trials)})",
        "max_difference": [t.get("max_abs_error") for t in trials],
        "tritongym_status": status,
        "tritongym_reward": result.get("reward"),
        "sandbox": result.get("sandbox"),
        "triton_profiler_used": any(k.get("defined_in_candidate") for k in result.get("triton_launches") or []),
        "triton_profiler_matches": [f"{k.get('kernel')} grid={k.get('last_grid')}"
                                    for k in result.get("triton_launches") or [] if k.get("defined_in_candidate")],
        **_coverage_fields(result),
    }
    failed_trial = next((t for t in trials if not t.get("passed")), None)
    if failed_trial is not None and failed_trial.get("message"):
        metadata["correctness_issue"] = failed_trial["message"]
    if decoy:
        metadata["integrity_violations"] = [{"code": v.get("code"), "message": v.get("message")}
                                            for v in result.get("violations") or []]
    if status == "compile_error":
        metadata["compilation_error"] = result.get("error")
    elif status in ("runtime_error", "crashed"):
        metadata["runtime_error"] = result.get("error")
    error_message = result.get("error")
    if decoy and not error_message:
        error_message = "; ".join(f"{v.get('code')}: {v.get('message')}" for v in result.get("violations") or [])
    speedup = result.get("speedup")
    return KernelGymResponse(
        status="completed" if _compiled(result) else "failed",
        compiled=_compiled(result),
        correctness=correct,
        decoy_kernel=decoy,
        reference_runtime=float(timing["reference_median_ms"]) if meaningful and correct else -1.0,
        kernel_runtime=float(timing["candidate_median_ms"]) if meaningful and correct else -1.0,
        speedup=float(speedup) if (correct and speedup is not None) else 0.0,
        metadata=metadata,
        error_message=None if correct else error_message,
        error_code=None if correct or decoy else _error_code(result),
        tritongym=result,
        **common,
    )
