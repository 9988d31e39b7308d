"""The clean room's kernel rebuild (`evaluator/cleanroom/kernels.py`), rule by rule and value by value.

Covers what the reward depends on in that module, each refusal beside the honest twin that must
still pass:

* `check_kernel_body`: the exact list of problems a body gets (every one, with its line), *args and
  **kwargs, annotations, every kind of log binding a body may name, a parameter or local named
  like a module (a value, not the module), the value members a kernel may use (TMA descriptors,
  ``.value``/``.type``/``.strides``) and that the list never holds a private name;
* `KernelBuilder.resolve`: the exact object each binding kind becomes, and each refusal's words;
* `tl_dtype`: the exact Triton dtype for every name the launch log writes;
* `KernelBuilder.build`: a kernel and its helper rebuilt from the text and run in Triton's CPU
  interpreter (``TRITON_INTERPRET=1``, in this process), the namespace they get, the files they
  are compiled from, the cache, self-reference, malformed log entries and the refusal message;
* a known gap (strict xfail): a chain through an allowed module reaches Python's builtins.

`tests/unit/evaluator/test_cleanroom.py` has the first rule tests; the jailed replay runs in
`tests/adversarial/test_cleanroom.py`.
"""

from __future__ import annotations

import ast
import builtins
import os
import re
import shutil
import sys
import tempfile
import textwrap
import types

import pytest
import torch
import triton
from triton import language as tl

from tritongym.evaluator.cleanroom.kernels import (
    BUILTINS,
    DENIED_VALUE_ATTRIBUTES,
    KernelBuilder,
    KernelRefused,
    allowed_module,
    check_kernel_body,
    refused_object,
    tl_dtype,
    value_attributes,
)
from tritongym.evaluator.worker.launchlog import KERNEL_MODULES

TL = {"tl": {"module": "triton.language"}}
NOT_TRITON = "not a Triton function, kernel, module or number"


def _built(builder, key: str):
    """The one kernel built for `key` (the cache is keyed by the key and its bindings' digest)."""
    (built,) = [kernel for cached, kernel in builder.built.items() if cached.partition("|")[0] == key]
    return built


def _problems(source: str, bindings: dict | None = None) -> list[str]:
    function = ast.parse(textwrap.dedent(source)).body[0]
    assert isinstance(function, ast.FunctionDef)
    return check_kernel_body(function, {**TL, **(bindings or {})}, value_attributes())


# --- check_kernel_body ---------------------------------------------------------------------------


def test_every_problem_of_a_body_is_reported_with_its_line():
    # The walk must go on after each problem and after each allowed name: a `break` at a private
    # attribute, a non-Triton node or a parameter would hide what follows (a parameter named first
    # would even hide the only problem, see the next test). `comprehension` has no line: "?".
    source = """
        def kernel(x, BLOCK: tl.constexpr):
            y = x + 1
            z = x._secret
            w = [v for v in range(3)]
            u = obj(y)
            q = mystery
        """
    problems = _problems(source, {"obj": {"unknown": "Sneaky"}})
    assert sorted(problems) == sorted([
        "line 4: attribute _secret (private attributes are not Triton)",
        "line 5: ListComp is not Triton",
        "line ?: comprehension is not Triton",
        f"line 6: obj is a Sneaky, {NOT_TRITON}",
        "line 7: mystery is not defined for the kernel",
    ])


def test_a_parameter_named_before_a_foreign_call_does_not_end_the_check():
    refused = "def kernel(x):\n    y = x\n    z = evil(y)\n"
    assert _problems(refused, {"evil": {"unknown": "function"}}) == [f"line 3: evil is a function, {NOT_TRITON}"]
    # The honest twin: the same shape calling a Triton function.
    assert _problems("def kernel(x):\n    y = x\n    z = tl.abs(y)\n") == []


@pytest.mark.parametrize("signature", ["x, *args", "x, **kwargs", "*args, **kwargs"])
def test_a_kernel_takes_no_star_arguments(signature):
    assert _problems(f"def kernel({signature}):\n    pass\n") == ["a kernel takes no *args or **kwargs"]


def test_a_kernel_with_plain_and_keyword_only_parameters_passes():
    assert _problems("def kernel(x, n, *, BLOCK: tl.constexpr = 4):\n    y = x + n + BLOCK\n") == []


def test_annotations_are_checked_even_with_defaults_present():
    # The header is the annotations plus the defaults: a default must not replace the annotations.
    source = "def kernel(x: evil, BLOCK: tl.constexpr = 4):\n    pass\n"
    assert _problems(source, {"evil": {"unknown": "function"}}) == [f"line 1: evil is a function, {NOT_TRITON}"]
    assert _problems("def kernel(x, BLOCK: tl.constexpr = 4) -> evil:\n    pass\n",
                     {"evil": {"unknown": "type"}}) == [f"line 1: evil is a type, {NOT_TRITON}"]
    assert _problems("def kernel(x: tl.tensor, BLOCK: tl.constexpr = 4):\n    pass\n") == []


@pytest.mark.parametrize("binding", [
    {"const": 3}, {"constexpr": 8}, {"tl_dtype": "fp32"}, {"kernel": "helper:1"},
    {"attr": ["triton.language", "sum"]}, {"builtin": "min"}, {"module": "triton.language"},
])
def test_every_binding_kind_of_the_log_may_be_named(binding):
    # `G = min` at module level is logged as {"builtin": "min"} under the name G, and so on.
    assert _problems("def kernel(x):\n    y = G\n", {"G": binding}) == []


@pytest.mark.parametrize("binding, what", [
    ({"unknown": "Sneaky"}, "Sneaky"),
    ({}, "Python object"),  # a binding that says nothing is still refused, as a Python object
    ({"callable": "f"}, "Python object"),
])
def test_a_binding_of_another_kind_is_refused_by_name(binding, what):
    assert _problems("def kernel(x):\n    y = G(x)\n", {"G": binding}) == [f"line 2: G is a {what}, {NOT_TRITON}"]


@pytest.mark.parametrize("body", [
    "def kernel(x, tl):\n    y = tl.tolist()\n",  # a parameter named like the module
    "def kernel(x):\n    tl = x\n    y = tl.tolist()\n",  # a local named like the module
])
def test_a_parameter_or_local_named_like_a_module_is_a_value(body):
    # Whatever was passed or assigned is a value here: only tensor members, whatever the log binds `tl` to.
    assert _problems(body) == [f"line {body.count(chr(10))}: .tolist on a value is not a Triton tensor member"]


def test_the_module_itself_may_be_used_through_a_chain():
    assert _problems("def kernel(x):\n    y = tl.math.exp(tl.sum(x, axis=0))\n") == []


def test_an_attribute_on_an_undefined_root_is_refused_as_undefined():
    # The root is neither a parameter, a local nor a binding: refused for that, not a crash.
    assert _problems("def kernel(x):\n    y = mystery.shape\n") == ["line 2: mystery is not defined for the kernel"]
    assert _problems("def kernel(x):\n    y = len.shape\n") == []  # a builtin root: `.shape` is a value member


def test_value_members_never_include_private_or_denied_names():
    members = value_attributes()
    assert not [n for n in members if n.startswith("_")]
    assert not members & DENIED_VALUE_ATTRIBUTES
    assert _problems("def kernel(x):\n    y = x.handle\n") == [
        "line 2: .handle on a value is not a Triton tensor member"]


def test_tma_descriptor_and_block_members_are_value_members():
    # Triton's tutorials: `desc.load([m, n])`, `desc.store(...)`, `desc.block_shape`; a block's type.
    source = """
        def kernel(desc, x, BLOCK: tl.constexpr):
            v = desc.load([0, 0])
            desc.store([0, 0], v)
            shape = desc.block_shape
            dims = x.type.get_block_shapes()
            size = x.type.nbytes
            width = BLOCK.value
            steps = desc.strides
        """
    assert _problems(source) == []


# --- resolve, allowed_module, tl_dtype ---------------------------------------------------------


def _builder(tmp_path, source: str = "") -> KernelBuilder:
    return KernelBuilder(source, str(tmp_path))


@pytest.mark.parametrize("value", [3, 2.5, "relu", True, None])
def test_a_constant_is_passed_as_it_is(tmp_path, value):
    resolved = _builder(tmp_path).resolve({"const": value}, {})
    assert resolved == value and type(resolved) is type(value)


@pytest.mark.parametrize("value", [8, 0.5, "relu", False, None])
def test_a_constexpr_is_wrapped_with_its_exact_value(tmp_path, value):
    resolved = _builder(tmp_path).resolve({"constexpr": value}, {})
    assert type(resolved) is tl.constexpr
    assert resolved.value == value and type(resolved.value) is type(value)


@pytest.mark.parametrize("value, kind", [([1, 2], "list"), ({"a": 1}, "dict")])
def test_a_constexpr_of_another_type_is_refused(tmp_path, value, kind):
    with pytest.raises(KernelRefused, match=f"^a constexpr of type {kind}$"):
        _builder(tmp_path).resolve({"constexpr": value}, {})


def test_a_dtype_binding_is_triton_s_own_dtype(tmp_path):
    assert _builder(tmp_path).resolve({"tl_dtype": "bf16"}, {}) is tl.bfloat16


def test_a_builtin_binding_is_python_s_own_builtin_when_allowed(tmp_path):
    assert _builder(tmp_path).resolve({"builtin": "min"}, {}) is builtins.min
    with pytest.raises(KernelRefused, match=r"^builtin 'eval' is not available to kernels$"):
        _builder(tmp_path).resolve({"builtin": "eval"}, {})


def test_an_attribute_binding_is_the_module_s_own_object(tmp_path):
    assert _builder(tmp_path).resolve({"attr": ["triton.language", "sum"]}, {}) is tl.sum


@pytest.mark.parametrize("attr, message", [
    # A private name of Triton's that is host code, not a kernel helper (`refused_private`).
    (["triton.language.core", "_unwrap_if_constexpr"],
     r"^triton.language.core._unwrap_if_constexpr is not available to kernels \(_unwrap_if_constexpr \(private "
     r"names are not Triton, except Triton's own kernel helpers\)\)$"),
    (["triton.language.core", "__builtins__"], r"^triton.language.core.__builtins__ is not available to kernels$"),
    (["triton.language", 3], r"^triton.language.3 is not available to kernels$"),
    (["triton.language", "no_such_function"], r"^triton.language has no no_such_function$"),
    (["os", "system"], r"^module 'os' is not available to kernels$"),
])
def test_an_attribute_binding_outside_triton_s_public_names_is_refused(tmp_path, attr, message):
    with pytest.raises(KernelRefused, match=message):
        _builder(tmp_path).resolve({"attr": attr}, {})


@pytest.mark.parametrize("binding, what", [({"unknown": "Sneaky"}, "Sneaky"), ({}, "Python object")])
def test_a_binding_of_no_known_kind_is_refused_with_what_it_is(tmp_path, binding, what):
    expected = (f"a {what} (kernels may use Triton functions, kernels of the same file, modules of Triton and "
                "numbers only)")
    with pytest.raises(KernelRefused) as refused:
        _builder(tmp_path).resolve(binding, {})
    assert str(refused.value) == expected


def test_a_kernel_module_that_cannot_be_imported_is_refused_with_the_reason(monkeypatch):
    name = "triton.language.extra.hip.libdevice"
    assert allowed_module(name).__name__ == name  # the honest twin: importable here
    monkeypatch.setitem(sys.modules, name, None)  # Python's own way to make an import fail
    with pytest.raises(KernelRefused, match=rf"^module {name} cannot be imported here: "):
        allowed_module(name)
    with pytest.raises(KernelRefused, match=r"^module 3 is not available to kernels$"):
        allowed_module(3)


@pytest.mark.parametrize("name, dtype", [
    ("fp32", tl.float32), ("fp16", tl.float16), ("bf16", tl.bfloat16), ("fp64", tl.float64),
    ("int1", tl.int1), ("int8", tl.int8), ("int32", tl.int32), ("int64", tl.int64), ("uint8", tl.uint8),
    ("fp8e4nv", tl.float8e4nv), ("fp8e5", tl.float8e5),
])
def test_a_logged_dtype_name_maps_to_exactly_that_dtype(name, dtype):
    assert tl_dtype(name) is dtype


def test_every_triton_dtype_round_trips_and_torch_spellings_are_not_triton_names():
    # The log writes `str(dtype)`: each of Triton's dtypes must come back as itself.
    for attribute in dir(tl):
        value = getattr(tl, attribute)
        if isinstance(value, tl.dtype):
            assert tl_dtype(str(value)) is value, attribute
    for name in ("float32", "torch.float32", "", None):
        with pytest.raises(KernelRefused, match=r"^unknown Triton dtype "):
            tl_dtype(name)


# --- KernelBuilder.build ----------------------------------------------------------------------

SOURCE = textwrap.dedent('''
    import triton
    import triton.language as tl

    NEG = -3
    magnitude = abs
    ceil_div = triton.cdiv


    @triton.jit
    def twice(v):
        return v * 2


    @triton.jit
    def main(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        """Several statements: the text must keep its line breaks."""
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(DT)
        y = twice(x) * magnitude(NEG) + OFFSET
        tl.store(out_ptr + offs, tl.maximum(y, 0.0) * ceil_div(BLOCK, 4), mask=mask)
    ''')


def _line(source: str, name: str) -> int:
    """The first line of `name`'s definition, decorators included (the log's key)."""
    lines = source.splitlines()
    index = next(i for i, text in enumerate(lines) if text.startswith(f"def {name}("))
    return index if lines[index - 1].startswith("@") else index + 1


MAIN = f"main:{_line(SOURCE, 'main')}"
TWICE = f"twice:{_line(SOURCE, 'twice')}"
TABLE = {
    MAIN: {"name": "main", "line": _line(SOURCE, "main"), "globals": {
        "tl": {"module": "triton.language"}, "twice": {"kernel": TWICE}, "NEG": {"const": -3},
        "OFFSET": {"constexpr": 0.5}, "DT": {"tl_dtype": "fp32"}, "magnitude": {"builtin": "abs"},
        "ceil_div": {"attr": ["triton", "cdiv"]}, "unused": {"const": 1}}},
    TWICE: {"name": "twice", "line": _line(SOURCE, "twice"), "globals": {}},
}


@pytest.fixture
def interpret(monkeypatch):
    """Triton's CPU interpreter, the clean room's own mode on this tier."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _function_text(source: str, name: str) -> str:
    tree = ast.parse(source)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return textwrap.dedent("".join(source.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]))


def test_a_kernel_and_its_helper_are_rebuilt_with_exactly_their_bindings_and_run(tmp_path, interpret):
    builder = KernelBuilder(SOURCE, str(tmp_path))
    built = builder.build(MAIN, TABLE)
    assert built.key == MAIN
    assert builder.build(MAIN, TABLE) is built  # built once per clean room
    namespace = built.jit.fn.__globals__
    # Only what the body names, each resolved by the clean room; `unused` is not there.
    assert set(namespace) == {"__builtins__", "_tritongym_language", "tl", "twice", "NEG", "OFFSET", "DT",
                              "magnitude", "ceil_div", "main"}
    assert set(namespace["__builtins__"]) == BUILTINS  # not Python's full builtins
    assert namespace["_tritongym_language"] is tl and namespace["tl"] is tl
    assert namespace["twice"] is _built(builder, TWICE).jit
    assert namespace["NEG"] == -3 and namespace["DT"] is tl.float32 and namespace["OFFSET"].value == 0.5
    assert namespace["magnitude"] is builtins.abs and namespace["ceil_div"] is triton.cdiv
    assert set(_built(builder, TWICE).jit.fn.__globals__) == {"__builtins__", "_tritongym_language", "twice"}

    # Each kernel is compiled from a file of its own in the workdir holding its text, without decorators
    # (the interpreter reads a kernel's text back from that file when it runs it).
    files = {name: built_kernel.jit.fn.__code__.co_filename for name, built_kernel in builder.built.items()}
    assert len(set(files.values())) == 2
    for key, path in files.items():
        assert os.path.dirname(path) == str(tmp_path)
        with open(path, encoding="utf-8") as handle:
            assert handle.read() == _function_text(SOURCE, key.partition(":")[0])

    x = torch.arange(4, dtype=torch.float32)
    out = torch.full((4,), -1.0)
    built.jit[(1,)](x, out, 3, BLOCK=4)
    assert out.tolist() == [0.5, 6.5, 12.5, -1.0]  # max(2x * |-3| + 0.5, 0) * cdiv(4, 4), 3 lanes


def test_without_a_workdir_the_builder_makes_a_fresh_one_of_its_own(interpret):
    builder = KernelBuilder(SOURCE)
    try:
        assert os.path.dirname(builder.workdir) == tempfile.gettempdir()
        assert os.path.basename(builder.workdir).startswith("tritongym-cleanroom-")
        builder.build(TWICE, TABLE)
        assert os.listdir(builder.workdir) == [os.path.basename(_built(builder, TWICE).jit.fn.__code__.co_filename)]
    finally:
        shutil.rmtree(builder.workdir, ignore_errors=True)


def test_a_key_that_is_not_its_entrys_name_and_line_is_refused(tmp_path):
    # Keys come from the log: one that names another kernel than its entry (or a path) is not described.
    work = tmp_path / "work"
    work.mkdir()
    for key in ("../../twice:1", TWICE + "x", "other:" + TWICE.partition(":")[2]):
        with pytest.raises(KernelRefused, match=f"^kernel {re.escape(key)} is not described in the log$"):
            KernelBuilder(SOURCE, str(work)).build(key, {key: TABLE[TWICE]})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"] and list(work.iterdir()) == []


def test_a_kernels_file_is_written_inside_the_workdir(tmp_path, interpret):
    work = tmp_path / "work"
    work.mkdir()
    built = KernelBuilder(SOURCE, str(work)).build(TWICE, TABLE)
    assert os.path.dirname(built.jit.fn.__code__.co_filename) == str(work)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_a_body_that_is_not_triton_is_refused_by_the_builder_with_its_first_four_problems(tmp_path):
    source = textwrap.dedent('''
        import triton

        @triton.jit
        def k(x):
            a = x.tolist()
            b = x.numpy()
            c = x.tobytes()
            d = x.cpu()
            e = x.data_ptr()
        ''')
    table = {"k:4": {"name": "k", "line": 4, "globals": {}}}
    with pytest.raises(KernelRefused) as refused:
        KernelBuilder(source, str(tmp_path)).build("k:4", table)
    member = "on a value is not a Triton tensor member"
    assert str(refused.value) == (f"kernel k: line 6: .tolist {member}; line 7: .numpy {member}; "
                                  f"line 8: .tobytes {member}; line 9: .cpu {member}")


def test_a_refused_kernel_is_refused_again_for_the_same_reason_by_the_same_builder(tmp_path):
    source = "import triton\n\n@triton.jit\ndef k(x):\n    y = x.tolist()\n"
    table = {"k:3": {"name": "k", "line": 3, "globals": {}}}
    builder = KernelBuilder(source, str(tmp_path))
    reasons = []
    for _ in range(2):
        with pytest.raises(KernelRefused) as refused:
            builder.build("k:3", table)
        reasons.append(str(refused.value))
    assert reasons == ["kernel k: line 5: .tolist on a value is not a Triton tensor member"] * 2


@pytest.mark.parametrize("cycle", [["rec:3"], ["a:3", "b:8"]])
def test_a_kernel_that_refers_to_itself_is_refused(tmp_path, cycle):
    source = ("import triton\n\n@triton.jit\ndef rec(x):\n    rec(x)\n" if cycle == ["rec:3"] else
              "import triton\n\n@triton.jit\ndef a(x):\n    b(x)\n\n\n@triton.jit\ndef b(x):\n    a(x)\n")
    names = [key.partition(":")[0] for key in cycle]
    table = {key: {"name": name, "line": int(key.partition(":")[2]),
                   "globals": {names[(i + 1) % len(cycle)]: {"kernel": cycle[(i + 1) % len(cycle)]}}}
             for i, (key, name) in enumerate(zip(cycle, names, strict=True))}
    with pytest.raises(KernelRefused) as refused:
        KernelBuilder(source, str(tmp_path)).build(cycle[0], table)
    assert str(refused.value) == f"kernel {cycle[0]} refers to itself"


def test_a_helper_shared_by_two_kernels_is_not_a_cycle(tmp_path, interpret):
    # The honest twin of the cycle: a diamond builds, the helper once.
    source = ("import triton\n\n@triton.jit\ndef h(x):\n    return x\n\n\n@triton.jit\ndef a(x):\n    h(x)\n\n\n"
              "@triton.jit\ndef b(x):\n    h(x)\n")
    table = {"h:3": {"name": "h", "line": 3, "globals": {}},
             "a:8": {"name": "a", "line": 8, "globals": {"h": {"kernel": "h:3"}}},
             "b:13": {"name": "b", "line": 13, "globals": {"h": {"kernel": "h:3"}}}}
    builder = KernelBuilder(source, str(tmp_path))
    a, b = builder.build("a:8", table), builder.build("b:13", table)
    assert a.jit.fn.__globals__["h"] is b.jit.fn.__globals__["h"] is _built(builder, "h:3").jit
    # Keys of the same length ("h:3", "a:8") still get files of their own, each with its own text.
    for key, built in builder.built.items():
        with open(built.jit.fn.__code__.co_filename, encoding="utf-8") as handle:
            assert handle.read() == _function_text(source, key.partition(":")[0])


@pytest.mark.parametrize("entry", [
    None, "k", {"name": "k", "line": 4}, {"name": 3, "line": 4, "globals": {}},
    {"name": "k", "line": "4", "globals": {}}, {"name": "k", "line": 4, "globals": []},
    {"line": 4, "globals": {}},
])
def test_a_kernel_the_log_does_not_describe_is_refused(tmp_path, entry):
    with pytest.raises(KernelRefused) as refused:
        KernelBuilder("import triton\n\n@triton.jit\ndef k(x):\n    pass\n", str(tmp_path)).build("k:4", {"k:4": entry})
    assert str(refused.value) == "kernel k:4 is not described in the log"


# --- chains through allowed modules -------------------------------------------------------------
# An allowed module imports others (`tl.core` imports Python's `builtins` and `inspect`; Inductor's
# `triton_compat` imports torch): a chain must reach Triton's own objects, not merely existing ones.


HELPERS = {"th": {"module": "torch._inductor.runtime.triton_helpers"}, "triton": {"module": "triton"},
           "libdevice": {"module": "triton.language.extra.libdevice"}}


@pytest.mark.parametrize(("call", "why"), [
    ("tl.core.builtins.eval('41 + 1')", "core.builtins (module builtins)"),
    ("tl.core.builtins.eval('41 + 1')", "core.builtins.eval (eval, which is builtins's, not Triton's)"),
    ("tl.core.inspect.currentframe()", "core.inspect (module inspect)"),
    ("triton.runtime.driver", "runtime (module triton.runtime)"),
    ("tl.core.no_such_thing", "core.no_such_thing (triton.language.core has no no_such_thing)"),
])
def test_a_chain_through_a_module_to_python_is_refused(call, why):
    assert any(problem.endswith(why) for problem in _problems(f"def kernel(x):\n    v = {call}\n", HELPERS)), why


@pytest.mark.parametrize("expression", [
    "tl.math.exp(tl.core.full([2], 1.0, tl.float32))",
    "tl.maximum(x, x, propagate_nan=tl.PropagateNan.ALL)",  # an enum of Triton's IR module
    "triton.cdiv(x, 2)",
    "tl.float32.primitive_bitwidth",
    "tl.extra.cuda.libdevice.exp(x)",
    "th.maximum(x, x)",  # Inductor's helpers, a jitted function of an allowed module
    "th.libdevice.exp(x)",
    "libdevice.exp(x)",
])
def test_honest_chains_through_triton_modules_pass(expression):
    # The twins of the refusals above: chains that stay in Triton are what kernels are made of.
    assert _problems(f"def kernel(x):\n    v = {expression}\n", HELPERS) == []


@pytest.mark.parametrize(("owner", "allowed"), [
    ("triton.runtime.interpreter", True),  # tl's builtins while a kernel is interpreted (a helper built then)
    ("tritongym.evaluator.worker.interpreter_fixes", True),  # libdevice's CPU implementations
    ("triton.language.standard", True),
    ("triton.runtime.jit", False),
    ("tritongym.evaluator.parent", False),
    ("builtins", False),
])
def test_only_triton_and_its_cpu_stand_ins_define_what_a_chain_may_reach(owner, allowed):
    def function():
        return None

    function.__module__ = owner
    assert (refused_object(function, "f") is None) is allowed
    assert refused_object(types.ModuleType(owner), "m") == (None if owner in KERNEL_MODULES else f"module {owner}")


def test_triton_ir_enums_pass_and_other_enums_and_plain_python_values_do_not():
    import enum

    assert refused_object(tl.PropagateNan, "PropagateNan") is None  # the enum class itself
    assert refused_object(tl.PropagateNan.ALL, "ALL") is None
    from triton._C.libtriton import ir

    # The IR module's other classes build IR on the host: not kernel values.
    assert refused_object(ir.builder, "builder") == "builder, which is triton._C.libtriton.ir's, not Triton's"

    class Colour(enum.Enum):  # an enum, but not Triton's
        RED = 1

    assert refused_object(Colour, "Colour") == f"Colour, which is {__name__}'s, not Triton's"
    # A value with no module of its own (a tuple, a complex number) is plain Python.
    assert refused_object((1, 2), "pair") == "pair, which is Python's, not Triton's"
    assert refused_object(1j, "unit") == "unit, which is Python's, not Triton's"


def test_a_host_helper_of_inductor_is_refused_in_a_body_and_as_a_binding(tmp_path):
    assert _problems("def kernel(x):\n    th.set_driver_to_cpu()\n", HELPERS) == [
        "line 2: set_driver_to_cpu (set_driver_to_cpu, which is host code of torch._inductor.runtime.triton_helpers, "
        "not kernel code)"]
    builder = KernelBuilder("", str(tmp_path))
    with pytest.raises(KernelRefused, match=r"triton_helpers.set_driver_to_gpu is not available to kernels"):
        builder.resolve({"attr": ["torch._inductor.runtime.triton_helpers", "set_driver_to_gpu"]}, {})


def test_an_attr_binding_resolves_only_to_triton_objects(tmp_path):
    # The log's bindings come from the candidate's process: a forged one must not reach past Triton.
    builder = KernelBuilder("", str(tmp_path))
    with pytest.raises(KernelRefused, match=r"triton_compat.torch is not available to kernels \(module torch\)"):
        builder.resolve({"attr": ["torch._inductor.runtime.triton_compat", "torch"]}, {})
    with pytest.raises(KernelRefused, match=r"core.builtins is not available to kernels \(module builtins\)"):
        builder.resolve({"attr": ["triton.language.core", "builtins"]}, {})
    from torch._inductor.runtime import triton_helpers
    from triton.language.extra import libdevice

    assert builder.resolve({"attr": ["torch._inductor.runtime.triton_helpers", "maximum"]}, {}) is (
        triton_helpers.maximum)
    assert builder.resolve({"attr": ["triton.language.extra.libdevice", "exp"]}, {}) is libdevice.exp


def test_a_kernel_calling_eval_through_tl_core_is_not_built(tmp_path):
    source = textwrap.dedent('''
        import triton
        import triton.language as tl

        @triton.jit
        def k(out_ptr, BLOCK: tl.constexpr):
            v = tl.core.builtins.eval("41 + 1")
            tl.store(out_ptr + tl.arange(0, BLOCK), tl.full([BLOCK], v, tl.float32))
        ''')
    table = {"k:5": {"name": "k", "line": 5, "globals": dict(TL)}}
    with pytest.raises(KernelRefused, match=r"kernel k: line 7: core.builtins.eval \(eval, which is builtins's, "
                                            r"not Triton's\); line 7: core.builtins \(module builtins\)"):
        KernelBuilder(source, str(tmp_path)).build("k:5", table)


def test_a_pybind_enum_of_triton_ir_passes_as_on_triton_3_6():
    # Triton 3.6 (the GPU image's) makes tl.PropagateNan a pybind11 enum: the class has __members__,
    # its metaclass (pybind11_type) has none; Triton 3.9's is a Python enum. Both are kernel values.
    meta = type("pybind11_type", (type,), {})
    propagate_nan = meta("PROPAGATE_NAN", (), {"__module__": "triton._C.libtriton.ir"})
    propagate_nan.__members__ = {"ALL": propagate_nan()}
    assert not hasattr(type(propagate_nan), "__members__")
    assert refused_object(propagate_nan, "PropagateNan") is None
    assert refused_object(propagate_nan.__members__["ALL"], "ALL") is None
    # Its other classes (no __members__) stay refused, as on 3.9.
    builder = meta("builder", (), {"__module__": "triton._C.libtriton.ir"})
    assert refused_object(builder, "builder") == "builder, which is triton._C.libtriton.ir's, not Triton's"
    assert refused_object(builder(), "b") == "b, which is triton._C.libtriton.ir's, not Triton's"


def test_the_build_cache_keys_on_every_kernel_an_entry_names_defaults_included():
    # A kernel built with other constants is another kernel: its own globals, the globals of a kernel
    # it names, or a kernel named in its logged defaults change the cache key.
    from tritongym.evaluator.cleanroom.kernels import _bindings_digest

    def table(constant: float, via: str) -> dict:
        helper = {"name": "h", "line": 3, "globals": {"C": {"number": constant}}}
        outer = {"name": "k", "line": 9, "globals": {}}
        if via == "globals":
            outer["globals"] = {"h": {"kernel": "h:3"}}
        else:
            outer["header"] = {"defaults": {"0": {"kernel": "h:3"}}}
        return {"k:9": outer, "h:3": helper}

    for via in ("globals", "defaults"):
        assert _bindings_digest("k:9", table(1.0, via)) == _bindings_digest("k:9", table(1.0, via))
        assert _bindings_digest("k:9", table(1.0, via)) != _bindings_digest("k:9", table(2.0, via))
