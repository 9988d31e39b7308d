"""Request and response bodies of the native ``/v1`` API (pydantic; these define the OpenAPI schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, FiniteFloat, model_validator

from tritongym.service.store import JobRecord


class ProblemRef(BaseModel):
    """Which problem: its source, a built-in id, or the content hash of a registered problem (one of them)."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(None, description="KernelBench-format source (Model, get_inputs, get_init_inputs)")
    name: str | None = Field(None, max_length=200, description="A name for a problem given as source")
    problem_id: str | None = Field(None, max_length=300, description="An id for a problem given as source")
    builtin: str | None = Field(None, max_length=200, description="A built-in problem id, e.g. builtin/07_softmax")
    hash: str | None = Field(None, max_length=128, description="Content hash of a registered problem")
    size: Literal["original", "cpu", "auto"] | None = Field(
        None, description="original (or absent): the problem as given; cpu: its CPU-size variant (sizes scaled down, "
                          "known for KernelBench's and the built-in problems, docs/kernelbench-cpu.md; results say "
                          "problem_size: cpu); auto: cpu when the evaluation runs on a CPU, else original")

    @model_validator(mode="after")
    def _exactly_one(self) -> ProblemRef:
        given = [name for name in ("source", "builtin", "hash") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of 'source', 'builtin' or 'hash' for the problem")
        return self


class OptionsModel(BaseModel):
    """`EvalOptions` fields a client may set (see tritongym.evaluator.options); the server
    fixes the sandbox mode and caps the timeout. Every number must be finite (JSON's
    ``Infinity``/``NaN`` extensions are refused: an infinite tolerance would pass any output)."""

    model_config = ConfigDict(extra="forbid")

    device: str | None = Field(None, max_length=20)
    timeout: float | None = Field(None, allow_inf_nan=False, gt=0)
    num_trials: int | None = Field(None, ge=1, le=100)
    tolerance: Literal["kernelbench", "strict"] | None = None
    atol: float | None = Field(None, allow_inf_nan=False, ge=0)
    rtol: float | None = Field(None, allow_inf_nan=False, ge=0)
    seed: int | None = Field(None, ge=0, lt=2**63)
    measure_speed: bool | None = None
    time_on_cpu: bool | None = None
    timing_reps: int | None = Field(None, ge=1, le=10_000)
    timing_blocks: int | None = Field(None, ge=1, le=100)
    timing_rechecks: int | None = Field(None, ge=0, le=1000)
    warmup_ms: float | None = Field(None, allow_inf_nan=False, gt=0, le=60_000)
    max_speedup: float | None = Field(None, allow_inf_nan=False, gt=0)
    profile_calls: int | None = Field(None, ge=0, le=100)
    input_families: list[str] | None = Field(None, max_length=10)
    trivial_margin: float | None = Field(None, allow_inf_nan=False, ge=0)
    precision_policy: Literal["reject", "report", "off"] | None = None
    precision_factor: float | None = Field(None, allow_inf_nan=False, ge=0)
    precision_floor: float | None = Field(None, allow_inf_nan=False, ge=0)
    reward: dict[str, FiniteFloat] | None = None
    disabled_checks: list[str] | None = Field(None, max_length=50)
    use_audit_tolerance: bool | None = None
    baseline: Literal["eager", "compile", "both"] | None = None
    candidate_memory_fraction: float | None = Field(None, allow_inf_nan=False, ge=0.05, le=0.95)
    memory_limit_gb: float | None = Field(None, allow_inf_nan=False, gt=0, le=1024)

    def fields(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class EvaluationItem(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problem: ProblemRef
    solution: str = Field(description="The candidate's source, defining ModelNew")
    options: OptionsModel | None = None
    idempotency_key: str | None = Field(None, min_length=1, max_length=200,
                                        description="The same key returns the same job (across restarts)")


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[EvaluationItem] = Field(min_length=1)


class SubmittedJob(BaseModel):
    index: int
    id: str
    state: str
    created: bool = Field(description="False when an idempotency key named an existing job")
    idempotency_key: str | None = None


class BatchResponse(BaseModel):
    jobs: list[SubmittedJob]


class JobView(BaseModel):
    id: str
    state: str = Field(description="queued, running, done (result set), failed (error set) or cancelled")
    attempts: int
    problem_hash: str
    idempotency_key: str | None = None
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    result: dict[str, Any] | None = Field(None, description="The EvalResult (EvalResult.to_dict) when done")
    error: str | None = None

    @classmethod
    def of(cls, record: JobRecord) -> JobView:
        return cls(id=record.id, state=record.state.value, attempts=record.attempts,
                   problem_hash=record.problem_hash, idempotency_key=record.idempotency_key,
                   submitted_at=record.submitted, started_at=record.started, finished_at=record.finished,
                   result=record.result, error=record.error)


def job_view_dict(record: JobRecord) -> dict[str, Any]:
    """`JobView.of(record).model_dump()`, built directly (the streaming path's hot spot)."""
    return {"id": record.id, "state": record.state.value, "attempts": record.attempts,
            "problem_hash": record.problem_hash, "idempotency_key": record.idempotency_key,
            "submitted_at": record.submitted, "started_at": record.started, "finished_at": record.finished,
            "result": record.result, "error": record.error}


class JobList(BaseModel):
    jobs: list[JobView]
    missing: list[str] = Field(default_factory=list, description="Requested ids this server does not know")


class ProblemIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    name: str | None = Field(None, max_length=200)
    problem_id: str | None = Field(None, max_length=300)


class ProblemsIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problems: list[ProblemIn] = Field(min_length=1)


class ProblemView(BaseModel):
    hash: str
    name: str
    problem_id: str
    level: int | None = None


class ProblemList(BaseModel):
    problems: list[ProblemView]


class Health(BaseModel):
    status: str
    uptime_s: float
    workers: int | None = None
    sandbox: str | None = None


class ErrorBody(BaseModel):
    detail: Any
