"""End-to-end: candidate text is data in readable output, and `run` never loses the rest of a batch.

Red-team finding 7: a candidate's error message with ANSI escapes could draw a fake "status: ok"
on the terminal, and a lone surrogate crashed the summary printer under a strict UTF-8 stdout.
Red-team finding 5 (the CLI half): one problem's exception stopped `tritongym run`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tritongym.evaluator.result import printable

from .helpers import CANDIDATES, PROBLEMS, TINY_RELU

HOSTILE = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr):
    pass


class ModelNew(nn.Module):
    def forward(self, x):
        raise RuntimeError("\\x1b[2J\\x1b[H\\x1b[32mstatus: ok   reward: 1.000\\x1b[0m\\r\\n lone \\ud800 surrogate")
'''


def run_strict(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8:strict"}
    return subprocess.run([sys.executable, "-m", "tritongym", *args], capture_output=True, timeout=timeout, env=env)


def test_printable_escapes_controls_and_surrogates_only():
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    assert printable("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert printable("a\rb\x00c\x7f") == "a\\rb\\x00c\\x7f"
    assert printable("x\ud800y") == "x\\ud800y"
    assert printable("line\nnext", keep_newlines=True) == "line\nnext"
    assert printable("line\nnext") == "line\\nnext"


def test_a_candidate_cannot_draw_on_the_terminal(tmp_path):
    solution = tmp_path / "hostile.py"
    solution.write_text(HOSTILE, encoding="utf-8", errors="surrogatepass")
    done = run_strict("eval", "--problem", str(TINY_RELU), "--solution", str(solution), "--device", "cpu",
                      "--trials", "1")
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    out = done.stdout.decode("utf-8")  # strict: the printer wrote valid UTF-8
    assert "\x1b" not in out and "\r" not in out
    assert "\\x1b[2J" in out and "\\ud800" in out
    assert out.splitlines()[0].startswith("status: runtime_error")


def test_run_goes_on_after_one_problems_exception(tmp_path):
    level = tmp_path / "problems" / "level1"
    level.mkdir(parents=True)
    shutil.copy(PROBLEMS / "broken_reference.py", level / "1_broken.py")
    shutil.copy(TINY_RELU, level / "2_relu.py")
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    shutil.copy(CANDIDATES / "relu_honest.py", solutions / "1_broken.py")
    shutil.copy(CANDIDATES / "relu_honest.py", solutions / "2_relu.py")
    done = run_strict("run", "--problems", str(tmp_path / "problems"), "--solutions", str(solutions),
                      "--device", "cpu", "--trials", "1")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    # The broken problem is stopped by the pre-flight (it cannot even be built to size it), with the
    # problem's own exception named; never a verdict against the candidate, and the run goes on.
    broken = [line for line in out.splitlines() if line.startswith("kernelbench/level1/1 ")]
    assert broken and "(refused)" in broken[0], out
    assert "this problem cannot make its inputs" in out
    assert any(line.startswith("kernelbench/level1/2") and " ok " in line for line in out.splitlines()), out
