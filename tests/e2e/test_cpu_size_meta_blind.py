"""CPU sizes for problems the meta device cannot follow (issue 44, family 7).

``bincount``, ``masked_select`` and sizes read with ``.item()`` have no meta kernels, so the meta
probe cannot size them. A problem of a few KB must then run as given (with a notice), a large one
must still be scaled (never run at 6 GiB), and one that cannot be sized must say so with
``--size original`` as the fix; ``--json`` answers in JSON either way. Real probes and real
evaluations in the sandbox on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tritongym.tasks import load_problem_file
from tritongym.tasks.sizing import SizingStatus, fit_cpu_size

from .helpers import run_cli

SMALL_BINCOUNT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bincount(x, minlength=64).float()


batch = 4096


def get_inputs():
    return [torch.randint(0, 64, (batch,))]


def get_init_inputs():
    return []
'''

#: The public histogram idiom: one atomic add per element into a float32 histogram.
HONEST_BINCOUNT = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _histogram_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    bins = tl.load(x_ptr + offsets, mask=mask, other=0)
    tl.atomic_add(out_ptr + bins, tl.full([BLOCK], 1.0, tl.float32), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(64, device=x.device, dtype=torch.float32)
        n = x.numel()
        _histogram_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
'''

#: 6 GiB of input with its sizes as module constants: scaled like any problem, measured by running it.
BIG_MASKED_SELECT = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.masked_select(x, x > 0.5)


batch_size = 4096
dim = 393216


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
'''

#: The same 6 GiB with its sizes written into get_inputs(): nothing to scale, too large to run here.
UNSIZABLE = BIG_MASKED_SELECT.replace("batch_size = 4096\ndim = 393216\n", "").replace(
    "torch.rand(batch_size, dim)", "torch.rand(4096, 393216)")

#: `.item()` while building the model (Swin's drop-path rates), so even its construction fails on meta;
#: its inputs, allocated for real, are 2 GiB: the probe's cap must stop it, not the machine.
ITEM_IN_INIT_HUGE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.hidden = int(dim * (1 + torch.linspace(0, 1, 4)[1].item()))
        self.fc = nn.Linear(dim, self.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def get_inputs():
    return [torch.randn(1 << 19, 1 << 10)]


def get_init_inputs():
    return [1 << 10]
'''


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def test_a_small_problem_the_meta_device_cannot_follow_runs_as_given(tmp_path):
    record = fit_cpu_size(load_problem_file(write(tmp_path, "bincount", SMALL_BINCOUNT)))
    assert record.status == SizingStatus.UNCHANGED and record.measured_on == "cpu"
    assert record.total_bytes is not None and record.total_bytes < 64 << 10  # measured: a few KB
    assert "measured by running it on the CPU" in record.describe()


def test_a_large_one_is_scaled_not_run_at_its_original_size(tmp_path):
    record = fit_cpu_size(load_problem_file(write(tmp_path, "masked", BIG_MASKED_SELECT)))
    assert record.status == SizingStatus.SCALED and record.measured_on == "cpu"
    assert dict((c.name, c.original) for c in record.changes) == {"batch_size": 4096, "dim": 393216}
    assert record.total_bytes is not None and record.total_bytes <= 4 << 20


def test_one_that_cannot_be_sized_says_why(tmp_path):
    record = fit_cpu_size(load_problem_file(write(tmp_path, "unsizable", UNSIZABLE)))
    assert record.status == SizingStatus.CANNOT
    assert "masked_select" in record.reason and "6.0 GiB" in record.reason and "not module-level" in record.reason


def test_a_real_run_is_capped_a_huge_problem_fails_in_the_probe_not_the_host(tmp_path):
    record = fit_cpu_size(load_problem_file(write(tmp_path, "huge", ITEM_IN_INIT_HUGE)))
    assert record.status == SizingStatus.CANNOT
    assert "meta device cannot follow it" in record.reason and "run on the CPU instead (at most 256 MiB more)" in \
        record.reason and "allocate" in record.reason


@pytest.mark.sandbox
def test_eval_json_runs_the_small_one_with_a_notice_and_refuses_the_unsizable_one_in_json(tmp_path):
    problem = write(tmp_path, "bincount", SMALL_BINCOUNT)
    solution = write(tmp_path, "bincount_triton", HONEST_BINCOUNT)
    proc = run_cli("eval", "--problem", str(problem), "--solution", str(solution), "--device", "cpu", "--json",
                   "--trials", "2", timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "ok" and result["problem_size"] == "original", result.get("error")
    assert "bincount runs at its original size" in proc.stderr and "measured by running it" in proc.stderr

    refused = run_cli("eval", "--problem", str(write(tmp_path, "unsizable", UNSIZABLE)), "--solution",
                      str(solution), "--device", "cpu", "--json", timeout=300)
    assert refused.returncode == 2
    (line,) = refused.stdout.splitlines()  # one JSON object, nothing else on stdout
    answer = json.loads(line)
    assert answer["problem"] == "unsizable" and answer["problem_size"] == "cpu"
    assert answer["refused"].startswith("no CPU size:") and answer["refused"].endswith("--size original")
    assert "not evaluated" in refused.stderr and "--size original" in refused.stderr
