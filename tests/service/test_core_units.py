"""`EvaluationService` without HTTP, asserted by value: request options, text checks, problems (parsed,
cached, pruned, trusted), submission limits, cancelling, waiting, the event log and the dispatcher.

A real SQLite file throughout; the dispatcher tests start the service's own real pool and send candidates
the static gate refuses or that do not parse (real verdicts, in milliseconds), so no test here waits for an
evaluation. Cancelling a *running* job is tests/service/test_core.py's (slow).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest
from tests.conftest import KERNELBENCH_JSONL
from tests.execution.scaled_problems import SCALED_RELU
from tests.service.conftest import NO_TRITON, SYNTAX_ERROR

from tritongym.errors import OptionsError
from tritongym.evaluator.reward import RewardConfig
from tritongym.service.config import ServiceConfig
from tritongym.service.core import (
    EvaluationService,
    EventLog,
    JobSpec,
    ServiceError,
    _as_source,
    _fingerprint,
    _on_cpu,
    _Waiters,
    build_options,
    build_options_checked,
    check_text,
)
from tritongym.service.store import JobState, NewJob

SPIN = Path(__file__).resolve().parents[1] / "fixtures" / "candidates" / "relu_spin_until_killed.py"

PROBLEM = SCALED_RELU


def source(scale: int) -> str:
    return PROBLEM.format(scale=scale)


def config(tmp_path: Path, **overrides) -> ServiceConfig:
    return ServiceConfig(db_path=tmp_path / "jobs.db", **{"workers": 1, "device": "cpu", "sandbox": "bwrap",
                                                          **overrides})


@pytest.fixture
def service(tmp_path):
    service = EvaluationService(config(tmp_path, max_in_flight_per_client=3, max_batch=4, max_problems=2,
                                       max_solution_bytes=100, max_problem_bytes=1000, max_timeout_s=60.0))
    yield service
    service.stop()


def sample(service: EvaluationService, name: str, **labels: str) -> float | None:
    return service.metrics.registry.get_sample_value(name, labels or None)


def events(service: EvaluationService) -> list[dict]:
    return [json.loads(line) for line in service.config.event_log.read_text().splitlines()]


# -- options, fingerprints, text ---------------------------------------------------------------


def test_build_options_applies_the_servers_device_and_sandbox_and_converts_collections(tmp_path):
    cfg = config(tmp_path, max_timeout_s=60.0)
    options = build_options({"num_trials": 2, "reward": {"correct_weight": 0.25},
                             "disabled_checks": ["pytorch_fallback"], "input_families": ["negated"]}, cfg)
    assert options.reward == RewardConfig(correct_weight=0.25) and options.num_trials == 2
    assert options.disabled_checks == frozenset({"pytorch_fallback"}) and options.input_families == ("negated",)
    assert (options.device, options.sandbox) == ("cpu", "bwrap")
    assert build_options({"device": "cuda", "sandbox": "bwrap", "timeout": 60.0}, cfg).device == "cuda"
    assert build_options({"timeout": 60}, cfg).timeout == 60  # at the limit: allowed
    # A bool is not compared with the server's limit as a number: EvalOptions refuses it as what it is.
    with pytest.raises(OptionsError, match="timeout must be a positive number, got True"):
        build_options({"timeout": True}, config(tmp_path, max_timeout_s=0.5))
    assert build_options({}, cfg).input_families == ("negated", "scaled", "offset")


@pytest.mark.parametrize(("fields", "message", "whole"), [
    ({"reward": [1]}, "reward must be an object of RewardConfig weights", True),
    ({"reward": {"nope": 1}}, "reward: ", False),
    ({"sandbox": "none"}, "the sandbox mode is set by the server (bwrap); leave 'sandbox' out", True),
    ({"timeout": 60.5}, "timeout 60.5 exceeds this server's limit of 60 s", True),
    ({"no_such_option": 1}, "no_such_option", False),
    # Not a list of names: refused naming the field (these raised TypeError, a 500, through a library caller).
    ({"input_families": 5}, "input_families must be a list of names, got 5", True),
    ({"disabled_checks": 5}, "disabled_checks must be a list of names, got 5", True),
    ({"disabled_checks": [["x"]]}, "disabled_checks must be a list of names, got [['x']]", True),
])
def test_build_options_refuses_with_the_reason(tmp_path, fields, message, whole):
    cfg = config(tmp_path, max_timeout_s=60.0)
    with pytest.raises(OptionsError) as refused:
        build_options(fields, cfg)
    if whole:
        assert str(refused.value) == message
    else:
        assert str(refused.value).startswith(message) or message in str(refused.value)
    with pytest.raises(ServiceError) as checked:
        build_options_checked(fields, cfg)
    assert checked.value.status_code == 422 and checked.value.message == f"invalid options: {refused.value}"
    assert str(checked.value) == checked.value.message and checked.value.headers is None


def test_fingerprints_are_the_sha256_of_problem_solution_and_sorted_options():
    spec = JobSpec("h", "code", {"b": 1, "a": 2})
    expected = hashlib.sha256(json.dumps(["h", "code", {"a": 2, "b": 1}]).encode()).hexdigest()
    assert _fingerprint(spec) == expected
    assert _fingerprint(JobSpec("h", "code", {"a": 2, "b": 1}, idempotency_key="k", extra={"x": 1})) == expected
    assert _fingerprint(JobSpec("h", "code2", {"a": 2, "b": 1})) != expected
    assert len(_fingerprint(JobSpec("h", "\ud800", {}))) == 64  # a lone surrogate is hashed, not a crash


def test_check_text_names_the_flaw_and_its_offset():
    assert check_text("f", "fine \ud7ff \ue000 text") == "fine \ud7ff \ue000 text"
    with pytest.raises(ServiceError) as nul:
        check_text("solution", "ab\0c")
    assert (nul.value.status_code, nul.value.message) == (
        422, "solution contains a NUL character at offset 2; send text without NUL")
    for char in ("\ud800", "\udfff"):
        with pytest.raises(ServiceError) as lone:
            check_text("problem source", "x" + char)
        assert lone.value.status_code == 422
        assert lone.value.message == (f"problem source contains a lone surrogate (U+{ord(char):04X}) at offset 1; "
                                      "send valid Unicode text (UTF-8)")


def test_a_one_line_solution_gets_a_newline_so_it_is_never_read_as_a_path():
    assert _as_source("model.py") == "model.py\n"
    assert _as_source("a\nb") == "a\nb"


# -- event log and waiters ---------------------------------------------------------------------


def test_the_event_log_appends_one_flushed_line_per_event(tmp_path):
    path = tmp_path / "deep" / "er" / "events.jsonl"  # missing folders are made, however many
    log = EventLog(path)
    log.write({"a": 1, "p": Path("/x")})
    assert path.read_text() == '{"a": 1, "p": "/x"}\n'  # flushed at once; str() for what JSON lacks
    log.write({"b": 2})
    log.close()
    log.write({"c": 3})  # after close: dropped, no error
    assert path.read_text().splitlines() == ['{"a": 1, "p": "/x"}', '{"b": 2}']
    again = EventLog(path)  # appends
    again.write({"d": 4})
    again.close()
    assert len(path.read_text().splitlines()) == 3


def test_waiters_are_woken_with_the_record_and_unregister_only_their_own():
    waiters = _Waiters()

    async def scenario():
        one = waiters.register(["a", "b"])
        two = waiters.register(["a"])
        three = waiters.register(["c"])
        waiters.unregister(["a"], two)
        waiters.notify("a", "record-a")
        waiters.notify("zzz")  # nobody waits: nothing happens
        assert await asyncio.wait_for(one, 5) == "record-a"
        assert not two.done()
        assert waiters._by_job.keys() == {"b", "c"}
        waiters.unregister(["b"], one)
        assert waiters._by_job.keys() == {"c"}
        threading.Thread(target=waiters.notify, args=("c",)).start()  # from another thread
        assert await asyncio.wait_for(three, 5) is None
        assert waiters._by_job == {}
        four = waiters.register(["d"])
        four.set_result("already")
        waiters.notify("d", "late")  # a resolved future is left as it is
        await asyncio.sleep(0)
        assert four.result() == "already"

    asyncio.run(scenario())
    orphan: list = []

    async def register_and_leave():
        orphan.append(waiters.register(["e"]))

    asyncio.run(register_and_leave())
    waiters.notify("e", "record")  # its loop has closed: ignored
    assert "e" not in waiters._by_job


# -- problems ----------------------------------------------------------------------------------


def test_problems_from_source_are_checked_named_parsed_once_and_stored(service):
    inline = service.problem_from_source(source(1))
    digest = inline.content_hash[:12]
    assert (inline.problem_id, inline.name) == (f"inline/{digest}", f"inline_{digest}")
    assert service.problem_from_source(source(1)) is inline  # parsed once
    stored = service.store.get_problem(inline.content_hash)
    assert (stored.name, stored.problem_id, stored.registered) == (inline.name, inline.problem_id, False)
    named = service.problem_from_source(source(2), name="relu2", registered=True)
    assert (named.name, named.problem_id) == ("relu2", "relu2")
    assert service.store.get_problem(named.content_hash).registered
    both = service.problem_from_source(source(3), name="n3", problem_id="set/3")
    assert (both.name, both.problem_id) == ("n3", "set/3")
    only_id = service.problem_from_source(source(4), problem_id="set/4")
    assert (only_id.name, only_id.problem_id) == ("problem", "set/4")
    assert service.problem_by_hash(named.content_hash) is named
    # Registering the same text later marks the stored problem registered.
    assert service.problem_from_source(source(1), registered=True) is inline
    assert service.store.get_problem(inline.content_hash).registered


@pytest.mark.parametrize(("text", "name", "status", "start"), [
    ("x" * 1001, None, 413, "problem source is larger than 1000 bytes"),
    ("\u00e9" * 501, None, 413, "problem source is larger than 1000 bytes"),  # bytes, not characters
    ("import torch\0", None, 422, "problem source contains a NUL character at offset 12"),
    (PROBLEM.format(scale=1), "bad\0name", 422, "problem name contains a NUL character"),
    ("import torch\n", None, 422, "malformed problem: "),
    ("def f(:\n", None, 422, "malformed problem: "),
])
def test_malformed_problems_are_refused_with_the_reason(service, text, name, status, start):
    with pytest.raises(ServiceError) as refused:
        service.problem_from_source(text, name=name)
    assert refused.value.status_code == status and refused.value.message.startswith(start)
    assert len(refused.value.message) < 500


def test_a_problem_the_parser_cannot_hold_is_refused_as_the_problems_flaw(tmp_path):
    service = EvaluationService(config(tmp_path))
    try:
        with pytest.raises(ServiceError) as refused:
            service.problem_from_source("x = " + "-" * 100_000 + "1\n")  # too deep for the parser
        assert refused.value.status_code == 422
        assert refused.value.message.startswith("malformed problem: not valid Python: MemoryError")
    finally:
        service.stop()


def test_a_problem_of_exactly_the_size_limit_is_taken(service):
    text = source(1)
    text += "#" * (1000 - len(text.encode()) - 1) + "\n"
    assert len(text.encode()) == 1000
    assert service.problem_from_source(text).source == text


def test_a_malformed_problem_is_named_as_the_loader_saw_it(service, tmp_path):
    with pytest.raises(ServiceError) as unnamed:
        service.problem_from_source("import torch\n")
    assert unnamed.value.message.startswith("malformed problem: problem 'inline' (inline) does not define Model")
    with pytest.raises(ServiceError) as named:
        service.problem_from_source("import torch\n", name="mine")
    assert named.value.message.startswith("malformed problem: problem 'mine' (inline) does not define Model")
    roomy = EvaluationService(config(tmp_path / "roomy"))
    try:
        with pytest.raises(ServiceError) as deep:
            roomy.problem_from_source("x = " + "1+" * 30000 + "1\n")  # the parser's own RecursionError
        assert deep.value.message == ("malformed problem: not valid Python: RecursionError: maximum recursion "
                                      "depth exceeded during ast construction")
    finally:
        roomy.stop()


def test_a_problem_id_with_nul_is_refused(service):
    with pytest.raises(ServiceError, match="problem_id contains a NUL character at offset 1"):
        service.problem_from_source(source(1), problem_id="a\0")


def test_the_parse_cache_keeps_the_256_texts_parsed_last(service):
    first = service.problem_from_source(source(1000))
    for n in range(1001, 1256):
        service.problem_from_source(source(n))
    assert len(service._parsed) == 256
    assert service.problem_from_source(source(1000)) is first  # 256 texts: still cached
    service.problem_from_source(source(1256))  # the 257th: the first parsed (source 1000) goes
    assert len(service._parsed) == 256
    assert (source(1000), None, None) not in service._parsed and (source(1001), None, None) in service._parsed
    assert service.problem_from_source(source(1000)) is not first  # parsed again


def test_built_in_problems_by_id_or_name_and_the_message_for_an_unknown_one(service):
    by_id = service.problem_by_builtin("builtin/01_scaled_add")
    assert service.problem_by_builtin(by_id.name) is by_id
    assert service.store.get_problem(by_id.content_hash).registered is False
    with pytest.raises(ServiceError) as unknown:
        service.problem_by_builtin("nope")
    ids = sorted(p for p in service.builtin_problems() if "/" in p)
    assert unknown.value.status_code == 422
    assert unknown.value.message == f"unknown built-in problem 'nope'; built-in ids are {', '.join(ids)}"
    assert "builtin/01_scaled_add" in ids and by_id.name not in unknown.value.message.split("; ")[1].split(", ")


def test_only_built_in_problem_code_is_trusted(service):
    builtin = service.problem_by_builtin("builtin/01_scaled_add")
    assert service.trusted_problem(builtin.content_hash)
    assert not service.trusted_problem(service.problem_from_source(source(5)).content_hash)
    # The same bytes sent by a client are the built-in problem.
    assert service.trusted_problem(service.problem_from_source(builtin.source, name="mine").content_hash)
    assert not service.trusted_problem("0" * 64)


def test_problems_by_hash_from_the_cache_or_the_store(service, tmp_path):
    problem = service.problem_from_source(source(6), name="six", problem_id="p/6")
    with pytest.raises(ServiceError) as unknown:
        service.problem_by_hash("abc")
    assert unknown.value.status_code == 422 and unknown.value.message == (
        "unknown problem hash 'abc': register the problem first (POST /v1/problems) or send its source")
    other = EvaluationService(service.config)  # the same file, an empty cache
    try:
        loaded = other.problem_by_hash(problem.content_hash)
        assert (loaded.source, loaded.name, loaded.problem_id, loaded.level) == (problem.source, "six", "p/6", None)
        assert other.problem_by_hash(problem.content_hash) is loaded  # cached now
    finally:
        other.stop()


def test_a_problems_level_is_stored_and_read_back(service):
    from tritongym.tasks import Problem

    leveled = service.store_problem(Problem(source=source(18), name="l2", problem_id="set/l2", level=2),
                                    registered=True)
    assert service.store.get_problem(leveled.content_hash).level == 2
    other = EvaluationService(service.config)  # the same file, an empty cache: read from the store
    try:
        assert other.problem_by_hash(leveled.content_hash).level == 2
    finally:
        other.stop()


def test_pruning_problems_another_process_registered(service):
    # Problems this process never cached (registered by another process on the same file) are pruned too.
    other = EvaluationService(service.config)
    try:
        for n in (20, 21, 22):
            other.problem_from_source(source(n), registered=True)
    finally:
        other.stop()
    assert service._problems == {} and service.prune_problems() == 1  # max_problems 2


def test_the_problem_cache_keeps_the_latest_512(service):
    from tritongym.tasks import Problem

    problems = [Problem(source=source(7) + f"v = {n}\n", name=f"p{n}", problem_id=f"p/{n}") for n in range(513)]
    for problem in problems[:512]:
        service.store_problem(problem, registered=False)
    assert service._cached_problem(problems[0].content_hash) is problems[0]
    service.store_problem(problems[0], registered=False)  # used again: now the newest
    service.store_problem(problems[512], registered=False)
    assert len(service._problems) == 512
    assert service._cached_problem(problems[1].content_hash) is None  # the least recently stored went
    assert service._cached_problem(problems[0].content_hash) is problems[0]


def test_pruning_problems_forgets_them_here_too(service):
    kept_by_job = service.problem_from_source(source(8), registered=True)
    old = service.problem_from_source(source(9), registered=True)
    newer = service.problem_from_source(source(10), registered=True)
    newest = service.problem_from_source(source(11), registered=True)
    service.submit([JobSpec(kept_by_job.content_hash, NO_TRITON, {})], client="c")
    assert service.prune_problems() == 1  # max_problems 2: newest, newer kept; the used one too
    with pytest.raises(ServiceError, match="unknown problem hash"):
        service.problem_by_hash(old.content_hash)
    assert service.problem_by_hash(newer.content_hash) is newer
    assert service.problem_by_hash(kept_by_job.content_hash) is kept_by_job
    assert service.problem_from_source(source(9)) is not old  # parsed again
    assert service.problem_from_source(source(10)) is newer
    assert service.prune_problems() == 0
    # By age: every registered unused one (source 9 is stored again, unregistered: `prune`'s, not this).
    assert service.prune_problems(max_age_s=0) == 2
    assert service.problem_by_hash(kept_by_job.content_hash) is kept_by_job
    assert newest.content_hash not in service._problems


# -- problem sizes ------------------------------------------------------------------------------

needs_dataset = pytest.mark.skipif(not KERNELBENCH_JSONL.is_file(), reason=f"the shared KernelBench dataset is "
                                   f"absent: {KERNELBENCH_JSONL} (or set TRITONGYM_KERNELBENCH_JSONL)")


def kernelbench(*problem_ids: str) -> list[str]:
    from tritongym.tasks import load_problems

    by_id = {p.problem_id: p.source for p in load_problems(KERNELBENCH_JSONL)}
    return [by_id[i] for i in problem_ids]


def test_only_a_cuda_device_is_a_gpu_and_auto_follows_what_this_process_sees():
    import torch

    assert _on_cpu("cpu") and not _on_cpu("cuda") and not _on_cpu("cuda:1")
    assert _on_cpu("auto") is (not torch.cuda.is_available())


@needs_dataset
def test_problem_sizes_by_value(tmp_path):
    """Each size on a problem the shipped table scales (KernelBench's 19_ReLU) and one it cannot size
    (3/5, AlexNet), with the request's device before the server's; the variant is stored unregistered."""
    relu_source, alexnet_source = kernelbench("kernelbench/level1/19", "kernelbench/level3/5")
    gpu = EvaluationService(config(tmp_path / "gpu", device="cuda"))  # a GPU server (nothing runs here)
    cpu = EvaluationService(config(tmp_path / "cpu"))
    try:
        for service in (cpu, gpu):
            relu = service.problem_from_source(relu_source, name="19_ReLU", problem_id="kernelbench/level1/19",
                                               registered=True)
            for size in (None, "original"):
                assert service.problem_at_size(relu, size, {}) is relu
            variant = service.problem_at_size(relu, "cpu", {"device": "cuda"})  # cpu: whatever the device
            assert variant.size == "cpu" and variant.content_hash != relu.content_hash
            assert (variant.name, variant.problem_id) == ("19_ReLU", "kernelbench/level1/19")
            assert "batch_size = 64" in variant.source and "dim = 6144" in variant.source
            stored = service.store.get_problem(variant.content_hash)
            assert stored.source == variant.source and stored.registered is False
            assert service.problem_by_hash(variant.content_hash) is variant
            assert service.store.get_problem(relu.content_hash).registered  # the original is left as it was
            # The variant sent again is its own CPU size (the same object, stored as it was).
            assert service.problem_at_size(variant, "cpu", {}) is variant
        # auto: the CPU size where the evaluation runs on a CPU, the request's device first.
        for service, options, sized in ((cpu, {}, True), (cpu, {"device": "cpu"}, True),
                                        (cpu, {"device": "cuda"}, False), (cpu, {"device": "cuda:0"}, False),
                                        (gpu, {}, False), (gpu, {"device": "cpu"}, True),
                                        (gpu, {"device": None}, False)):
            relu = service.problem_by_hash(service.problem_from_source(relu_source).content_hash)
            got = service.problem_at_size(relu, "auto", options)
            assert (got is not relu and got.size == "cpu") is sized, (service.config.device, options)
            if not sized:
                assert got is relu
        # A problem the table knows has no CPU size: a 422 with the table's reason; auto keeps it as sent.
        alexnet = cpu.problem_from_source(alexnet_source, problem_id="kernelbench/level3/5")
        with pytest.raises(ServiceError) as cannot:
            cpu.problem_at_size(alexnet, "cpu", {})
        assert cannot.value.status_code == 422 and cannot.value.message.startswith(
            "size 'cpu': kernelbench/level3/5 has ")
        assert cpu.problem_at_size(alexnet, "auto", {}) is alexnet
        assert gpu.problem_at_size(alexnet, "auto", {"device": "cpu"}) is alexnet
    finally:
        cpu.stop()
        gpu.stop()


def test_cpu_size_of_a_problem_the_server_cannot_size_is_a_422_naming_both_ways_out(service):
    unknown = service.problem_from_source(source(3), problem_id="mine/3")
    with pytest.raises(ServiceError) as refused:
        service.problem_at_size(unknown, "cpu", {})
    assert (refused.value.status_code, refused.value.message) == (422, (
        "size 'cpu': no CPU size is known for problem 'mine/3' (this server sizes KernelBench's and the "
        "built-in problems; it never runs a client's problem code outside the sandbox to size it): send its "
        "CPU-size variant as the source (tritongym.tasks.sizing.cpu_variant(problem), or tritongym run --server "
        "--size cpu, which sizes on the client), or 'original'"))
    assert service.problem_at_size(unknown, "auto", {}) is unknown
    assert service.problem_at_size(unknown, "auto", {"device": "cpu"}) is unknown
    # A built-in problem is its own CPU size (the table's "unchanged"): the same object back.
    builtin = service.problem_by_builtin("builtin/02_leaky_relu")
    assert service.problem_at_size(builtin, "cpu", {}) is builtin


# -- submitting, cancelling, waiting -----------------------------------------------------------


def test_solutions_are_bounded_in_bytes_and_checked(service):
    assert service.check_solution("x = 1") == "x = 1\n"
    assert service.check_solution("a" * 100) == "a" * 100 + "\n"
    for too_big in ("a" * 101, "\u00e9" * 51):
        with pytest.raises(ServiceError) as refused:
            service.check_solution(too_big)
        assert (refused.value.status_code, refused.value.message) == (413, "solution is larger than 100 bytes")
    with pytest.raises(ServiceError, match="solution contains a NUL"):
        service.check_solution("a\0")


def test_a_batch_is_refused_whole_with_the_reason(service):
    h = service.problem_from_source(source(12)).content_hash
    cases = [
        ([], 422, "the batch is empty"),
        ([JobSpec(h, "x\n", {})] * 5, 422, "a batch holds at most 4 items, got 5"),
        ([JobSpec(h, "x\n", {}), JobSpec(h, "x\n", {"sandbox": "none"})], 422, "invalid options: the sandbox"),
        ([JobSpec(h, "x\n", {}, idempotency_key="k\0")], 422, "idempotency_key contains a NUL"),
    ]
    for specs, status, start in cases:
        with pytest.raises(ServiceError) as refused:
            service.submit(specs, client="c")
        assert refused.value.status_code == status and refused.value.message.startswith(start)
    assert service.store.count_unfinished() == 0


def test_a_batch_of_exactly_the_limits_is_taken(tmp_path):
    service = EvaluationService(config(tmp_path, max_batch=2, max_in_flight_per_client=2))
    try:
        h = service.problem_from_source(source(19)).content_hash
        assert [created for _, created in service.submit([JobSpec(h, "a\n", {}), JobSpec(h, "b\n", {})],
                                                         client="c")] == [True, True]
        assert service.store.count_unfinished("c") == 2
        assert {record.api for record, _ in service.submit([JobSpec(h, "a\n", {})], client="d")} == {"native"}
    finally:
        service.stop()


def test_per_client_limits_idempotency_and_what_a_job_stores(service, caplog):
    caplog.set_level("INFO", logger="tritongym.service")
    h = service.problem_from_source(source(13)).content_hash
    spec = JobSpec(h, "x\n", {"num_trials": 2}, idempotency_key="k1", extra={"n": 1})
    [(record, created)] = service.submit([spec], client="alice", api="kernelgym")
    assert created and record.state == JobState.QUEUED and service.get(record.id) == record
    assert (record.client, record.api, record.problem_hash, record.solution, record.options, record.extra,
            record.fingerprint, record.idempotency_key) == (
        "alice", "kernelgym", h, "x\n", {"num_trials": 2}, {"n": 1}, _fingerprint(spec), "k1")
    assert len(record.id) == 32
    [(again, created)] = service.submit([spec], client="alice")
    assert again.id == record.id and not created
    assert sample(service, "tritongym_jobs_submitted_total") == 1.0  # a repeat is not counted
    with pytest.raises(ServiceError) as conflict:
        service.submit([JobSpec(h, "y\n", {}, idempotency_key="k1")], client="alice")
    assert conflict.value.status_code == 409 and "k1" in conflict.value.message
    # alice has 1 unfinished: two more reach the limit of 3, a third is one too many.
    service.submit([JobSpec(h, "a\n", {}), JobSpec(h, "b\n", {})], client="alice")
    with pytest.raises(ServiceError) as limited:
        service.submit([JobSpec(h, "c\n", {})], client="alice")
    assert limited.value.status_code == 429 and limited.value.headers == {"Retry-After": "5"}
    assert limited.value.message == ("client 'alice' has 3 unfinished jobs; the limit is 3 "
                                     "(wait for results, then submit more)")
    assert len(service.submit([JobSpec(h, "c\n", {})] * 3, client="bob")) == 3  # per client
    assert sample(service, "tritongym_jobs_submitted_total") == 6.0
    assert service.in_flight() == 0  # not started: nothing dispatched, and not tried (no dispatch error)
    assert caplog.records == []


def test_cancelling_a_queued_job_stores_it_once_with_its_event(service):
    h = service.problem_from_source(source(14)).content_hash
    [(record, _)] = service.submit([JobSpec(h, "x\n", {})], client="carol", api="native")
    assert service.cancel("unknown") is None
    cancelled = service.cancel(record.id)
    assert cancelled.state == JobState.CANCELLED and cancelled.error == "cancelled by a client"
    assert cancelled.result is None and cancelled.finished is not None
    assert service.cancel(record.id) == cancelled  # final: left as it is
    [event] = events(service)
    assert set(event) == {"time", "job", "api", "client", "problem_hash", "state", "attempt", "queued_s", "error"}
    assert (event["job"], event["api"], event["client"], event["problem_hash"], event["state"], event["attempt"],
            event["error"]) == (record.id, "native", "carol", h, "cancelled", 0, "cancelled by a client")
    assert 0 <= event["queued_s"] < 60 and event["time"] >= record.submitted
    # Seconds from submission to this outcome, a float rounded to 0.1 ms.
    assert isinstance(event["queued_s"], float) and event["queued_s"] == round(event["queued_s"], 4)
    assert abs(event["queued_s"] - (event["time"] - record.submitted)) < 0.01
    assert sample(service, "tritongym_jobs_finished_total", state="cancelled") == 1.0
    # A finished job can be replaced (its key freed); an unfinished one cannot.
    [(other, _)] = service.submit([JobSpec(h, "y\n", {}, idempotency_key="k")], client="carol")
    service.replace_final(other)
    assert service.get(other.id) is not None
    service.replace_final(cancelled)
    assert service.get(record.id) is None


def test_waiting_returns_final_jobs_at_once_at_the_timeout_or_when_one_ends(service):
    import time

    h = service.problem_from_source(source(15)).content_hash
    [(a, _), (b, _)] = service.submit([JobSpec(h, "a\n", {}), JobSpec(h, "b\n", {})], client="c")
    service.cancel(a.id)

    async def scenario():
        assert set(await service.wait_final([a.id, a.id], 5)) == {a.id}  # duplicates once
        assert set(await service.wait_final([a.id, b.id], 0)) == {a.id}  # b unfinished: only a, at once
        assert [r.id for r in await service.next_final([a.id, b.id], 5)] == [a.id]
        assert await service.next_final([b.id], 0.05) == []
        started, cpu = asyncio.get_running_loop().time(), time.process_time()
        assert await service.wait_final([b.id], 1.0) == {}  # nothing final: empty once the timeout passed
        assert 1.0 <= asyncio.get_running_loop().time() - started < 10
        assert time.process_time() - cpu < 0.2  # it waited for a notice, it did not poll the store
        # b ends while both calls wait.
        waiting = asyncio.ensure_future(service.wait_final([b.id], 30))
        nexting = asyncio.ensure_future(service.next_final([b.id], 30))
        await asyncio.sleep(0.2)
        assert not waiting.done() and not nexting.done()
        await asyncio.to_thread(service.cancel, b.id)
        done = await asyncio.wait_for(waiting, 10)
        assert list(done) == [b.id] and done[b.id].state == JobState.CANCELLED
        assert done[b.id] == service.get(b.id)  # the record handed to the waiter is the stored one
        assert [r.id for r in await asyncio.wait_for(nexting, 10)] == [b.id]
        assert service.waiters._by_job == {}

    asyncio.run(scenario())


# -- the dispatcher over the service's own pool ------------------------------------------------


def wait_done(service: EvaluationService, ids: list[str]) -> dict:
    final = asyncio.run(service.wait_final(ids, 120))
    assert set(final) == set(ids), "jobs did not finish"
    return final


def test_started_jobs_are_evaluated_stored_logged_and_counted(tmp_path):
    import time

    before = time.time()
    service = EvaluationService(config(tmp_path, dispatch_depth=None))
    assert before <= service.started_at <= time.time()
    assert (service.ready, service.requeued_at_start, service.in_flight()) == (False, 0, 0)  # until start()
    # A job left running by a previous process is requeued at the start.
    problem = service.problem_by_builtin("builtin/01_scaled_add")
    service.store.insert_jobs([NewJob(id="left", idempotency_key=None, fingerprint="f", client="old", api="native",
                                      problem_hash=problem.content_hash, solution=NO_TRITON, options={})])
    assert [r.id for r in service.store.claim_queued(1, set())] == ["left"]
    service.start()
    try:
        assert service.requeued_at_start == 1 and service.ready
        assert service._depth == 4  # 4 per worker by default
        records = service.submit([JobSpec(problem.content_hash, NO_TRITON, {}),
                                  JobSpec(problem.content_hash, SYNTAX_ERROR, {})], client="c")
        ids = [r.id for r, _ in records]
        final = wait_done(service, ["left", *ids])
        statuses = [final[i].result["status"] for i in ids]
        assert statuses == ["integrity_violation", "compile_error"]
        assert all(final[i].state == JobState.DONE and final[i].error is None for i in ["left", *ids])
        assert final["left"].attempts == 2  # run once before, requeued, run again
        lines = {e["job"]: e for e in events(service)}
        assert lines[ids[1]]["result"]["status"] == "compile_error" and "error" not in lines[ids[1]]
        assert lines[ids[0]]["state"] == "done" and lines[ids[0]]["queued_s"] >= 0
        assert sample(service, "tritongym_jobs_finished_total", state="done") == 3.0
        assert sample(service, "tritongym_verdicts_total", status="compile_error") == 1.0
        assert service.in_flight() == 0
    finally:
        service.stop()
    assert not service.ready and service.pool._closed  # the service's own pool is closed with it


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2, reason="needs 2+ cores")
def test_starting_logs_the_requeued_jobs_and_splits_this_process_torch_threads_over_the_slots(tmp_path, caplog):
    import torch

    service = EvaluationService(config(tmp_path))
    problem = service.problem_by_builtin("builtin/01_scaled_add")
    service.store.insert_jobs([NewJob(id="left", idempotency_key=None, fingerprint="f", client="old", api="native",
                                      problem_hash=problem.content_hash, solution=NO_TRITON, options={})])
    service.store.claim_queued(1, set())
    threads, affinity = torch.get_num_threads(), os.sched_getaffinity(0)
    torch.set_num_threads(3)
    # The cores this process may use, not the machine's: one core allowed here, so one torch thread.
    os.sched_setaffinity(0, {min(affinity)})
    try:
        with caplog.at_level("INFO", logger="tritongym.service"):
            service.start()
        assert torch.get_num_threads() == 1
        assert ("tritongym.service", 20, "requeued 1 job(s) left running by the previous process") in \
            caplog.record_tuples
        wait_done(service, ["left"])
    finally:
        os.sched_setaffinity(0, affinity)
        torch.set_num_threads(threads)
        service.stop()


def test_the_dispatch_depth_is_four_jobs_per_slot_unless_set(tmp_path):
    for workers, depth, expected in ((2, None, 8), (2, 3, 3)):
        service = EvaluationService(config(tmp_path / f"{workers}-{depth}", dispatch_depth=depth, workers=workers))
        service.start()
        try:
            assert service.pool.workers == workers and service._depth == expected
            assert service._dispatcher.name == "tritongym-service-dispatch" and service._dispatcher.daemon
        finally:
            service.stop()


def test_the_dispatcher_prunes_by_count_then_by_age_jobs_and_problems(tmp_path):
    import time

    service = EvaluationService(config(tmp_path, max_finished=2, retention_s=5.0, prune_interval_s=0.2))
    service.start()
    try:
        problem = service.problem_by_builtin("builtin/01_scaled_add")
        registered = service.problem_from_source(source(17), registered=True)
        ids = [r.id for r, _ in service.submit([JobSpec(problem.content_hash, NO_TRITON + f"# {n}\n", {})
                                                for n in range(4)], client="c")]
        wait_done(service, ids)

        def until(condition, what):
            deadline = time.monotonic() + 20
            while not condition():
                assert time.monotonic() < deadline, what
                time.sleep(0.05)

        until(lambda: sum(service.store.count_by_state().values()) == 2, "not pruned to max_finished")
        assert sample(service, "tritongym_jobs_pruned_total") == 2.0
        # Past the 5 s retention: the finished jobs go, then the problems nothing needs.
        until(lambda: sum(service.store.count_by_state().values()) == 0, "not pruned by age")
        assert sample(service, "tritongym_jobs_pruned_total") == 4.0
        until(lambda: service.store.count_problems(registered_only=False) == 0, "problems not pruned by age")
        with pytest.raises(ServiceError, match="unknown problem hash"):
            service.problem_by_hash(registered.content_hash)
    finally:
        service.stop()


def test_the_dispatcher_outlives_a_failing_store_and_logs_each_failure(tmp_path, caplog):
    import time

    caplog.set_level("INFO", logger="tritongym.service")
    service = EvaluationService(config(tmp_path))
    service.start()
    try:
        service.store.close()  # every store call fails from here on (a closed database)

        def failures() -> list:
            return [r for r in caplog.records if r.getMessage() == "dispatch failed; retrying"]

        deadline = time.monotonic() + 20
        while len(failures()) < 2:  # it failed, backed off, woke again and failed again
            assert time.monotonic() < deadline, "the dispatcher stopped retrying"
            time.sleep(0.05)
        assert service._dispatcher.is_alive()
        first = failures()[0]
        assert first.levelname == "ERROR" and first.exc_info is not None  # with the store's exception
    finally:
        service.stop()


def test_a_stored_job_the_service_cannot_run_fails_with_the_reason(tmp_path):
    service = EvaluationService(config(tmp_path, dispatch_depth=2))
    problem = service.problem_by_builtin("builtin/01_scaled_add")
    for job_id, problem_hash, options in (("lost", "f" * 64, {}), ("badopt", problem.content_hash, {"nope": 1})):
        service.store.insert_jobs([NewJob(id=job_id, idempotency_key=None, fingerprint="f", client="c",
                                          api="native", problem_hash=problem_hash, solution=NO_TRITON,
                                          options=options)])
    service.start()
    try:
        assert service._depth == 2
        final = wait_done(service, ["lost", "badopt"])
        assert final["lost"].state == JobState.FAILED and final["lost"].error.startswith(
            f"unknown problem hash '{'f' * 64}': register the problem first")
        assert final["badopt"].state == JobState.FAILED and "nope" in final["badopt"].error
        assert final["badopt"].result is None
    finally:
        service.stop()


def test_jobs_the_pool_cancels_or_that_raise_are_stored_with_the_reason(tmp_path):
    import time

    service = EvaluationService(config(tmp_path, dispatch_depth=2))
    service.start()
    try:
        builtin = service.problem_by_builtin("builtin/01_scaled_add")
        relu = service.problem_from_source((Path(__file__).resolve().parents[1] / "sandbox" /
                                            "relu_problem.py").read_text(), name="relu")
        raising = service.problem_from_source(source(16).replace("return [torch.randn(4, 8)]",
                                                                 'raise RuntimeError("no inputs today")'))
        spin = {"timeout": 120.0, "num_trials": 1, "input_families": []}
        [(spinner, _), (queued, _)] = service.submit(
            [JobSpec(relu.content_hash, SPIN.read_text(), spin), JobSpec(builtin.content_hash, NO_TRITON, {})],
            client="c")
        deadline = time.monotonic() + 60
        while service.in_flight() < 2 or service.pool.stats().busy < 1:
            assert time.monotonic() < deadline, "the jobs never reached the pool"
            time.sleep(0.05)
        # The pool cancels the job waiting in its queue by itself (not the client): stored as cancelled.
        with service._inflight_lock:
            waiting = service._inflight[queued.id]
        assert service.pool.cancel(waiting)
        [stored] = asyncio.run(service.wait_final([queued.id], 30)).values()
        assert (stored.state, stored.error, stored.result) == (JobState.CANCELLED, "cancelled", None)
        # The client cancels the running one: its candidate is killed, so the pool answers long before
        # the candidate's 120 s budget, and the slot is free again.
        cancelled_at = time.monotonic()
        assert service.cancel(spinner.id).state == JobState.CANCELLED
        while service.in_flight() or service.pool.stats().busy:
            assert time.monotonic() - cancelled_at < 60, "the running candidate was not killed"
            time.sleep(0.05)
        assert service.get(spinner.id).error == "cancelled by a client"
        assert service.pool.stats().cancelled == 2
        # A problem whose code raises: the job fails with the exception named, and no verdict.
        honest = (SPIN.parent / "relu_honest.py").read_text()  # passes the static gate: the reference runs
        [(broken, _)] = service.submit([JobSpec(raising.content_hash, honest, spin)], client="c")
        [failed] = asyncio.run(service.wait_final([broken.id], 120)).values()
        assert failed.state == JobState.FAILED and failed.result is None
        assert failed.error.startswith("ProblemError: ") and "no inputs today" in failed.error
        lines = {e["job"]: e for e in events(service)}
        assert lines[queued.id]["error"] == "cancelled" and lines[broken.id]["state"] == "failed"
    finally:
        service.stop()


def test_a_built_in_problems_reference_runs_trusted_and_a_clients_in_the_jail(tmp_path):
    # Where each reference ran shows in the pool's warm reference servers: one per (device, jailed).
    service = EvaluationService(config(tmp_path, dispatch_depth=2))
    service.start()
    try:
        relu = service.problem_from_source((Path(__file__).resolve().parents[1] / "sandbox" /
                                            "relu_problem.py").read_text(), name="relu")
        builtin = service.problem_by_builtin("builtin/01_scaled_add")
        honest = (SPIN.parent / "relu_honest.py").read_text()  # passes the static gate: the reference runs
        fast = {"num_trials": 1, "input_families": []}
        [(client, _), (ours, _)] = service.submit([JobSpec(relu.content_hash, honest, fast),
                                                   JobSpec(builtin.content_hash, honest, fast)], client="c")
        # Waiting for one job: the record handed with the notice is the one stored.
        assert asyncio.run(service.wait_final([client.id], 120))[client.id] == service.get(client.id)
        final = wait_done(service, [client.id, ours.id])
        assert final[client.id].result["status"] == "ok"
        # The job's own options (one trial, no input families), not the defaults.
        assert [trial["family"] for trial in final[client.id].result["trials"]] == ["get_inputs"]
        references = service.pool.references
        assert references.server_pid("cpu", True) is not None  # the client's problem: jailed
        assert references.server_pid("cpu", False) is not None  # the built-in one: unjailed
    finally:
        service.stop()


def test_a_pool_given_to_the_service_is_used_and_left_open(tmp_path):
    from tritongym.execution import LocalPool

    with LocalPool(1) as pool:
        service = EvaluationService(config(tmp_path), pool=pool)
        service.start()
        assert service.pool is pool
        service.stop()
        assert not pool._closed  # the caller's pool: the caller closes it


def test_a_job_a_closed_pool_refuses_goes_back_to_the_queue(tmp_path):
    import time

    service = EvaluationService(config(tmp_path))
    service.start()
    try:
        service.pool.close(wait=False)  # the pool went away under a running service
        problem = service.problem_by_builtin("builtin/01_scaled_add")
        [(record, _)] = service.submit([JobSpec(problem.content_hash, NO_TRITON, {})], client="c")
        # The dispatcher retries every second, each time claiming and putting it back: seen queued, unrun.
        deadline = time.monotonic() + 10
        while (service.get(record.id).state, service.get(record.id).attempts) != (JobState.QUEUED, 0):
            assert time.monotonic() < deadline, "the refused job was not put back in the queue"
            time.sleep(0.01)
        assert service.in_flight() == 0
    finally:
        service.stop()


def test_the_pool_is_never_handed_more_than_the_dispatch_depth(tmp_path):
    import time

    service = EvaluationService(config(tmp_path, dispatch_depth=1))
    service.start()
    try:
        relu = service.problem_from_source((Path(__file__).resolve().parents[1] / "sandbox" /
                                            "relu_problem.py").read_text(), name="relu")
        builtin = service.problem_by_builtin("builtin/01_scaled_add")
        spin = {"timeout": 120.0, "num_trials": 1, "input_families": []}
        [(spinner, _), (waiting, _)] = service.submit(
            [JobSpec(relu.content_hash, SPIN.read_text(), spin), JobSpec(builtin.content_hash, NO_TRITON, {})],
            client="c")
        deadline = time.monotonic() + 60
        while service.get(spinner.id).state != JobState.RUNNING:
            assert time.monotonic() < deadline, "the first job never started"
            time.sleep(0.05)
        # The dispatcher wakes every second: over 2.5 s it has looked at least twice, and the second
        # job stays in the store, not in the pool.
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            assert service.in_flight() == 1 and service.get(waiting.id).state == JobState.QUEUED
            time.sleep(0.05)
        service.cancel(spinner.id)
        assert asyncio.run(service.wait_final([waiting.id], 60))[waiting.id].state == JobState.DONE
    finally:
        service.stop()


# The abandoned pool's handles (its fork servers' processes and sockets) are collected unclosed: by design.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning", "ignore::ResourceWarning")
def test_stopping_abandons_a_running_job_to_the_next_start(tmp_path):
    import gc
    import time

    service = EvaluationService(config(tmp_path))
    service.start()
    relu = service.problem_from_source((Path(__file__).resolve().parents[1] / "sandbox" /
                                        "relu_problem.py").read_text(), name="relu")
    [(spinner, _)] = service.submit([JobSpec(relu.content_hash, SPIN.read_text(),
                                             {"timeout": 10.0, "num_trials": 1, "input_families": []})],
                                    client="c")
    deadline = time.monotonic() + 60
    while service.get(spinner.id).state != JobState.RUNNING or not service.pool.stats().busy:
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.05)
    started = time.monotonic()
    service.stop()  # does not wait for the candidate's 10 s
    assert time.monotonic() - started < 5 and not service.ready
    again = EvaluationService(service.config)
    try:
        assert again.store.get(spinner.id).state == JobState.RUNNING  # left as it was, not half-stored
        assert again.store.requeue_unfinished() == 1
    finally:
        again.stop()
    # The abandoned evaluation ends at its timeout (in a server, the process exits after stop()):
    # wait for it here, so that no spinning candidate outlives this test.
    pool = service.pool
    for slot in pool._slots:
        slot.thread.join(60)
        assert not slot.thread.is_alive()
    # Its handles (sockets, processes) are collected here, under this test's warning filter, not in a
    # later test's.
    del service, again, pool, slot
    gc.collect()


def test_the_event_log_numbers_a_jobs_runs_from_one(tmp_path):
    service = EvaluationService(config(tmp_path))
    problem = service.problem_by_builtin("builtin/01_scaled_add")
    service.store.insert_jobs([NewJob(id="left", idempotency_key=None, fingerprint="f", client="old", api="native",
                                      problem_hash=problem.content_hash, solution=NO_TRITON, options={})])
    service.store.claim_queued(1, set())  # its first run, cut short by a restart
    service.start()
    try:
        [(record, _)] = service.submit([JobSpec(problem.content_hash, NO_TRITON, {})], client="c")
        wait_done(service, ["left", record.id])
        lines = {e["job"]: e for e in events(service)}
        assert (lines[record.id]["attempt"], lines["left"]["attempt"]) == (1, 2)
    finally:
        service.stop()
