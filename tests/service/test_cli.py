"""``tritongym eval --server URL`` and ``tritongym run --server URL`` against a real server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.service.conftest import BUILTIN, NO_TRITON, ROOT, SYNTAX_ERROR


def tritongym(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritongym.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.mark.slow
def test_eval_with_server(server, tmp_path):
    solution = tmp_path / "candidate.py"
    solution.write_text(NO_TRITON)
    done = tritongym("eval", "--problem", str(BUILTIN / "01_scaled_add.py"), "--solution", str(solution),
                     "--device", "cpu", "--json", "--server", server.url)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "integrity_violation" and result["violations"][0]["code"] == "no_triton_kernel"
    bad = tritongym("eval", "--problem", str(BUILTIN / "01_scaled_add.py"), "--solution", str(solution),
                    "--device", "cpu", "--disable-check", "not_a_code", "--server", server.url)
    assert bad.returncode == 2 and "unknown disabled_checks" in bad.stderr


@pytest.mark.slow
def test_run_with_server(server, tmp_path):
    (tmp_path / "01_scaled_add.py").write_text(NO_TRITON)
    (tmp_path / "02_leaky_relu.py").write_text(SYNTAX_ERROR)
    done = tritongym("run", "--problems", "builtin", "--solutions", str(tmp_path), "--device", "cpu", "--json",
                     "--server", server.url)
    assert done.returncode == 0, done.stderr
    rows = {row["problem"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert rows["builtin/01_scaled_add"]["status"] == "integrity_violation"
    assert rows["builtin/02_leaky_relu"]["status"] == "compile_error"
    assert len(rows) == 2
    text = tritongym("run", "--problems", "builtin", "--solutions", str(tmp_path), "--device", "cpu",
                     "--server", server.url)
    assert text.returncode == 0 and f"2 evaluated on {server.url}" in text.stdout
