"""Problems (KernelBench format) and the loaders that read them."""

from tritongym.tasks.loaders import (
    builtin_suite,
    find_problem,
    load_hf_dataset,
    load_hf_rows,
    load_kernelbench_dir,
    load_problem_file,
    load_problem_folder,
    load_problems,
    problem_from_row,
    select_problems,
)
from tritongym.tasks.problem import Problem

__all__ = [
    "Problem",
    "builtin_suite",
    "find_problem",
    "load_hf_dataset",
    "load_hf_rows",
    "load_kernelbench_dir",
    "load_problem_file",
    "load_problem_folder",
    "load_problems",
    "problem_from_row",
    "select_problems",
]
