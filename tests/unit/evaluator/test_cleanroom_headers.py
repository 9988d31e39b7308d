"""Issue 44, families 1 and 2, from the candidate's launch to the clean room's replay, in this process.

A real solution file is imported, its forward launched under Triton's CPU interpreter with the
launch hook (`launches.LaunchRecorder`) writing a `launchlog.LaunchLog`, and the log replayed by
`cleanroom.worker.Replay` from the file's *text* (`cleanroom.kernels.KernelBuilder`). Covered:

* a grid callable sized from the launch's own arguments (``triton.cdiv(meta["n"], meta["BLOCK"])``,
  whose sizes are the interpreter's scalar tensors) is logged as the ints Triton used;
* a kernel header the clean room cannot evaluate (``FP8_MAX: tl.constexpr = float8_info.max``
  with ``float8_info = torch.finfo(...)``, ``scale: tl.float32``, ``BLOCK: constexpr`` imported
  bare) is rebuilt with the values the candidate's ``def`` bound: the replay gives the candidate's
  outputs bit for bit;
* the pairs: a default the log does not give is refused, a logged default is what the replay uses
  (a forged one changes the outputs: it is data of the log, never re-read from the candidate), a
  grid size Triton refuses is still refused (by Triton) and logs nothing.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap

import pytest
import torch

from tritongym.evaluator.cleanroom.kernels import KernelBuilder, KernelRefused
from tritongym.evaluator.cleanroom.worker import Replay
from tritongym.evaluator.worker.launches import LaunchRecorder
from tritongym.evaluator.worker.launchlog import LaunchLog

SOLUTION = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl
    from triton.language import constexpr

    float8_info = torch.finfo(torch.float8_e4m3fn)


    @triton.jit
    def _saturate(x, scale: tl.float32, LIMIT: constexpr = float8_info.max):
        return tl.clamp(x * scale, -LIMIT, LIMIT)


    @triton.jit
    def _kernel(x_ptr, out_ptr, n_elements, scale: tl.float32, BLOCK_SIZE: constexpr,
                FP8_MAX: tl.constexpr = float8_info.max):
        offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.minimum(_saturate(x, scale), FP8_MAX)
        tl.store(out_ptr + offsets, y, mask=mask)


    def forward(x, scale, grid=None):
        out = torch.empty_like(x)
        n = x.numel()
        grid = grid or (lambda meta: (triton.cdiv(meta["n_elements"], meta["BLOCK_SIZE"]),))
        _kernel[grid](x, out, n, scale, BLOCK_SIZE=64)
        return out
    ''')


@pytest.fixture
def solution(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # before the import: @triton.jit reads it there
    path = tmp_path / "solution.py"
    path.write_text(SOLUTION)
    name = "tritongym_test_cleanroom_headers_solution"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    yield module, str(path)
    sys.modules.pop(name, None)


def _logged_forward(solution, x, scale, **kwargs):
    """The candidate's forward with the launch hook installed: its outputs and the call's log."""
    from triton.runtime.interpreter import InterpretedFunction

    module, path = solution
    original = InterpretedFunction.run
    recorder = LaunchRecorder(path)
    recorder.log = LaunchLog(path)
    try:
        recorder.install()
        recorder.log.start([x], [])
        out = module.forward(x, scale, **kwargs)
        return out, recorder.log.finish(out).to_payload()
    finally:
        InterpretedFunction.run = original


def _replay(log, x, tmp_path):
    (tmp_path / "room").mkdir(exist_ok=True)
    builder = KernelBuilder(SOLUTION, str(tmp_path / "room"))
    return Replay(torch.device("cpu"), builder, [], log["kernels"]).run(log, [x]), builder


def _input():
    return torch.linspace(-600.0, 600.0, 1000)


def test_a_grid_sized_from_meta_and_a_header_of_module_objects_replay_bit_for_bit(solution, tmp_path):
    x = _input()
    out, log = _logged_forward(solution, x, 2.5)
    assert log["error"] is None
    expected = torch.clamp(x * 2.5, -448.0, 448.0)
    assert torch.equal(out, expected)
    (event,) = log["events"]
    # The grid as Triton resolved it: cdiv(1000, 64) from the interpreter's scalar tensors, as an int.
    assert event["grid"] == [16] and type(event["grid"][0]) is int
    # The launched kernel's default is bound by Python at the launch: logged with its arguments.
    assert event["kwargs"] == {"BLOCK_SIZE": 64, "FP8_MAX": 448.0}
    helper = log["kernels"][next(k for k in log["kernels"] if k.startswith("_saturate:"))]
    assert helper["header"] == {"annotations": {"scale": {"tl_dtype": "fp32"},
                                                "LIMIT": {"attr": ["triton.language.core", "constexpr"]}},
                                "defaults": {"LIMIT": {"const": 448.0}}}

    replayed, builder = _replay(log, x, tmp_path)
    assert torch.equal(replayed, out)
    # The clean room compiled each kernel with its logged defaults in place of the header's text:
    # `float8_info` (an object of the candidate's module) is never evaluated there.
    for built in builder.built.values():
        with open(built.jit.fn.__code__.co_filename, encoding="utf-8") as handle:
            text = handle.read()
        assert "float8_info" not in text and "_tritongym_default_" in text


def test_a_default_the_log_does_not_give_is_refused(solution, tmp_path):
    x = _input()
    _, log = _logged_forward(solution, x, 2.5)
    helper = next(k for k in log["kernels"] if k.startswith("_saturate:"))
    del log["kernels"][helper]["header"]["defaults"]["LIMIT"]
    with pytest.raises(KernelRefused, match=r"^kernel _saturate: the log gives no value for the default of LIMIT$"):
        _replay(log, x, tmp_path)


def test_a_default_that_is_no_triton_value_is_refused(solution, tmp_path):
    x = _input()
    _, log = _logged_forward(solution, x, 2.5)
    helper = next(k for k in log["kernels"] if k.startswith("_saturate:"))
    log["kernels"][helper]["header"]["defaults"]["LIMIT"] = {"unknown": "finfo"}
    with pytest.raises(KernelRefused, match=r"^kernel _saturate: the default of LIMIT is a finfo \(kernels may use"):
        _replay(log, x, tmp_path)


def test_the_replay_uses_the_logged_default_not_the_candidates_text(solution, tmp_path):
    # The twin of the refusal: a default is data of the log, like an argument. A log that says
    # another value gets a replay with that value (which the parent then judges), whatever the
    # candidate's module holds.
    x = _input()
    out, log = _logged_forward(solution, x, 2.5)
    helper = next(k for k in log["kernels"] if k.startswith("_saturate:"))
    log["kernels"][helper]["header"]["defaults"]["LIMIT"] = {"const": 100.0}
    replayed, _ = _replay(log, x, tmp_path)
    assert torch.equal(replayed, torch.clamp(x * 2.5, -100.0, 100.0))
    assert not torch.equal(replayed, out)


def test_a_bare_annotation_name_is_bound_only_from_the_log(solution, tmp_path):
    # `BLOCK_SIZE: constexpr` names `constexpr`, which no global of the body binds: without the
    # logged annotation it is undefined for the kernel, as any unbound name.
    x = _input()
    _, log = _logged_forward(solution, x, 2.5)
    kernel = next(k for k in log["kernels"] if k.startswith("_kernel:"))
    del log["kernels"][kernel]["header"]["annotations"]["BLOCK_SIZE"]
    with pytest.raises(KernelRefused, match=r"constexpr is not defined for the kernel"):
        _replay(log, x, tmp_path)


def test_a_grid_size_triton_refuses_is_left_to_triton_and_logs_nothing(solution):
    # The log reads sizes as Triton does (`__index__`): what it cannot read, Triton refuses too, and
    # gets the callable's own value to refuse. The launch raises; nothing is logged for it.
    from triton.runtime.errors import InterpreterError
    from triton.runtime.interpreter import InterpretedFunction

    module, path = solution
    original = InterpretedFunction.run
    recorder = LaunchRecorder(path)
    recorder.log = LaunchLog(path)
    try:
        recorder.install()
        recorder.log.start([], [])
        with pytest.raises(InterpreterError, match="'float' object cannot be interpreted as an integer"):
            module.forward(_input(), 2.5, grid=lambda meta: (2.5,))
        assert recorder.log.log.events == [] and recorder.log.depth == 0
    finally:
        InterpretedFunction.run = original


WRAPPER = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def wrapper(x_ptr, scale: tl.float32, BLOCK: tl.constexpr):
        helper(x_ptr, scale, BLOCK)
    ''')
WRAPPER_KEY = "wrapper:6"


def _wrapper_entry(annotations):
    return {WRAPPER_KEY: {"name": "wrapper", "line": 6, "globals": {"helper": {"const": 1}},
                          "header": {"annotations": annotations, "defaults": {}}}}


def test_an_annotation_chain_whose_root_the_body_never_names_is_bound_through_the_logged_value(tmp_path):
    # A wrapper kernel whose body names no `tl` (it calls a helper): `tl` is in no global binding,
    # and its annotations still need it (Triton's GPU compiler evaluates them). The log says what
    # each evaluated to; `tl` is bound to the kernel module through which `tl.float32` is that dtype.
    logged = {"scale": {"tl_dtype": "fp32"}, "BLOCK": {"attr": ["triton.language.core", "constexpr"]}}
    built = KernelBuilder(WRAPPER, str(tmp_path)).build(WRAPPER_KEY, _wrapper_entry(logged))
    import triton.language

    assert built.jit.fn.__globals__["tl"] in (triton.language, triton.language.core)
    # Annotations stay the text Triton reads (postponed), whatever bound their names.
    assert built.jit.fn.__annotations__ == {"scale": "tl.float32", "BLOCK": "tl.constexpr"}


@pytest.mark.parametrize("logged", [
    {},  # the log says nothing of the annotations
    {"scale": {"builtin": "min"}, "BLOCK": {"builtin": "max"}},  # values no chain `tl.float32` reaches
    {"scale": {"unknown": "function"}, "BLOCK": {"unknown": "function"}},
])
def test_an_annotation_root_is_not_bound_from_a_log_that_does_not_lead_to_it(tmp_path, logged):
    with pytest.raises(KernelRefused, match=r"line 7: tl is not defined for the kernel"):
        KernelBuilder(WRAPPER, str(tmp_path)).build(WRAPPER_KEY, _wrapper_entry(logged))


def test_defaults_rebound_past_the_parameters_fail_the_call_not_the_hook(solution):
    # `__defaults__` is writable: more defaults than parameters cannot be mapped to parameters. The
    # call's log says so (unreplayable) instead of the launch hook raising into the forward.
    from tritongym.evaluator.worker.launchlog import Unloggable

    module, path = solution
    function = module._saturate.fn
    kept = function.__defaults__
    function.__defaults__ = (1.0, 2.0, 3.0, 4.0)
    try:
        log = LaunchLog(path)
        log.start([], [])
        with pytest.raises(Unloggable, match=r"^kernel _saturate: its annotations and defaults cannot be read"):
            log.encode(module._saturate)
    finally:
        function.__defaults__ = kept
