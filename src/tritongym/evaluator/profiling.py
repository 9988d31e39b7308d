"""GPU-time coverage of the candidate's own Triton kernels (Dr.Kernel's PR/PRS signal).

    coverage = Σ GPU time of kernels the candidate defined  ÷  Σ GPU time of every kernel,
               over the device activity of a few profiled forward calls

The candidate worker profiles forward calls on fresh inputs with `torch.profiler` and sends the
**kernel-level** device events only (each kernel launch is one event; memcpy and memset count as
device work too). The parent sums them. This fixes KernelGYM's proxy (kernelgym-drkernel.md
§3.1), which mixed operator-level events (whose device time already includes their kernels) with
kernel-level ones, added host CPU time to the denominator, counted the profiler's own self-test,
and matched names by substring in either direction (a Triton kernel named ``kernel`` matched
PyTorch's ``vectorized_elementwise_kernel``). Here a device kernel belongs to the candidate only
if its name is exactly the name of a ``@triton.jit`` function defined in the candidate's file and
launched in the profiled calls (optionally followed by a Triton specialisation suffix such as
``_0d1d2``); PyTorch's kernel names (``void at::native::...<...>``) can never match a Python
identifier.

Input generation and the L2 flush happen outside the profiled region, so harness work is not in
the denominator.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

_SPECIALISATION_SUFFIX = re.compile(r"_[0-9a-z]+")


@dataclass(frozen=True)
class KernelTime:
    """One device kernel (or memcpy/memset) name with its summed GPU time and launch count."""

    name: str
    device_us: float
    count: int


def is_candidate_kernel(device_name: str, candidate_names: Iterable[str]) -> bool:
    """True when `device_name` is one of the candidate's Triton kernels (exact, or + suffix)."""
    for name in candidate_names:
        if device_name == name:
            return True
        if device_name.startswith(name) and _SPECIALISATION_SUFFIX.fullmatch(device_name[len(name):]):
            return True
    return False


def coverage_from_kernels(kernels: Iterable[KernelTime], candidate_names: Iterable[str]) -> float | None:
    """Fraction of device time spent in the candidate's own kernels (None without device time)."""
    names = set(candidate_names)
    total = 0.0
    mine = 0.0
    for kernel in kernels:
        if kernel.device_us < 0:
            raise ValueError(f"negative device time for {kernel.name!r}")
        total += kernel.device_us
        if is_candidate_kernel(kernel.name, names):
            mine += kernel.device_us
    if total <= 0.0:
        return None
    return mine / total


def profile_forward(model: torch.nn.Module, make_inputs: Callable[[], list[Any]], calls: int) -> list[KernelTime]:
    """Device kernels of `calls` forward calls on fresh inputs (runs in the candidate worker, GPU only)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    inputs = [make_inputs() for _ in range(calls)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            for call_inputs in inputs:
                model(*call_inputs)
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type != DeviceType.CUDA:
            continue  # operator-level (CPU) events would count their kernels a second time
        entry = totals.setdefault(event.name, [0.0, 0])
        entry[0] += float(event.time_range.elapsed_us())
        entry[1] += 1
    return [KernelTime(name, us, int(count)) for name, (us, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])]
