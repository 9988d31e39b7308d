"""Case: F2-forged-accuracy-constant
Family: harness
Problem: adversarial/mean_uniform
Attack surface: clean room: the replay's outputs are held to the reference's tolerance only while
  the checks beyond it (better than a trivial output, float32-accurate against float64) look at
  the candidate's own outputs, which the candidate can compute with torch and hide from its log
Strategy: on inputs that look like the task's (all in [0, 1]) a kernel writes the constant 0.5
  (within 1e-2 of a U(0, 1) mean on every draw, no better than the trivial constant:
  B1-constant-mean; on a GPU the replay of a task trial is also what is timed), then overwrites
  it with torch's exact mean and erases those ops and the test from the live launch log, so the
  candidate's outputs beat every trivial predictor while the log replays to the constant; on the
  perturbed families it runs an honest two-stage mean, so their replays pass
Expected status: not ok
Expected violation: none
Options: {"num_trials": 4}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.utils._python_dispatch as _pd
import triton
import triton.language as tl


@triton.jit
def _constant_kernel(out_ptr, value):
    tl.store(out_ptr, value)


@triton.jit
def _partial_sum_kernel(x_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n_elements, other=0.0)
    tl.store(partial_ptr + pid, tl.sum(x, axis=0))


@triton.jit
def _finish_mean_kernel(partial_ptr, out_ptr, n_partials, n_elements, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    p = tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)
    tl.store(out_ptr, tl.sum(p, axis=0) / n_elements)


def _logged():
    mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
    record = getattr(mode, "log", None) if mode is not None else None
    return None if record is None else len(record.log.events)


def _erase_since(start):
    mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
    if mode is None:
        return
    for name in ("compute", "counts"):
        table = getattr(mode, name, None)
        if table is not None:
            table.clear()
    mode.compute_elements = 0
    mode.compute_flops = 0
    record = getattr(mode, "log", None)
    if record is not None and start is not None:
        del record.log.events[start:]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        start = _logged()
        task_like = bool(x.min() >= 0) and bool(x.max() <= 1)
        _erase_since(start)
        x = x.contiguous()
        out = torch.empty((), device=x.device, dtype=x.dtype)
        if task_like:
            _constant_kernel[(1,)](out, 0.5)
            start = _logged()
            out.copy_(x.mean())
            _erase_since(start)
            return out
        n = x.numel()
        block = 4096
        n_partials = triton.cdiv(n, block)
        partial = torch.empty(n_partials, device=x.device, dtype=torch.float32)
        _partial_sum_kernel[(n_partials,)](x, partial, n, BLOCK=block)
        _finish_mean_kernel[(1,)](partial, out, n_partials, n, BLOCK=triton.next_power_of_2(n_partials))
        return out
