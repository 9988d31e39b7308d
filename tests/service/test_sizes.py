"""Problem sizes on the service (issue 23): ``problem.size`` in the native API and ``size`` in
KernelGYM's request ask for a problem's CPU-size variant; ``run --server --size`` sizes on the client.

The server sizes only problems whose CPU size is known without running their code (KernelBench's
and the built-in problems, by content hash; variants sent as such): a client's problem code runs
nowhere but in the sandbox. An absent size keeps the problem as sent (both APIs, as before).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from tests.conftest import FIXTURES, KERNELBENCH_JSONL
from tests.service.conftest import BUILTIN, ROOT, problem_source

from tritongym.service.config import ServiceConfig
from tritongym.service.core import EvaluationService, ServiceError
from tritongym.service.kernelgym import KernelGymRequest
from tritongym.service.models import EvaluationItem
from tritongym.tasks import Problem, load_problem_file
from tritongym.tasks.sizing import SizeChange, rewrite

BIG_RELU = FIXTURES / "problems" / "relu_kernelbench_size.py"
HONEST_RELU = ROOT / "examples" / "kernelbench" / "level1" / "19_ReLU.py"
needs_dataset = pytest.mark.skipif(not KERNELBENCH_JSONL.is_file(), reason=f"the shared KernelBench dataset is "
                                   f"absent: {KERNELBENCH_JSONL} (or set TRITONGYM_KERNELBENCH_JSONL)")


@pytest.fixture
def service(tmp_path):
    svc = EvaluationService(ServiceConfig(db_path=tmp_path / "jobs.db", device="cpu"))
    yield svc
    svc.store.close()
    svc.events.close()


def kernelbench(problem_id: str) -> str:
    from tritongym.tasks import load_problems

    return next(p.source for p in load_problems(KERNELBENCH_JSONL) if p.problem_id == problem_id)


def test_absent_size_is_the_problem_as_sent_in_both_apis(service):
    big = service.problem_from_source(BIG_RELU.read_text())
    for size in (None, "original"):
        assert service.problem_at_size(big, size, {}) is big
    assert EvaluationItem(problem={"builtin": "builtin/01_scaled_add"}, solution="x").problem.size is None
    assert KernelGymRequest(task_id="t", kernel_code="x").size is None


def test_a_builtin_problem_is_its_own_cpu_size(service):
    problem = service.problem_by_builtin("builtin/02_leaky_relu")
    for size in ("cpu", "auto"):
        same = service.problem_at_size(problem, size, {})
        assert same.content_hash == problem.content_hash and same.size == "original"


def test_cpu_for_a_problem_the_server_cannot_size_is_a_422_naming_the_fix(service):
    # Sizing it would run the client's code outside the sandbox: refused, with both ways out named.
    big = service.problem_from_source(BIG_RELU.read_text(), name="relu_big")
    with pytest.raises(ServiceError) as refused:
        service.problem_at_size(big, "cpu", {})
    assert refused.value.status_code == 422
    assert "cpu_variant" in refused.value.message and "--size cpu" in refused.value.message
    assert service.problem_at_size(big, "auto", {}) is big  # auto leaves an unknown problem as sent


def test_a_variant_sent_as_source_is_its_own_cpu_size(service):
    # The client sized it (rewrite is what cpu_variant applies): the server takes it as it is.
    source = rewrite(BIG_RELU.read_text(), (SizeChange("batch_size", 4096, 16), SizeChange("dim", 393216, 64)))
    variant = service.problem_from_source(source)
    assert service.problem_at_size(variant, "cpu", {}) is variant and variant.size == "cpu"


def test_the_size_field_is_validated():
    with pytest.raises(ValueError, match="size"):
        EvaluationItem(problem={"builtin": "builtin/01_scaled_add", "size": "tiny"}, solution="x")
    with pytest.raises(ValueError, match="size"):
        KernelGymRequest(task_id="t", kernel_code="x", size="small")


@needs_dataset
def test_kernelbench_problems_get_their_shipped_cpu_size(service):
    relu = service.problem_from_source(kernelbench("kernelbench/level1/19"), name="19_ReLU",
                                       problem_id="kernelbench/level1/19")
    variant = service.problem_at_size(relu, "cpu", {})
    assert variant.size == "cpu" and variant.content_hash != relu.content_hash
    assert "batch_size = 64" in variant.source and "dim = 6144" in variant.source
    assert service.problem_by_hash(variant.content_hash).source == variant.source  # stored for the dispatcher
    # auto: the CPU size where the evaluation runs on a CPU (the server's device here), as sent on a GPU.
    assert service.problem_at_size(relu, "auto", {}).content_hash == variant.content_hash
    assert service.problem_at_size(relu, "auto", {"device": "cuda"}) is relu
    alexnet = service.problem_from_source(kernelbench("kernelbench/level3/5"), problem_id="kernelbench/level3/5")
    with pytest.raises(ServiceError) as refused:
        service.problem_at_size(alexnet, "cpu", {})
    assert refused.value.status_code == 422 and "no CPU size" in refused.value.message
    assert service.problem_at_size(alexnet, "auto", {}) is alexnet


@needs_dataset
@pytest.mark.slow
def test_native_and_kernelgym_requests_evaluate_the_cpu_size(http):
    source = kernelbench("kernelbench/level1/19")
    solution = HONEST_RELU.read_text()
    job = http.post("/v1/evaluate", json={"problem": {"source": source, "name": "19_ReLU", "size": "cpu"},
                                          "solution": solution}).json()
    assert job["state"] == "done", job
    assert job["result"]["status"] == "ok" and job["result"]["problem_size"] == "cpu"
    assert job["problem_hash"] != Problem.from_source(source).content_hash  # the variant's
    task = {"task_id": f"kg-size-{job['id'][:8]}", "reference_code": source, "kernel_code": solution,
            "backend": "triton", "num_correct_trials": 1, "size": "cpu"}
    body = http.post("/evaluate", json=task).json()
    assert body["correctness"] is True and body["tritongym"]["problem_size"] == "cpu"
    refused = http.post("/v1/evaluations", json={"items": [{"problem": {"source": BIG_RELU.read_text(),
                                                                        "size": "cpu"}, "solution": solution}]})
    assert refused.status_code == 422 and "--size cpu" in refused.json()["detail"]


def tritongym(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritongym.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.mark.slow
def test_run_with_server_sizes_on_the_client_and_writes_out(server, tmp_path):
    # A folder of problem files, one at KernelBench's size (6 GiB): the client sizes it (its own
    # file), the server evaluates the variant; --out gets the run's JSON lines.
    problems, solutions = tmp_path / "problems", tmp_path / "solutions"
    problems.mkdir()
    solutions.mkdir()
    shutil.copy(BIG_RELU, problems / "relu_big.py")
    shutil.copy(BUILTIN / "02_leaky_relu.py", problems / "leaky.py")
    shutil.copy(HONEST_RELU, solutions / "relu_big.py")
    (solutions / "leaky.py").write_text("def ModelNew(:\n")
    out = tmp_path / "results.jsonl"
    done = tritongym("run", "--problems", str(problems), "--solutions", str(solutions), "--size", "cpu",
                     "--device", "cpu", "--out", str(out), "--server", server.url)
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows["relu_big"]["status"] == "ok" and rows["relu_big"]["problem_size"] == "cpu"
    assert rows["leaky"]["status"] == "compile_error" and rows["leaky"]["problem_size"] == "original"
    assert f"2 evaluated on {server.url}" in done.stdout and "results written to" in done.stdout


def test_remote_size_follows_the_local_default():
    from argparse import Namespace

    from tritongym.service.cli import remote_size

    assert remote_size(Namespace(size="original", device="cpu")) == "original"
    assert remote_size(Namespace(size=None, device="cpu")) == "cpu"
    assert remote_size(Namespace(size=None, device="cuda:1")) == "original"
    assert remote_size(Namespace(size=None, device="auto")) == "auto"  # the server knows its device


def test_a_problem_file_keeps_its_identity_at_cpu_size():
    # What the client sends for --size cpu: the variant under the original's name and id.
    from tritongym.service.cli import _problem_at

    problem = load_problem_file(BUILTIN / "01_scaled_add.py")
    ref = _problem_at(problem, "cpu")
    assert ref == {"source": problem_source("01_scaled_add"), "name": problem.name, "problem_id": problem.problem_id,
                   "size": "cpu"}


@pytest.mark.slow
def test_eval_with_server_takes_an_id_as_the_local_eval_does(server, tmp_path):
    # `list` prints builtin/07_softmax; eval --server used to answer "problem file not found".
    solution = tmp_path / "candidate.py"
    solution.write_text("def ModelNew(:\n")
    done = tritongym("eval", "--problem", "builtin/02_leaky_relu", "--solution", str(solution), "--device", "cpu",
                     "--json", "--server", server.url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "compile_error"
    missing = tritongym("eval", "--problem", "builtin/99_nothing", "--solution", str(solution), "--server", server.url)
    assert missing.returncode == 2 and "tritongym list" in missing.stderr
