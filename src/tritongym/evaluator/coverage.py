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
from collections.abc import Iterable, Mapping

from tritongym.evaluator.common.profiles import KernelTime


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
