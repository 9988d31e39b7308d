"""The precision check's floor follows the reference's own output dtype (issue 44, family 9).

A reference that ends in ``.to(torch.bfloat16)`` rounds its output once; its float64 evaluation
rounds to the same bf16 values, so its own error is 0 and the old floor (1e-5) refused an honest
kernel that rounds twice (Hugging Face's RMSNorm order) as ``precision_downgrade`` with a hint to
keep float32. Outputs narrower than float32 are now judged with that format's epsilon as the floor;
computing in a coarser format than the output's, or in bf16 for a float32 output, stays refused.
"""

from __future__ import annotations

import torch

from tritongym.evaluator import trivial
from tritongym.evaluator.result import ViolationCode


def rmsnorm_case():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 1024, generator=generator).bfloat16().double()
    weight = 1 + 0.1 * torch.randn(1024, generator=generator, dtype=torch.float64)
    normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    truth = (normed * weight).to(torch.bfloat16)
    expected = (normed.float() * weight.float()).to(torch.bfloat16)
    return normed, weight, truth, expected


def test_rounding_twice_in_a_bf16_task_is_not_a_downgrade():
    normed, weight, truth, expected = rmsnorm_case()
    twice = (normed.float().bfloat16().float() * weight.float()).bfloat16()
    assert trivial.relative_l2([expected.double()], [truth.double()]) == 0.0  # the reference rounds as its truth
    error = trivial.relative_l2([twice.double()], [truth.double()])
    assert 1e-3 < error < torch.finfo(torch.bfloat16).eps, error  # 32 * 0 + 1e-5 refused it
    assert trivial.check_precision(expected, twice, truth, 32.0, 1e-5) is None


def test_float8_inside_a_bf16_task_is_still_a_downgrade_with_a_hint_about_the_one_rounding():
    normed, weight, truth, expected = rmsnorm_case()
    via_fp8 = (normed.float().to(torch.float8_e4m3fn).float() * weight.float()).bfloat16()
    violation = trivial.check_precision(expected, via_fp8, truth, 32.0, 1e-5,
                                        source="y = x.to(tl.float8e4nv).to(tl.float32) * w")
    assert violation is not None and violation.code == ViolationCode.PRECISION_DOWNGRADE
    assert "bfloat16 rounding allows" in violation.message
    assert "round" in violation.message and "keep the task's float32" not in violation.message


def test_bf16_inside_a_float32_task_is_still_a_downgrade_with_the_float32_hint():
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(128, 256, generator=generator), torch.randn(256, 64, generator=generator)
    truth = a.double() @ b.double()
    in_bf16 = (a.bfloat16().float() @ b.bfloat16().float())
    violation = trivial.check_precision(a @ b, in_bf16, truth, 32.0, 1e-5, source="acc = tl.dot(a.to(tl.bfloat16), b)")
    assert violation is not None and "keep the task's float32" in violation.message


def test_a_float32_output_beside_a_bf16_one_keeps_the_float32_floor():
    """The bf16 output's floor does not loosen its float32 sibling: each is judged in its own group."""
    normed, weight, truth, expected = rmsnorm_case()
    generator = torch.Generator().manual_seed(2)
    wide_truth = torch.randn(4096, generator=generator, dtype=torch.float64)
    wide_expected = wide_truth.float()
    wide_bf16 = wide_truth.bfloat16().float()  # a downgrade of the float32 output
    assert trivial.check_precision((expected, wide_expected), (expected, wide_expected), (truth, wide_truth),
                                   32.0, 1e-5) is None
    violation = trivial.check_precision((expected, wide_expected), (expected, wide_bf16), (truth, wide_truth),
                                        32.0, 1e-5)
    assert violation is not None and "float32 reference" in violation.message
