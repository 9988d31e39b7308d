"""Coverage of the candidate's own kernels: exact attribution, each kernel counted once.

The fixtures rebuild what KernelGYM's proxy got wrong (kernelgym-drkernel.md §3.1) and check
that `coverage_from_kernels` does not repeat it.
"""

from __future__ import annotations

import pytest

from tritongym.evaluator.profiling import KernelTime, coverage_from_kernels, is_candidate_kernel


def test_coverage_is_candidate_time_over_all_kernel_time():
    kernels = [KernelTime("fused_gemm_kernel", 300.0, 3),
               KernelTime("void at::native::vectorized_elementwise_kernel<4>", 100.0, 3)]
    assert coverage_from_kernels(kernels, {"fused_gemm_kernel"}) == pytest.approx(0.75)


def test_memcpy_and_memset_count_as_device_work():
    kernels = [KernelTime("add_kernel", 50.0, 1), KernelTime("Memcpy DtoD (Device -> Device)", 50.0, 1),
               KernelTime("Memset (Device)", 0.0, 1)]
    assert coverage_from_kernels(kernels, {"add_kernel"}) == pytest.approx(0.5)


def test_substring_matching_does_not_attribute_pytorch_kernels():
    # KernelGYM matched names by substring in either direction: a Triton kernel named "kernel"
    # or "elementwise" claimed PyTorch's elementwise kernels and pushed coverage towards 1.
    pytorch_add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"
    kernels = [KernelTime("kernel", 10.0, 1), KernelTime(pytorch_add, 90.0, 1)]
    assert coverage_from_kernels(kernels, {"kernel", "elementwise"}) == pytest.approx(0.1)
    assert not is_candidate_kernel("void at::native::vectorized_elementwise_kernel<4>", {"elementwise"})


def test_specialisation_suffix_is_the_same_kernel_but_a_longer_name_is_not():
    assert is_candidate_kernel("matmul_kernel", {"matmul_kernel"})
    assert is_candidate_kernel("matmul_kernel_0d1d2d3", {"matmul_kernel"})
    assert not is_candidate_kernel("matmul_kernel_v2_impl", {"matmul"})
    assert not is_candidate_kernel("ampere_sgemm_128x64_nn", {"matmul_kernel"})


def test_only_kernel_level_events_are_summed_so_nothing_is_counted_twice():
    # KernelGYM summed operator-level events (aten::conv2d carries the time of its kernels) and
    # kernel-level events together, and added host CPU time to the denominator. The profiler side
    # here sends kernel events only: one conv kernel of 80 µs and a candidate kernel of 20 µs
    # give 0.2, where KernelGYM's denominator would have been 80 (op) + 80 (kernel) + 20 + CPU time.
    kernels = [KernelTime("implicit_gemm_conv_kernel", 80.0, 1), KernelTime("bias_relu_kernel", 20.0, 1)]
    assert coverage_from_kernels(kernels, {"bias_relu_kernel"}) == pytest.approx(0.2)


def test_all_candidate_work_is_full_coverage_and_no_device_time_is_unknown():
    assert coverage_from_kernels([KernelTime("a", 5.0, 1), KernelTime("b", 7.0, 2)], {"a", "b"}) == 1.0
    assert coverage_from_kernels([], {"a"}) is None
    assert coverage_from_kernels([KernelTime("a", 0.0, 1)], {"a"}) is None


def test_negative_device_time_is_rejected():
    with pytest.raises(ValueError, match="negative"):
        coverage_from_kernels([KernelTime("a", -1.0, 1)], {"a"})
