"""Profile a few forward calls on the device (runs in the candidate worker, GPU only).

Reads `torch.profiler`'s device timeline into `common.profiles` records; the parent's
`coverage` module decides from them (the formula and the attribution rules are there).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from tritongym.evaluator.common.profiles import DeviceActivity, KernelTime, kernel_times


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
