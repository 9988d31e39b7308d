"""Import-layer contracts: the evaluator core and its workers stay light and one-way.

The candidate worker starts for every evaluation and must run on GPU machines that have only
torch and triton; the evaluator must never depend on the service, Ray, trainers or the RL library
(data flows problem → evaluator → result → env → trajectory → rl).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN_FOR_CORE = ("fastapi", "starlette", "pydantic", "httpx", "ray", "verl", "trl", "transformers",
                      "datasets", "pyarrow", "pandas", "tritongym.rl", "tritongym.bench", "tritongym.service",
                      "tritongym.env", "tritongym.execution", "tritongym.integrations")


@pytest.mark.parametrize("module", [
    "tritongym.evaluator.worker.candidate",
    "tritongym.evaluator.worker.reference",
    "tritongym.evaluator",
    "tritongym",
])
def test_core_modules_import_nothing_heavy(module):
    code = f"import sys, json, {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    bad = [m for m in loaded if any(m == f or m.startswith(f + ".") for f in FORBIDDEN_FOR_CORE)]
    assert bad == [], f"{module} imports {bad}"


def test_the_rl_library_imports_no_trainer():
    code = "import sys, json, tritongym.rl; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True,
                                       check=True).stdout)
    assert not [m for m in loaded if m.split(".")[0] in ("verl", "trl", "ray", "transformers")]
