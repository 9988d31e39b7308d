"""softmax(gelu(x)) written the way Inductor (and GPU MODE's KernelBook rows) write Triton:
triton_helpers' max2 and maximum, the libdevice and tl_math aliases, and the grid helper from
triton_heuristics (which torch >= 2.9 no longer has: the worker provides it)."""

import torch  # noqa: I001 - the imports exactly as Inductor writes them
import torch.nn as nn
import triton
import triton.language as tl
from torch._inductor.runtime import triton_helpers
from torch._inductor.runtime.triton_helpers import libdevice, math as tl_math
from torch._inductor.runtime.triton_heuristics import grid


@triton.jit
def triton_per_fused_gelu_softmax_0(in_ptr0, out_ptr2, xnumel, rnumel, XBLOCK: tl.constexpr):
    RBLOCK: tl.constexpr = 64
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    rindex = tl.arange(0, RBLOCK)[None, :]
    x0 = xindex
    r1 = rindex
    tmp0 = tl.load(in_ptr0 + (r1 + 64 * x0), xmask, other=0.0)
    tmp1 = 0.5
    tmp2 = tmp0 * tmp1
    tmp3 = 0.7071067811865476
    tmp4 = tmp0 * tmp3
    tmp5 = libdevice.erf(tmp4)
    tmp6 = 1.0
    tmp7 = tmp5 + tmp6
    tmp8 = tmp2 * tmp7
    tmp9 = tl.broadcast_to(tmp8, [XBLOCK, RBLOCK])
    tmp11 = tl.where(xmask, tmp9, float("-inf"))
    tmp12 = triton_helpers.max2(tmp11, 1)[:, None]
    tmp13 = triton_helpers.maximum(tmp12, tl.full([1, 1], -1e30, tl.float32))
    tmp14 = tmp8 - tmp13
    tmp15 = tl_math.exp(tmp14)
    tmp16 = tl.broadcast_to(tmp15, [XBLOCK, RBLOCK])
    tmp18 = tl.where(xmask, tmp16, 0)
    tmp19 = tl.sum(tmp18, 1)[:, None]
    tmp20 = tmp15 / tmp19
    tl.store(out_ptr2 + (r1 + 64 * x0), tmp20, xmask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        buf2 = torch.empty_like(x)
        xnumel = x.shape[0]
        triton_per_fused_gelu_softmax_0[grid(xnumel)](x, buf2, xnumel, 64, XBLOCK=4)
        return buf2
