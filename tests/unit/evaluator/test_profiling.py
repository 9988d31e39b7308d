"""Coverage of the candidate's own kernels: device work only, exact compiled names, each counted once.

The fixtures rebuild what KernelGYM's proxy got wrong (kernelgym-drkernel.md §3.1) and the
spoofs issue 13 found (a GPU user annotation named like the candidate's kernel around a cuBLAS
call; a kernel named after a cuBLAS kernel), on synthetic profiler event lists.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from torch.autograd import DeviceType

from tritongym.evaluator.common.profiles import DeviceActivity, KernelTime, kernel_times
from tritongym.evaluator.coverage import coverage_from_kernels, is_candidate_kernel
from tritongym.evaluator.worker.profiling import activities_from_profile

CUBLAS = "ampere_sgemm_128x64_tn"


def kernel(name: str, us: float, kind: str | None = "kernel") -> DeviceActivity:
    return DeviceActivity(name=name, activity_type=kind, on_device=True, user_annotation=False, duration_us=us)


def test_coverage_is_candidate_time_over_all_kernel_time():
    kernels = [KernelTime("fused_gemm_kernel", 300.0, 3),
               KernelTime("void at::native::vectorized_elementwise_kernel<4>", 100.0, 3)]
    assert coverage_from_kernels(kernels, {"fused_gemm_kernel"}) == pytest.approx(0.75)


def test_memcpy_and_memset_count_as_device_work():
    activities = [kernel("add_kernel", 50.0), kernel("Memcpy DtoD (Device -> Device)", 50.0, "gpu_memcpy"),
                  kernel("Memset (Device)", 0.0, "gpu_memset")]
    assert coverage_from_kernels(kernel_times(activities), {"add_kernel"}) == pytest.approx(0.5)


def test_a_gpu_user_annotation_around_cublas_is_not_credited_to_the_candidate():
    # record_function("my_kernel") around torch.mm puts a gpu_user_annotation span named
    # "my_kernel" on the device timeline, covering cuBLAS's 90 µs. A filter on device_type alone
    # credited those 90 µs to the candidate (and counted them twice).
    spoof = [kernel("my_kernel", 10.0),
             DeviceActivity("my_kernel", "gpu_user_annotation", True, True, 90.0),
             kernel(CUBLAS, 90.0),
             DeviceActivity("aten::mm", "cpu_op", False, False, 95.0),
             DeviceActivity("cudaLaunchKernel", "cuda_runtime", False, False, 5.0)]
    times = kernel_times(spoof)
    assert {k.name: k.device_us for k in times} == {CUBLAS: 90.0, "my_kernel": 10.0}
    assert coverage_from_kernels(times, {"my_kernel"}) == pytest.approx(0.1)


def test_without_activity_types_the_user_annotation_flag_still_drops_the_span():
    # torch versions whose events carry no activity type: the is_user_annotation flag decides.
    spoof = [kernel("my_kernel", 10.0, None), DeviceActivity("my_kernel", None, True, True, 90.0),
             kernel(CUBLAS, 90.0, None)]
    assert coverage_from_kernels(kernel_times(spoof), {"my_kernel"}) == pytest.approx(0.1)


def test_names_match_exactly_with_no_suffix_rule():
    # The Triton 2.x suffix rule let a kernel named "ampere_sgemm_128x64" claim cuBLAS's
    # "ampere_sgemm_128x64_tn".
    assert not is_candidate_kernel(CUBLAS, {"ampere_sgemm_128x64"})
    assert not is_candidate_kernel("matmul_kernel_0d1d2d3", {"matmul_kernel"})
    assert is_candidate_kernel("matmul_kernel", {"matmul_kernel"})
    kernels = [KernelTime("ampere_sgemm_128x64", 10.0, 1), KernelTime(CUBLAS, 90.0, 1)]
    assert coverage_from_kernels(kernels, {"ampere_sgemm_128x64"}) == pytest.approx(0.1)


def test_a_kernel_named_after_cublas_claims_nothing_when_cublas_also_ran():
    # The candidate names its Triton kernel exactly like cuBLAS's and calls torch.mm too: the
    # profile shows the name twice, the launch hook saw one launch: the name is shared, so none
    # of its time is the candidate's.
    kernels = [KernelTime(CUBLAS, 100.0, 2), KernelTime("bias_kernel", 10.0, 1)]
    counts = {CUBLAS: 1, "bias_kernel": 1}
    assert coverage_from_kernels(kernels, {CUBLAS, "bias_kernel"}, counts) == pytest.approx(10.0 / 110.0)
    # Honest control: the same names with launch counts that match the profile are credited.
    assert coverage_from_kernels(kernels, {CUBLAS, "bias_kernel"}, {CUBLAS: 2, "bias_kernel": 1}) == 1.0


def test_substring_matching_does_not_attribute_pytorch_kernels():
    pytorch_add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    kernels = [KernelTime("kernel", 10.0, 1), KernelTime(pytorch_add, 90.0, 1)]
    assert coverage_from_kernels(kernels, {"kernel", "elementwise"}) == pytest.approx(0.1)


def test_only_kernel_level_events_are_summed_so_nothing_is_counted_twice():
    kernels = [KernelTime("implicit_gemm_conv_kernel", 80.0, 1), KernelTime("bias_relu_kernel", 20.0, 1)]
    assert coverage_from_kernels(kernels, {"bias_relu_kernel"}) == pytest.approx(0.2)


def test_all_candidate_work_is_full_coverage_and_no_device_time_is_unknown():
    assert coverage_from_kernels([KernelTime("a", 5.0, 1), KernelTime("b", 7.0, 2)], {"a", "b"}) == 1.0
    assert coverage_from_kernels([], {"a"}) is None
    assert coverage_from_kernels([KernelTime("a", 0.0, 1)], {"a"}) is None


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_negative_or_non_finite_device_time_is_rejected(bad):
    with pytest.raises(ValueError, match="negative or non-finite"):
        coverage_from_kernels([KernelTime("a", bad, 1)], {"a"})


class RawEvent:
    """The accessor shape of torch's `_KinetoEvent` (methods, durations in ns)."""

    def __init__(self, name, kind, device_type, user=False, ns=1000):
        self._name, self._kind, self._device, self._user, self._ns = name, kind, device_type, user, ns

    def name(self):
        return self._name

    def activity_type(self):
        return self._kind

    def device_type(self):
        return self._device

    def is_user_annotation(self):
        return self._user

    def duration_ns(self):
        return self._ns


def test_kineto_events_are_read_with_their_activity_types():
    raw = [RawEvent("k", "kernel", DeviceType.CUDA, ns=4000),
           RawEvent("k", "gpu_user_annotation", DeviceType.CUDA, user=True, ns=9000),
           RawEvent("aten::add", "cpu_op", DeviceType.CPU, ns=7000)]
    prof = SimpleNamespace(profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: raw)))
    assert kernel_times(activities_from_profile(prof)) == [KernelTime("k", 4.0, 1)]


def test_a_name_the_launch_counts_do_not_cover_is_matched_by_name_alone():
    kernels = [KernelTime("add_kernel", 10.0, 3), KernelTime(CUBLAS, 30.0, 1)]
    assert coverage_from_kernels(kernels, {"add_kernel"}, {"other_key": 1}) == pytest.approx(0.25)
