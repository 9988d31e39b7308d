"""Property-based fuzzing of the OpenAPI schema (schemathesis): whatever a client sends, valid or
not, the server answers without a 5xx. Examples are bounded per operation to keep this quick."""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

EXAMPLES_PER_OPERATION = 12


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors_on_any_operation(server, mode):
    schema = schemathesis.openapi.from_url(server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/evaluations", "/v1/evaluate", "/v1/problems", "/evaluate",
                                              "/status/{task_id}", "/results/{task_id}", "/metrics"}
    failures: list[str] = []
    calls: dict[int, int] = {}
    for operation in operations:
        try:
            fuzz_operation(server.url, operation, mode, failures, calls)
        except Unsatisfiable:
            # No invalid input exists for this operation (e.g. GET /healthz takes no parameters).
            assert mode == GenerationMode.NEGATIVE
    assert not failures, "\n".join(failures[:10])
    assert sum(calls.values()) >= 5 * len(operations), calls  # it really exercised the server
    if mode == GenerationMode.NEGATIVE:
        assert calls.get(422, 0) + calls.get(400, 0) > 0, calls


def fuzz_operation(base_url, operation, mode, failures: list[str], calls: dict[int, int]) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    def check(case):
        response = case.call(base_url=base_url, timeout=60)
        calls[response.status_code] = calls.get(response.status_code, 0) + 1
        if response.status_code >= 500:
            failures.append(f"{operation.method.upper()} {operation.path}: {response.status_code} "
                            f"{response.text[:300]} for {case.body!r:.300}")

    check()
