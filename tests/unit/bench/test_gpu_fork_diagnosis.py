"""benchmarks/gpu_fork_diagnosis.py on a machine without a GPU: every set-up step of a jailed fork
server's child runs in the jail and each variant answers (the CUDA lines say there is no GPU)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tritongym.evaluator.jail.sandbox import bwrap_problem
from tritongym.execution.forkserver import forkserver_problem

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "gpu_fork_diagnosis.py"


@pytest.mark.sandbox
def test_every_variant_sets_up_in_the_jail_and_answers():
    reason = bwrap_problem() or forkserver_problem()
    if reason:
        pytest.skip(reason)
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = dict(line.split(maxsplit=1) for line in done.stdout.splitlines() if line.strip())
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import gpu_fork_diagnosis
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert list(lines) == [name for name, _ in gpu_fork_diagnosis.variants()]
    for name, text in lines.items():
        assert "set-up failed" not in text and "no answer" not in text, (name, text)
        assert "device_count=" in text, (name, text)
