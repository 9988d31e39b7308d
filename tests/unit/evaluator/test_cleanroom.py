"""The clean room's pure parts: the kernel-body rules, the replay choice, the host-data measure,
the launch log's encoding and the "unsupported" evidence. The jailed replay itself runs in
tests/adversarial/test_cleanroom.py and every end-to-end evaluation."""

from __future__ import annotations

import ast
import textwrap

import pytest
import torch

from tritongym.evaluator import replays as cleanroom
from tritongym.evaluator.cleanroom.kernels import (
    KernelBuilder,
    KernelRefused,
    check_kernel_body,
    value_attributes,
)
from tritongym.evaluator.interpreter_gaps import interpreter_gaps
from tritongym.evaluator.worker.launchlog import LaunchLog, Unloggable, storage_bytes

TL = {"tl": {"module": "triton.language"}, "triton": {"module": "triton"}}


def _body(source: str) -> ast.FunctionDef:
    node = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _problems(source: str, bindings: dict | None = None) -> list[str]:
    return check_kernel_body(_body(source), {**TL, **(bindings or {})}, value_attributes())


HONEST = '''
def kernel(x_ptr, out_ptr, n, eps, BLOCK: tl.constexpr, ACT: tl.constexpr = "relu"):
    """A docstring."""
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n) & (pid >= 0)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for k in range(0, 4):
        acc += x * k
    for k in tl.static_range(2):
        acc = tl.where(acc > 0, acc, acc * eps)
    if ACT == "relu":
        acc = tl.maximum(acc, 0.0)
    y = triton_helpers.maximum(acc, libdevice.tanh(acc)) + helper(acc)
    y = y.to(x.dtype) if x.dtype.is_floating() else y
    tl.store(out_ptr + offs[:, None] * 0 + offs[None, :] * 0, tl.sum(y[:, None], axis=1), mask=mask)
'''


def test_honest_kernel_body_passes():
    bindings = {"triton_helpers": {"module": "torch._inductor.runtime.triton_helpers"},
                "libdevice": {"module": "triton.language.extra.libdevice"},
                "helper": {"kernel": "helper:1"}}
    assert _problems(HONEST, bindings) == []


@pytest.mark.parametrize("snippet, why", [
    ("y = x.handle.data", "handle"),
    ("y = x.__class__", "attribute __class__"),
    ("y = (lambda v: v)(x)", "Lambda"),
    ("y = [v for v in range(3)]", "ListComp"),
    ("import numpy", "Import"),
    ("y = mystery(x)", "mystery is not defined"),
    ("y = obj(x)", "not a Triton function"),
    ("y = x.tolist()", ".tolist"),
    ("with ctx:\n        pass", "With"),
    ("y = '__import__'", "dunder string"),
])
def test_non_triton_constructs_are_refused(snippet, why):
    source = f"def kernel(x, BLOCK: tl.constexpr):\n    {snippet}\n"
    problems = _problems(source, {"obj": {"unknown": "Sneaky"}, "ctx": {"unknown": "object"}})
    assert any(why in p for p in problems), problems


def test_annotations_are_checked_and_defaults_come_from_the_log(tmp_path):
    # An annotation is checked like the body (Triton's GPU compiler evaluates it); a default's text
    # is never evaluated: the builder puts the value the log gives in its place, resolved like a
    # global's binding, so a default whose logged value is no Triton value is refused there.
    evil = {"evil": {"unknown": "function"}}
    assert any("evil" in p for p in _problems("def kernel(x, BLOCK: evil = 128):\n    pass\n", evil))
    assert _problems("def kernel(x, BLOCK: tl.constexpr = evil()):\n    pass\n", evil) == []
    source = "def kernel(x, BLOCK: tl.constexpr = evil()):\n    pass\n"
    entry = {"name": "kernel", "line": 1, "globals": {"tl": {"module": "triton.language"}},
             "header": {"annotations": {}, "defaults": {"BLOCK": {"unknown": "function"}}}}
    with pytest.raises(KernelRefused, match=r"^kernel kernel: the default of BLOCK is a function"):
        KernelBuilder(source, str(tmp_path)).build("kernel:1", {"kernel:1": entry})
    entry["header"]["defaults"]["BLOCK"] = {"const": 128}
    built = KernelBuilder(source, str(tmp_path)).build("kernel:1", {"kernel:1": entry})
    assert built.jit.fn.__defaults__ == (128,)


def test_builder_rebuilds_from_the_text_with_log_bindings_only(tmp_path):
    source = textwrap.dedent('''
        import triton
        import triton.language as tl

        SCALE = 3

        @triton.jit
        def k(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), tl.full([BLOCK], SCALE, tl.float32))
        ''')
    table = {"k:7": {"name": "k", "line": 7, "globals": {"tl": {"module": "triton.language"},
                                                         "SCALE": {"const": 3}}}}
    built = KernelBuilder(source, str(tmp_path)).build("k:7", table)
    assert built.jit.fn.__globals__["SCALE"] == 3
    assert "triton" not in built.jit.fn.__globals__  # only what the kernel names
    bad = {"k:7": {**table["k:7"], "globals": {**table["k:7"]["globals"], "tl": {"module": "os"}}}}
    with pytest.raises(KernelRefused, match="module 'os'"):
        KernelBuilder(source, str(tmp_path)).build("k:7", bad)
    with pytest.raises(KernelRefused, match="not a function of the checked source"):
        KernelBuilder(source, str(tmp_path)).build("k:8", {"k:8": {**table["k:7"], "line": 8}})
    constant = {"k:7": {**table["k:7"], "globals": {**table["k:7"]["globals"], "SCALE": {"const": [1, 2]}}}}
    with pytest.raises(KernelRefused, match="constant of type list"):
        KernelBuilder(source, str(tmp_path)).build("k:7", constant)


def _record(index: int, family: str = "get_inputs", configs=()) -> cleanroom.TrialRecord:
    return cleanroom.TrialRecord(index=index, family=family, inputs=[], expected=[], compute_work=(0, 0),
                                 log={"events": [], "buffers": []}, configs=list(configs))


def test_replays_cover_every_family_and_every_config():
    records = [_record(i, configs=[("k", i % 3)]) for i in range(5)]
    records += [_record(5 + i, "negated" if i == 0 else "scaled", configs=[("k", (5 + i) % 3)]) for i in range(2)]
    seen = set()
    for _ in range(30):
        chosen = cleanroom.choose_replays(records)
        assert len(chosen) >= 2
        assert any(records[i].family == "get_inputs" for i in chosen)
        assert {records[i].family for i in chosen} == {"get_inputs", "negated", "scaled"}
        assert {c for i in chosen for c in records[i].configs} == {("k", 0), ("k", 1), ("k", 2)}
        seen.add(tuple(chosen))
    assert len(seen) > 1, "the choice must not be predictable"
    assert cleanroom.choose_replays([_record(0)]) == [0]


def _log(*scalars, blobs=()):
    return {"events": [{"launch": "k:1", "grid": [4], "args": [{"T": 0, "o": 0, "s": [4], "st": [1], "d": "float32"},
                                                                *scalars], "kwargs": {"BLOCK": 1024}}],
            "buffers": [], "blobs": list(blobs), "outputs": {"T": 0, "o": 0, "s": [4], "st": [1], "d": "float32"}}


def test_log_errors_name_the_reason():
    assert cleanroom.log_error(None) == "the candidate worker sent no launch log"
    assert cleanroom.log_error({"error": "a tensor subclass"}) == "a tensor subclass"
    assert cleanroom.log_error({"events": "x", "buffers": []}) == "the launch log is malformed"
    assert cleanroom.log_error({"events": [], "buffers": []}) is None


def test_launch_log_encodes_values_and_refuses_python_objects(tmp_path):
    log = LaunchLog(str(tmp_path / "candidate.py"))
    x = torch.arange(6, dtype=torch.float32)
    log.start([x], [])
    assert log.encode(x[2:])["o"] == 2 and log.encode(x[2:])["T"] == 0
    assert log.encode((1, 2.5, None, True)) == {"L": [1, 2.5, None, True], "tuple": True}
    assert log.encode(torch.float16) == {"dtype": "float16"}

    class Count(int):
        pass

    with pytest.raises(Unloggable, match="Count"):
        log.encode(Count(3))

    class Late(tuple):
        pass

    with pytest.raises(Unloggable, match="Late"):
        log.encode(Late((x,)))
    host = torch.tensor([1.0, 2.0])
    ref = log.encode(host)
    assert log.log.buffers[ref["T"]].kind == "external"
    assert torch.equal(log.log.blobs[0], storage_bytes(host))


def test_a_tma_descriptor_is_logged_by_its_fields_and_rebuilt_exactly(tmp_path):
    descriptors = pytest.importorskip("triton.tools.tensor_descriptor")
    from tritongym.evaluator.cleanroom.kernels import KernelBuilder
    from tritongym.evaluator.cleanroom.worker import Diverged, Replay

    log = LaunchLog(str(tmp_path / "candidate.py"))
    x = torch.zeros(4, 8)
    log.start([x], [])
    encoded = log.encode(descriptors.TensorDescriptor.from_tensor(x, [2, 4]))
    assert encoded["descriptor"]["base"]["T"] == 0
    assert encoded["descriptor"]["block_shape"] == {"L": [2, 4], "tuple": False}

    class Lookalike(descriptors.TensorDescriptor):  # a subclass could carry anything: not a descriptor
        pass

    with pytest.raises(Unloggable, match="Lookalike"):
        log.encode(Lookalike(x, [4, 8], [8, 1], [2, 4]))
    replay = Replay(torch.device("cpu"), KernelBuilder(""), [], {})
    replay.load_buffers(log.log.to_payload(), [x])
    rebuilt = replay.decode(encoded)
    assert type(rebuilt) is descriptors.TensorDescriptor
    assert (list(rebuilt.shape), list(rebuilt.strides), list(rebuilt.block_shape)) == ([4, 8], [8, 1], [2, 4])
    with pytest.raises(Diverged, match="fields this Triton does not have"):
        replay.decode({"descriptor": {**encoded["descriptor"], "handle": 3}})
    with pytest.raises(Diverged, match="without a base tensor"):
        replay.decode({"descriptor": {**encoded["descriptor"], "base": 5}})
    with pytest.raises(Diverged, match="cannot be rebuilt"):  # strides not 16-byte aligned
        replay.decode({"descriptor": {**encoded["descriptor"], "strides": {"L": [3, 1], "tuple": False}}})


def test_unsupported_needs_a_construct_in_the_source():
    assert interpreter_gaps("import triton\n@triton.jit\ndef k(x):\n    tl.inline_asm_elementwise('', '', [x])\n")
    assert interpreter_gaps("def k(x):\n    libdevice.j0(x)\n") == ["libdevice.j0"]
    assert interpreter_gaps("def k(x):\n    libdevice.tanh(x)\n") == []  # emulated on the CPU tier
    assert interpreter_gaps("# inline_asm_elementwise is not supported in interpreter mode\nx = 1\n") == []

