"""Tests for tritongym.tasks.loaders: every loader, `load_problems` dispatch, the built-in suite,
and the shared KernelBench dataset (all 250 problems load and their `Model` can be built)."""

from __future__ import annotations

import json
import sys
import time
import types
import warnings
from pathlib import Path

import pytest
import torch

from tritongym.errors import DependencyError, ProblemError
from tritongym.tasks import (
    Problem,
    builtin_suite,
    load_hf_dataset,
    load_hf_rows,
    load_kernelbench_dir,
    load_problem_file,
    load_problems,
    problem_from_row,
)

TINY = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * {factor}


def get_inputs():
    return [torch.randn(2, 2)]


def get_init_inputs():
    return []
"""


def tiny(factor: int = 2) -> str:
    return TINY.format(factor=factor)


def row(level, problem_id, name, factor=2):
    return {"code": tiny(factor), "level": level, "problem_id": problem_id, "name": name}


# -- single file -----------------------------------------------------------------------------------


def test_load_problem_file_outside_a_level_folder(tmp_path):
    path = tmp_path / "my_task.py"
    path.write_text(tiny())
    problem = load_problem_file(path)
    assert (problem.name, problem.problem_id, problem.level, problem.origin) == (
        "my_task",
        "my_task",
        None,
        str(path),
    )
    assert problem.source == tiny()


def test_load_problem_file_takes_the_level_from_its_folder(tmp_path):
    path = tmp_path / "level2" / "7_Fused.py"
    path.parent.mkdir()
    path.write_text(tiny())
    problem = load_problem_file(str(path))
    assert problem.level == 2
    assert problem.problem_id == "kernelbench/level2/7"  # the id load_kernelbench_dir gives it too


def test_load_problem_file_explicit_level_and_id_win(tmp_path):
    path = tmp_path / "level2" / "7_Fused.py"
    path.parent.mkdir()
    path.write_text(tiny())
    problem = load_problem_file(path, level=3, problem_id="mine/1")
    assert (problem.level, problem.problem_id) == (3, "mine/1")


def test_load_problem_file_errors(tmp_path):
    with pytest.raises(ProblemError, match="problem file not found: .*missing.py"):
        load_problem_file(tmp_path / "missing.py")
    with pytest.raises(ProblemError, match="is a directory; use load_kernelbench_dir"):
        load_problem_file(tmp_path)
    binary = tmp_path / "binary.py"
    binary.write_bytes(b"\xff\xfe\x00 not utf-8")
    with pytest.raises(ProblemError, match="is not UTF-8 text"):
        load_problem_file(binary)
    broken = tmp_path / "broken.py"
    broken.write_text("class Model(:\n")
    with pytest.raises(ProblemError, match=r"broken.py\): not valid Python"):
        load_problem_file(broken)


# -- KernelBench directory -------------------------------------------------------------------------

#: (level, problem_id) of the shared rows copied into the temporary KernelBench layout. Level 1's
#: ids are chosen so that numeric order (1, 2, 10, 19) differs from name order (1, 10, 19, 2).
LAYOUT_ROWS = [(1, 19), (1, 2), (1, 10), (1, 1), (2, 12), (2, 3)]


@pytest.fixture
def kernelbench_checkout(tmp_path, kernelbench_rows) -> Path:
    """A KernelBench checkout in tmp_path (``KernelBench/level1/...``) made of real shared rows."""
    by_key = {(r["level"], r["problem_id"]): r for r in kernelbench_rows}
    for key in LAYOUT_ROWS:
        source = by_key[key]
        folder = tmp_path / "checkout" / "KernelBench" / f"level{key[0]}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / source["name"]).write_text(source["code"], encoding="utf-8")
    # Noise a loader must ignore: a non-level folder and a non-Python file.
    (tmp_path / "checkout" / "KernelBench" / "results").mkdir()
    (tmp_path / "checkout" / "KernelBench" / "level1" / "README.md").write_text("not a problem")
    return tmp_path / "checkout"


def test_kernelbench_checkout_root_loads_in_level_then_numeric_order(kernelbench_checkout, kernelbench_rows):
    problems = load_kernelbench_dir(kernelbench_checkout)
    assert [p.problem_id for p in problems] == [
        "kernelbench/level1/1",
        "kernelbench/level1/2",
        "kernelbench/level1/10",
        "kernelbench/level1/19",
        "kernelbench/level2/3",
        "kernelbench/level2/12",
    ]
    by_key = {(r["level"], r["problem_id"]): r for r in kernelbench_rows}
    for problem in problems:
        level, number = problem.level, int(problem.problem_id.rsplit("/", 1)[1])
        expected = by_key[(level, number)]
        assert problem.source == expected["code"]
        assert problem.name == expected["name"][:-3]
        assert Path(problem.origin).name == expected["name"]


def test_kernelbench_folder_itself_loads_the_same(kernelbench_checkout):
    from_root = load_kernelbench_dir(kernelbench_checkout)
    from_folder = load_kernelbench_dir(kernelbench_checkout / "KernelBench")
    assert [p.problem_id for p in from_folder] == [p.problem_id for p in from_root]
    assert [p.content_hash for p in from_folder] == [p.content_hash for p in from_root]


def test_single_level_folder(kernelbench_checkout):
    problems = load_kernelbench_dir(kernelbench_checkout / "KernelBench" / "level2")
    assert [p.problem_id for p in problems] == ["kernelbench/level2/3", "kernelbench/level2/12"]
    assert {p.level for p in problems} == {2}


def test_kernelbench_level_filter(kernelbench_checkout):
    assert [p.level for p in load_kernelbench_dir(kernelbench_checkout, levels=[2])] == [2, 2]
    assert len(load_kernelbench_dir(kernelbench_checkout, levels=[1, 2])) == 6
    assert load_kernelbench_dir(kernelbench_checkout, levels=[3]) == []
    assert load_kernelbench_dir(kernelbench_checkout / "KernelBench" / "level2", levels=[1]) == []


def test_kernelbench_dir_files_without_a_number_come_last(tmp_path):
    folder = tmp_path / "level1"
    folder.mkdir()
    for name in ("b_extra.py", "3_three.py", "a_extra.py", "20_twenty.py"):
        (folder / name).write_text(tiny())
    problems = load_kernelbench_dir(folder)
    assert [p.name for p in problems] == ["3_three", "20_twenty", "a_extra", "b_extra"]
    assert problems[-1].problem_id == "kernelbench/level1/b_extra"


def test_kernelbench_dir_errors(tmp_path):
    with pytest.raises(ProblemError, match="not a directory"):
        load_kernelbench_dir(tmp_path / "nowhere")
    (tmp_path / "stuff").mkdir()
    with pytest.raises(ProblemError, match="holds no levelN/ folders; expected a KernelBench layout"):
        load_kernelbench_dir(tmp_path / "stuff")


def test_kernelbench_dir_reports_the_broken_file(tmp_path):
    folder = tmp_path / "level1"
    folder.mkdir()
    (folder / "1_good.py").write_text(tiny())
    (folder / "2_bad.py").write_text("import torch\n")
    with pytest.raises(ProblemError, match=r"kernelbench/level1/2.*does not define Model"):
        load_kernelbench_dir(folder)


# -- Hugging Face rows -----------------------------------------------------------------------------


def test_problem_from_row_maps_the_columns():
    problem = problem_from_row(row(1, 19, "19_ReLU.py"), origin="data:3")
    assert (problem.problem_id, problem.name, problem.level, problem.origin) == (
        "kernelbench/level1/19",
        "19_ReLU",
        1,
        "data:3",
    )
    assert problem.source == tiny()


def test_problem_from_row_optional_columns():
    no_id = problem_from_row({"code": tiny(), "level": 2, "name": "42_Thing.py"})
    assert no_id.problem_id == "kernelbench/level2/42"
    no_level = problem_from_row({"code": tiny(), "name": "5_X.py", "problem_id": 5})
    assert (no_level.level, no_level.problem_id) == (None, "kernelbench/5")
    only_code = problem_from_row({"code": tiny()})
    assert (only_code.name, only_code.problem_id) == ("problem", "kernelbench/problem")
    string_level = problem_from_row({"code": tiny(), "level": "3", "name": "1_A.py", "problem_id": 1})
    assert string_level.level == 3


@pytest.mark.parametrize("bad", [{"level": 1, "name": "x.py"}, {"code": None}, {"code": 42}])
def test_problem_from_row_needs_a_code_column(bad):
    with pytest.raises(ProblemError, match=r"no text column 'code'.*\(code, level, name, problem_id\)"):
        problem_from_row(bad, origin="file.jsonl:7")


def write_jsonl(path: Path, rows: list[dict], blank_lines: bool = False) -> Path:
    lines = [json.dumps(r) for r in rows]
    text = ("\n\n".join(lines) if blank_lines else "\n".join(lines)) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


ROWS = [row(1, 1, "1_A.py", 1), row(2, 5, "5_B.py", 2), row(1, 2, "2_C.py", 3), row(3, 9, "9_D.py", 4)]


def test_jsonl_rows_load_in_file_order_with_origins(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS, blank_lines=True)
    problems = load_hf_rows(path)
    assert [p.problem_id for p in problems] == [
        "kernelbench/level1/1",
        "kernelbench/level2/5",
        "kernelbench/level1/2",
        "kernelbench/level3/9",
    ]
    assert [p.source for p in problems] == [r["code"] for r in ROWS]
    assert problems[0].origin.startswith(str(path))
    assert load_hf_rows(str(path), levels=[1])[1].name == "2_C"


def test_jsonl_level_filter(tmp_path):
    path = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    assert [p.name for p in load_hf_rows(path, levels=[1])] == ["1_A", "2_C"]
    assert [p.name for p in load_hf_rows(path, levels={2, 3})] == ["5_B", "9_D"]
    assert load_hf_rows(path, levels=[4]) == []


def test_jsonl_bad_line_names_the_line(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(ProblemError, match=r"rows.jsonl:2: not a JSON object"):
        load_hf_rows(path)


def test_parquet_rows_match_jsonl_rows(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), path)
    from_parquet = load_hf_rows(path)
    from_jsonl = load_hf_rows(write_jsonl(tmp_path / "rows.jsonl", ROWS))
    assert [(p.problem_id, p.name, p.level, p.content_hash) for p in from_parquet] == [
        (p.problem_id, p.name, p.level, p.content_hash) for p in from_jsonl
    ]
    assert [p.name for p in load_hf_rows(path, levels=[3])] == ["9_D"]
    assert all(p.origin.startswith(str(path)) for p in from_parquet)


def test_parquet_without_pyarrow_names_the_extra(tmp_path, monkeypatch):
    path = tmp_path / "rows.parquet"
    path.write_bytes(b"PAR1")
    # None in sys.modules makes `import pyarrow.parquet` raise ImportError, installed or not.
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(DependencyError, match=r"pyarrow: from the clone: pip install -e '\.\[data\]'"):
        load_hf_rows(path)


def test_iterable_of_rows(tmp_path):
    problems = load_hf_rows(iter(ROWS), levels=[1, 3])
    assert [p.name for p in problems] == ["1_A", "2_C", "9_D"]
    assert problems[0].origin == "row 0"
    assert [p.name for p in load_hf_rows(tuple(ROWS))] == ["1_A", "5_B", "2_C", "9_D"]


def test_rows_without_level_are_dropped_by_a_level_filter():
    rows = [{"code": tiny(), "name": "1_A.py"}, row(1, 2, "2_B.py")]
    assert [p.name for p in load_hf_rows(rows)] == ["1_A", "2_B"]
    assert [p.name for p in load_hf_rows(rows, levels=[1])] == ["2_B"]


def test_hf_rows_file_errors(tmp_path):
    with pytest.raises(ProblemError, match="dataset file not found"):
        load_hf_rows(tmp_path / "absent.jsonl")
    other = tmp_path / "rows.csv"
    other.write_text("code\n")
    with pytest.raises(ProblemError, match=r"rows.csv: expected a .jsonl or .parquet file"):
        load_hf_rows(other)


def test_load_hf_dataset_without_datasets_names_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DependencyError, match="pip install datasets") as info:
        load_hf_dataset()
    assert isinstance(info.value, ImportError)


def test_load_hf_dataset_reads_every_split_through_load_hf_rows(monkeypatch):
    """With `datasets` present, every split of what `load_dataset` returns is read (stubbed here)."""
    calls = []

    def load_dataset(name, **kwargs):
        calls.append((name, kwargs))
        return {"level_1": [row(1, 1, "1_A.py")], "level_2": [row(2, 3, "3_B.py"), row(2, 4, "4_C.py")]}

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    problems = load_hf_dataset("org/KernelBench", levels=[2], revision="abc")
    assert calls == [("org/KernelBench", {"revision": "abc"})]
    assert [p.problem_id for p in problems] == ["kernelbench/level2/3", "kernelbench/level2/4"]


# -- load_problems dispatch ------------------------------------------------------------------------


def test_load_problems_dispatches_on_the_spec(tmp_path, kernelbench_checkout):
    import pyarrow as pa
    import pyarrow.parquet as pq

    single = tmp_path / "one.py"
    single.write_text(tiny())
    jsonl = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    parquet = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), parquet)

    assert [p.problem_id for p in load_problems("builtin")] == [p.problem_id for p in builtin_suite()]
    assert [p.name for p in load_problems(single)] == ["one"]
    assert [p.name for p in load_problems(str(jsonl), levels=[2])] == ["5_B"]
    assert [p.name for p in load_problems(parquet, levels=[3])] == ["9_D"]
    assert len(load_problems(kernelbench_checkout, levels=[1])) == 4


def test_load_problems_error_messages(tmp_path):
    with pytest.raises(
        ProblemError,
        match=r"no such problem source: .*nothing.*expected 'builtin', a .py, "
        r".jsonl or .parquet file, a folder, or a Hugging Face dataset id such as ScalingIntelligence/KernelBench",
    ):
        load_problems(tmp_path / "nothing")
    existing = tmp_path / "problems.txt"
    existing.write_text("x")
    with pytest.raises(ProblemError, match=r"cannot read problems from .*problems.txt: expected a .py"):
        load_problems(existing)
    with pytest.raises(ProblemError, match="problem file not found"):
        load_problems(tmp_path / "absent.py")
    with pytest.raises(ProblemError, match="dataset file not found"):
        load_problems(tmp_path / "absent.jsonl")


# -- built-in suite --------------------------------------------------------------------------------


def test_builtin_suite_has_matching_example_solutions(builtin_problems, repo_root):
    assert len(builtin_problems) >= 12
    ids = [p.problem_id for p in builtin_problems]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    for problem in builtin_problems:
        assert isinstance(problem, Problem)
        assert problem.problem_id == f"builtin/{problem.name}"
        assert problem.level is None
        solution = repo_root / "examples" / "builtin" / f"{problem.name}.py"
        assert solution.is_file(), f"no example solution for {problem.problem_id}"
        assert "ModelNew" in solution.read_text()


def test_builtin_suite_is_fresh_and_stable():
    first, second = builtin_suite(), builtin_suite()
    assert [p.content_hash for p in first] == [p.content_hash for p in second]
    assert len({p.content_hash for p in first}) == len(first)


# -- the shared KernelBench dataset ----------------------------------------------------------------


def test_shared_dataset_loads_all_250_problems(kernelbench_jsonl):
    problems = load_hf_rows(kernelbench_jsonl)
    assert len(problems) == 250
    assert [sum(p.level == level for p in problems) for level in (1, 2, 3)] == [100, 100, 50]
    assert len({p.problem_id for p in problems}) == 250
    assert all(p.problem_id == f"kernelbench/level{p.level}/{p.name.split('_')[0]}" for p in problems)
    assert len(load_hf_rows(kernelbench_jsonl, levels=[3])) == 50
    assert len(load_problems(str(kernelbench_jsonl), levels=[1, 2])) == 200


#: Problems whose constructor calls ``Tensor.item()`` (``dpr = [x.item() for x in torch.linspace(...)]``,
#: the stochastic-depth schedule), which meta tensors cannot answer: they are built on the CPU instead
#: (about 20 M and 28 M parameters, well under a second each).
BUILT_ON_CPU = {"level3/29_SwinMLP", "level3/30_SwinTransformerV2"}

#: Problems that import ``einops`` at module level (only their forward uses it). einops is not a
#: tritongym dependency; when it is not installed a stub module stands in, so that the constructor,
#: which never calls it, can still be built. (Evaluating these two needs einops installed.)
NEEDS_EINOPS = {"level3/48_Mamba2ReturnY", "level3/49_Mamba2ReturnFinalState"}


def _einops_stub() -> types.ModuleType:
    stub = types.ModuleType("einops")

    def unavailable(*args, **kwargs):
        raise AssertionError("einops stub: only constructors may run in this test")

    stub.rearrange = stub.repeat = stub.reduce = stub.einsum = unavailable
    return stub


def test_every_shared_problem_builds_its_model(kernelbench_jsonl, monkeypatch):
    """Exec each problem in a fresh module and build ``Model(*get_init_inputs())`` on the meta device."""
    try:
        import einops  # noqa: F401
    except ImportError:
        monkeypatch.setitem(sys.modules, "einops", _einops_stub())
    problems = load_hf_rows(kernelbench_jsonl)
    started = time.monotonic()
    failures, built_on = [], {}
    for problem in problems:
        key = f"level{problem.level}/{problem.name}"
        module = types.ModuleType(f"kernelbench_l{problem.level}_{problem.name}")
        try:
            # The dataset's own code warns (nested-tensor hints, meshgrid indexing); not ours to fix.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(compile(problem.source, f"{key}.py", "exec"), module.__dict__)
                init_inputs = module.get_init_inputs()
                device = "cpu" if key in BUILT_ON_CPU else "meta"
                with torch.device(device):
                    model = module.Model(*init_inputs)
            assert isinstance(model, torch.nn.Module), f"Model(...) built a {type(model).__name__}"
            built_on[key] = {p.device.type for p in model.parameters()} or {device}
        except Exception as exc:  # noqa: BLE001 - collect every failure, report them together
            failures.append(f"{key}: {type(exc).__name__}: {exc}"[:300])
    elapsed = time.monotonic() - started
    assert not failures, "\n".join(failures)
    assert len(built_on) == 250
    assert {key for key, devices in built_on.items() if devices != {"meta"}} == BUILT_ON_CPU
    assert NEEDS_EINOPS <= set(built_on)
    assert elapsed < 30, f"building 250 models took {elapsed:.1f} s"


def test_cpu_built_problems_really_fail_on_meta(kernelbench_jsonl):
    """Keeps BUILT_ON_CPU honest: each of them fails on meta for the documented reason."""
    by_key = {f"level{p.level}/{p.name}": p for p in load_hf_rows(kernelbench_jsonl, levels=[3])}
    for key in sorted(BUILT_ON_CPU):
        module = types.ModuleType("kernelbench_meta_probe")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(by_key[key].source, f"{key}.py", "exec"), module.__dict__)
            with (
                torch.device("meta"),
                pytest.raises(RuntimeError, match=r"item\(\) cannot be called on meta"),
            ):
                module.Model(*module.get_init_inputs())


def test_einops_problems_import_einops(kernelbench_jsonl):
    """Keeps NEEDS_EINOPS honest: exactly these shared problems import einops."""
    problems = load_hf_rows(kernelbench_jsonl)
    importing = {
        f"level{p.level}/{p.name}"
        for p in problems
        if "from einops" in p.source or "import einops" in p.source
    }
    assert importing == NEEDS_EINOPS


def test_select_problems_by_name_or_id_and_a_miss_is_a_usage_error():
    from tritongym.tasks import builtin_suite, select_problems

    suite = builtin_suite()
    first, second = suite[0], suite[1]
    assert select_problems(suite, None) == suite and select_problems(suite, []) == suite
    assert select_problems(suite, [first.name, second.problem_id]) == [first, second]
    with pytest.raises(ValueError, match=r"none of \['nope'\] is a problem of builtin"):
        select_problems(suite, ["nope"], "builtin")
