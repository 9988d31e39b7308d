"""GPU-time coverage of the candidate's own Triton kernels (Dr.Kernel's PR/PRS signal).

    coverage = Σ GPU time of kernels the candidate launched  ÷  Σ GPU time of all device work,
               over the device activity of a few profiled forward calls

The candidate worker profiles forward calls on fresh inputs with `torch.profiler` and sends one
entry per device activity name (summed time, count). Only three kinds of activity are device
work (`DEVICE_WORK`): kernels, memcpy and memset. Everything else on the GPU timeline is
dropped, in particular **GPU user annotations**: ``torch.profiler.record_function("my_kernel")``
around a cuBLAS call puts a ``gpu_user_annotation`` span named ``my_kernel`` on the device
timeline, which a filter on ``device_type == CUDA`` alone would credit to the candidate (and
count twice). Where torch reports no activity type (older versions) the user-annotation flag is
used instead.

Attribution is by **exact compiled name**: a device kernel is the candidate's only if its name
equals the compiled name of a kernel the launch hook saw the candidate launch in the profiled
calls (`CompiledKernel.name`; in Triton 3.x the ``@triton.jit`` function's name). There is no
suffix or substring rule: a kernel named ``ampere_sgemm_128x64`` does not claim cuBLAS's
``ampere_sgemm_128x64_tn``. A name that the profile shows **more often than the hook saw it
launched** is shared with someone else's kernel (a candidate that names its kernel after a
cuBLAS kernel, then calls cuBLAS): none of that name's time is credited to the candidate.

This also fixes KernelGYM's proxy (kernelgym-drkernel.md §3.1), which mixed operator-level
events with kernel-level ones, added host CPU time to the denominator, counted the profiler's
own self-test, and matched names by substring in either direction. Input generation and the L2
flush happen outside the profiled region, so harness work is not in the denominator.

The contract with the candidate worker's ``profiled`` reply: ``kernels`` is ``[[name, device_us,
count], ...]``; ``candidate_compiled_kernels`` the compiled names of the candidate's launches
(exact); ``candidate_launch_counts`` (optional) ``{compiled name: launches}`` seen by the hook in
the profiled calls, keyed like ``candidate_compiled_kernels`` (a name without a count is matched
by name alone); ``candidate_kernels`` the Python names, used only when no compiled name was
reported (exact match as well).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

#: Kineto activity types that are device work (kineto's ActivityType names).
DEVICE_WORK = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "concurrent_kernel"})


@dataclass(frozen=True)
class KernelTime:
    """One device kernel (or memcpy/memset) name with its summed GPU time and launch count."""

    name: str
    device_us: float
    count: int


@dataclass(frozen=True)
class DeviceActivity:
    """One activity on the device timeline, as the profiler reports it."""

    name: str
    activity_type: str | None  # kineto's type ("kernel", "gpu_memcpy", ...), None where torch omits it
    on_device: bool  # device_type is CUDA
    user_annotation: bool
    duration_us: float


def is_device_work(activity: DeviceActivity) -> bool:
    """Kernels, memcpy and memset only (never annotations, runtime calls or CPU ops)."""
    if not activity.on_device or activity.user_annotation:
        return False
    if activity.activity_type:
        return activity.activity_type in DEVICE_WORK
    return True


def kernel_times(activities: Iterable[DeviceActivity]) -> list[KernelTime]:
    """Device work summed per name, longest first."""
    totals: dict[str, list[float]] = {}
    for activity in activities:
        if not is_device_work(activity):
            continue
        entry = totals.setdefault(activity.name, [0.0, 0])
        entry[0] += activity.duration_us
        entry[1] += 1
    return [KernelTime(name, us, int(count)) for name, (us, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])]


def is_candidate_kernel(device_name: str, candidate_names: Iterable[str],
                        launch_counts: Mapping[str, int] | None = None, profiled_count: int | None = None) -> bool:
    """True when `device_name` is exactly one of the candidate's compiled kernel names and no other
    kernel shares it (profiled at most as often as the hook saw it launched, when counts are known)."""
    if device_name not in set(candidate_names):
        return False
    if launch_counts is not None and profiled_count is not None and device_name in launch_counts:
        return profiled_count <= int(launch_counts[device_name])
    return True  # no count for this name: the hook counted other keys; exact name match only


def coverage_from_kernels(kernels: Iterable[KernelTime], candidate_names: Iterable[str],
                          launch_counts: Mapping[str, int] | None = None) -> float | None:
    """Fraction of device time spent in the candidate's own kernels (None without device time)."""
    names = set(candidate_names)
    total = 0.0
    mine = 0.0
    for kernel in kernels:
        if not math.isfinite(kernel.device_us) or kernel.device_us < 0:
            raise ValueError(f"negative or non-finite device time for {kernel.name!r}")
        total += kernel.device_us
        if is_candidate_kernel(kernel.name, names, launch_counts, kernel.count):
            mine += kernel.device_us
    if total <= 0.0:
        return None
    return mine / total


def activities_from_profile(prof: Any) -> list[DeviceActivity]:
    """The device-timeline activities of a finished ``torch.profiler.profile``.

    Reads kineto's raw events (one per activity, with its type) where torch exposes them, else
    the function events (torch without ``kineto_results``).
    """
    from torch.autograd import DeviceType

    raw = getattr(getattr(prof, "profiler", None), "kineto_results", None)
    activities = []
    if raw is not None:
        for event in raw.events():
            activity_type = getattr(event, "activity_type", None)
            user = getattr(event, "is_user_annotation", None)
            activities.append(DeviceActivity(
                name=str(event.name()),
                activity_type=str(activity_type()) if callable(activity_type) else None,
                on_device=event.device_type() == DeviceType.CUDA,
                user_annotation=bool(user()) if callable(user) else False,
                duration_us=event.duration_ns() / 1e3,
            ))
        return activities
    for event in prof.events():
        activities.append(DeviceActivity(
            name=str(event.name), activity_type=getattr(event, "activity_type", None),
            on_device=event.device_type == DeviceType.CUDA,
            user_annotation=bool(getattr(event, "is_user_annotation", False)),
            duration_us=float(event.time_range.elapsed_us()),
        ))
    return activities


def profile_forward(model: torch.nn.Module, make_inputs: Callable[[], list[Any]], calls: int) -> list[KernelTime]:
    """Device work of `calls` forward calls on fresh inputs (runs in the candidate worker, GPU only)."""
    from torch.profiler import ProfilerActivity, profile

    inputs = [make_inputs() for _ in range(calls)]
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with torch.no_grad():
            for call_inputs in inputs:
                model(*call_inputs)
        torch.cuda.synchronize()
    return kernel_times(activities_from_profile(prof))
