"""Tests for tritongym.tasks.problem: `Problem` validation and the normalised content hash."""

from __future__ import annotations

import dataclasses

import pytest

from tritongym.errors import ProblemError, TritongymError
from tritongym.tasks.problem import REQUIRED_NAMES, Problem, defined_names, normalized_source_hash

RELU = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
"""


def test_valid_problem_keeps_its_fields_and_hash():
    problem = Problem(source=RELU, name="19_ReLU", problem_id="kernelbench/level1/19", level=1, origin="x.py")
    assert (problem.name, problem.problem_id, problem.level, problem.origin) == (
        "19_ReLU",
        "kernelbench/level1/19",
        1,
        "x.py",
    )
    assert problem.content_hash == normalized_source_hash(RELU)
    assert len(problem.content_hash) == 64 and int(problem.content_hash, 16) >= 0


def test_problem_is_frozen():
    problem = Problem.from_source(RELU, name="relu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.name = "other"  # type: ignore[misc]


def test_from_source_defaults_id_to_name_and_passes_fields():
    problem = Problem.from_source(RELU, name="relu", level=2, origin="inline")
    assert problem.problem_id == "relu"
    assert problem.level == 2 and problem.origin == "inline"
    assert Problem.from_source(RELU, name="relu", problem_id="custom/7").problem_id == "custom/7"


def test_content_hash_cannot_be_passed_in():
    with pytest.raises(TypeError):
        Problem(source=RELU, name="x", problem_id="x", content_hash="0" * 64)  # type: ignore[call-arg]


@pytest.mark.parametrize("missing", REQUIRED_NAMES)
def test_each_missing_required_name_is_named_in_the_error(missing):
    renamed = {
        "Model": "class Model(",
        "get_inputs": "def get_inputs(",
        "get_init_inputs": "def get_init_inputs(",
    }
    source = RELU.replace(renamed[missing], renamed[missing].replace(missing, missing + "_renamed"))
    with pytest.raises(ProblemError) as info:
        Problem(source=source, name="p", problem_id="level1/p", origin="p.py")
    message = str(info.value)
    assert f"does not define {missing};" in message
    assert "'level1/p'" in message and "p.py" in message
    assert "`class Model`, `get_inputs()` and `get_init_inputs()`" in message


def test_all_missing_names_are_listed_together():
    with pytest.raises(ProblemError, match=r"does not define Model, get_inputs, get_init_inputs"):
        Problem.from_source("import torch\nx = 1\n", name="empty-ish")


def test_required_names_may_come_from_imports_and_assignments():
    source = "from somewhere import Model\nget_inputs = lambda: []\ndef get_init_inputs():\n    return []\n"
    assert Problem.from_source(source, name="ok").name == "ok"


def test_names_defined_only_inside_a_function_do_not_count():
    source = (
        "def outer():\n    class Model: pass\n    def get_inputs(): pass\n\ndef get_init_inputs(): pass\n"
    )
    with pytest.raises(ProblemError, match=r"does not define Model, get_inputs;"):
        Problem.from_source(source, name="nested")


def test_syntax_error_is_a_problem_error_with_the_line():
    source = RELU.replace("def forward(self, x):", "def forward(self, x)")
    with pytest.raises(ProblemError) as info:
        Problem(source=source, name="bad", problem_id="bad/1", origin="bad.py")
    message = str(info.value)
    assert "not valid Python" in message
    assert "at line 6" in message
    assert "bad.py" in message and "'bad/1'" in message


def test_syntax_error_without_origin_says_inline():
    with pytest.raises(ProblemError, match=r"\(inline\): not valid Python"):
        Problem.from_source("class Model(:\n", name="x")


@pytest.mark.parametrize("source", ["", "   \n\t\n", None])
def test_empty_source_is_rejected(source):
    with pytest.raises(ProblemError, match="the source is empty"):
        Problem(source=source, name="e", problem_id="e")  # type: ignore[arg-type]


def test_problem_error_is_a_tritongym_error():
    assert issubclass(ProblemError, TritongymError)


# -- content hash ----------------------------------------------------------------------------------


def test_hash_ignores_comments_blank_lines_and_spacing():
    reformatted = (
        "# a leading comment\n"
        "import torch   # trailing comment\n"
        "import torch.nn  as  nn\n"
        "\n\n\n"
        "class Model( nn.Module ):\n"
        "  def forward( self,x ):  # two-space indentation\n"
        "    return torch.relu( x )\n"
        "def get_inputs():\n"
        "  return [ torch.randn(4,4) ]\n"
        "\n"
        "def get_init_inputs():\n"
        "  return []   \n"
    )
    assert normalized_source_hash(reformatted) == normalized_source_hash(RELU)
    assert (
        Problem.from_source(reformatted, name="a").content_hash
        == Problem.from_source(RELU, name="b").content_hash
    )


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("torch.randn(4, 4)", "torch.randn(4, 5)"),  # a shape
        ("torch.relu(x)", "torch.sigmoid(x)"),  # the operator
        ("return [torch.randn(4, 4)]", "return [torch.randn(4, 4), 1]"),  # an extra input
        ("        return torch.relu(x)", "        return torch.relu(x)\n    x = 1"),  # a statement
    ],
)
def test_hash_changes_with_the_code(old, new):
    changed = RELU.replace(old, new)
    assert changed != RELU
    assert normalized_source_hash(changed) != normalized_source_hash(RELU)


def test_hash_sees_indentation_structure():
    """Moving a statement out of a block changes the program, so it changes the hash."""
    inside = "if a:\n    b = 1\n    c = 2\n"
    outside = "if a:\n    b = 1\nc = 2\n"
    assert normalized_source_hash(inside) != normalized_source_hash(outside)


def test_hash_sees_string_contents_and_docstrings():
    assert normalized_source_hash('x = "a  b"\n') != normalized_source_hash('x = "a b"\n')
    assert normalized_source_hash('"""doc one"""\n') != normalized_source_hash('"""doc two"""\n')


def test_hash_falls_back_to_raw_text_for_untokenizable_source():
    broken = 'x = """unterminated\n'
    assert normalized_source_hash(broken) != normalized_source_hash(broken + " ")
    assert len(normalized_source_hash(broken)) == 64


def test_defined_names_covers_every_top_level_form():
    import ast

    tree = ast.parse(
        "import a.b\nimport c as d\nfrom e import f, g as h\nclass K: pass\ndef fn(): pass\n"
        "async def afn(): pass\nx = y = 1\nz: int = 2\nw += 1\nif True:\n    guarded = 1\n"
        "try:\n    class T: pass\nexcept ImportError:\n    fallback = 0\ndef outer():\n    inner = 1\n"
    )
    # Module-level if/try blocks define names too; a function's locals do not.
    assert defined_names(tree) == {"a", "d", "f", "h", "K", "fn", "afn", "x", "y", "z", "w", "guarded", "T",
                                   "fallback", "outer"}
