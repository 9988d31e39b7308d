"""The records a profile reply carries: device activities and per-kernel times.

The candidate worker (`worker.profiling`) turns `torch.profiler`'s device timeline into
`KernelTime`s; the parent (`coverage`) decides from them how much of the device time was the
candidate's own. Pure data and arithmetic, shared by both sides.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

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
