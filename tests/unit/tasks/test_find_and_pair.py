"""Problem lookup by id (`find_problem`), plain problem folders, and pairing solutions with problems
in KernelBench's multi-sample layout (`tritongym.bench.solutions`)."""

from __future__ import annotations

import pytest

from tritongym.bench.solutions import pair_solutions
from tritongym.errors import ProblemError
from tritongym.tasks import find_problem, load_problems

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
'''


def test_find_problem_by_builtin_id_name_and_file(tmp_path):
    assert find_problem("builtin/07_softmax").problem_id == "builtin/07_softmax"
    assert find_problem("07_softmax").problem_id == "builtin/07_softmax"
    path = tmp_path / "double.py"
    path.write_text(PROBLEM)
    assert find_problem(path).name == "double"
    with pytest.raises(ProblemError, match="problem file not found"):
        find_problem(tmp_path / "missing.py")
    with pytest.raises(ProblemError, match="ids look like builtin/01_scaled_add"):
        find_problem("builtin/nope")


def test_a_plain_folder_of_problem_files_loads_by_file_name(tmp_path):
    for name in ("b_double", "a_double", "_private"):
        (tmp_path / f"{name}.py").write_text(PROBLEM)
    assert [p.problem_id for p in load_problems(tmp_path)] == ["a_double", "b_double"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProblemError, match="holds no problem .py files and no levelN/ folders"):
        load_problems(tmp_path / "empty")


def test_kernelbench_samples_single_files_and_missing(tmp_path):
    root = tmp_path / "kb" / "level1"
    root.mkdir(parents=True)
    for name in ("19_ReLU", "23_Softmax", "40_LayerNorm"):
        (root / f"{name}.py").write_text(PROBLEM)
    problems = load_problems(tmp_path / "kb")
    solutions = tmp_path / "runs"
    (solutions / "level1").mkdir(parents=True)
    for sample in (2, 0, 10):
        (solutions / f"level_1_problem_19_sample_{sample}_kernel.py").write_text("x")
    (solutions / "level_2_problem_19_sample_0_kernel.py").write_text("x")  # another level: not problem 19 of 1
    (solutions / "level1" / "23_Softmax.py").write_text("x")
    jobs, missing = pair_solutions(problems, solutions)
    assert [(j.label, j.solution.name) for j in jobs] == [
        ("kernelbench/level1/19#0", "level_1_problem_19_sample_0_kernel.py"),
        ("kernelbench/level1/19#2", "level_1_problem_19_sample_2_kernel.py"),
        ("kernelbench/level1/19#10", "level_1_problem_19_sample_10_kernel.py"),
        ("kernelbench/level1/23", "23_Softmax.py")]
    assert jobs[0].shown == "kernelbench/level1/19#0 19_ReLU"
    assert [p.name for p in missing] == ["40_LayerNorm"]
