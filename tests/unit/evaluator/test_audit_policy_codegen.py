"""The standard library generating code for itself is not the candidate's exec (issue 44, family 5).

``@dataclass`` and ``namedtuple`` build methods by compiling text made of the class's field names;
the run-time policy used to blame the candidate for "compile <string>". Each honest scenario must
run with nothing refused; each attack (the candidate's own exec, text smuggled into a generator
through its field names or through anything the candidate can rebind, a generator's exec site
called directly) must still be refused. Every scenario imports a candidate file in its own process
that installs the policy first, as the worker does (forked from test_audit_policy.py's driver).
"""

from __future__ import annotations

import pytest
from tests.unit.evaluator.test_audit_policy import run

HONEST = {
    "dataclass": """
        from dataclasses import dataclass, field

        @dataclass
        class Config:
            block_m: int = 64
            block_n: int = 64
            num_warps: int = 4
            stages: list = field(default_factory=lambda: [2, 3])

        RESULT = repr(Config(block_m=128)) + str(Config() == Config())
    """,
    "frozen-ordered-slots-kw-only-dataclass": """
        import dataclasses

        @dataclasses.dataclass(frozen=True, order=True, slots=True, kw_only=True)
        class Tile:
            m: int
            n: int
            self_: int = 0

        @dataclasses.dataclass(frozen=True)
        class Child(Tile):
            extra: float = 1.0

        @dataclasses.dataclass(eq=True, unsafe_hash=True)
        class Hashed:
            key: str = "k"

        RESULT = [repr(Tile(m=1, n=2)), Tile(m=1, n=2) < Tile(m=2, n=1), repr(Child(m=1, n=2)), hash(Hashed())]
    """,
    "make-dataclass": """
        import dataclasses
        Point = dataclasses.make_dataclass("Point", [("x", int), ("y", int, dataclasses.field(default=0))])
        RESULT = repr(Point(1))
    """,
    "namedtuple-typing-namedtuple-and-enum": """
        import collections
        import enum
        import typing
        Shape = collections.namedtuple("Shape", ["m", "n", "k"], defaults=[1])
        class Launch(typing.NamedTuple):
            grid: tuple
            num_warps: int = 4
        Pair = typing.NamedTuple("Pair", [("a", int), ("b", int)])
        Layout = enum.Enum("Layout", "ROW COLUMN")
        class Mode(enum.Enum):
            FAST = 1
        RESULT = [Shape(1, 2)._asdict(), Launch((1, 1))._replace(num_warps=8), Pair(1, 2), Layout.ROW.name,
                  Mode.FAST.value]
    """,
}


@pytest.mark.parametrize("name", sorted(HONEST))
def test_the_standard_library_generating_methods_is_allowed(tmp_path, name):
    result = run(tmp_path, HONEST[name])
    assert result["outcome"] == "ran" and result["refused"] == [], result


ATTACKS = {
    # the old rule's attack: the candidate's own code from text, however it is spelled
    "own-exec": "exec('RESULT = 1')",
    "own-eval": "RESULT = eval('1 + 1')",
    # a real file's name given to compile: still text (the policy used to judge by the filename)
    "own-compile-then-exec": "code = compile('RESULT = 1', __file__, 'exec')\nexec(code)",
    # code smuggled into dataclasses' text through a field name that is not an identifier (only
    # __eq__ is generated, so the text compiles: `(self.x,print('escaped'),self.x,)`)
    "field-name-injection": """
        import dataclasses
        class Evil:
            __annotations__ = {"x,print('escaped'),self.x": int}
        dataclasses.dataclass(init=False, repr=False, eq=True)(Evil)
    """,
    "field-name-str-subclass": """
        import dataclasses
        class Sly(str):
            def isidentifier(self):
                return True
        class Evil:
            __annotations__ = {Sly("x,print('escaped'),self.x"): int}
        dataclasses.dataclass(init=False, repr=False, eq=True)(Evil)
    """,
    # a generator's exec site reached directly, with the candidate's own text
    "create-fn-called-directly": """
        import dataclasses
        fn = dataclasses._create_fn("f", "", " return 1")
        RESULT = fn()
    """,
    # dataclasses' text writer replaced through the module's namespace (no audit event)
    "rebound-generator-helper": """
        import dataclasses, functools
        vars(dataclasses)["_repr_fn"] = functools.partial(dataclasses._create_fn, "__repr__", "self",
                                                          " return 'escaped'")
        @dataclasses.dataclass
        class A:
            x: int
    """,
    # a rebound builtin that dataclasses uses to write its text
    "rebound-builtin": """
        import dataclasses
        builtins = len.__self__
        original = builtins.repr
        vars(builtins)["repr"] = lambda value: original(value)
        @dataclasses.dataclass(frozen=True)
        class A:
            x: int
    """,
    # the harness's own dataclass methods are generated code too: still the harness's
    "harness-dataclass-defaults": """
        from tritongym.evaluator.common.channel import Message
        RESULT = str(Message.__init__.__defaults__)
    """,
    "harness-dataclass-defaults-write": """
        from tritongym.evaluator.common.channel import Message
        Message.__init__.__defaults__ = (None, 0)
    """,
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_text_from_the_candidate_is_still_refused(tmp_path, name):
    result = run(tmp_path, ATTACKS[name])
    assert result["outcome"].startswith("refused"), result
    expected = ("object.__getattr__", "object.__setattr__") if name.startswith("harness-") else ("compile", "exec")
    assert any(entry.startswith(expected) for entry in result["refused"]), result
