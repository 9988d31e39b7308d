"""relu(x) + 1 as a KernelBook row carries an Inductor kernel: the runtime modules imported as
namespaces (``triton_heuristics.grid``), dynamo's ``rand_strided`` for the row's sample inputs, and
the guards module's ``assert_size_stride`` / ``empty_strided_cpu`` aliases."""

import torch  # noqa: I001 - the imports as the generated code writes them
from torch._inductor.select_algorithm import extern_kernels  # noqa: F401
import triton
import triton.language as tl
from torch._inductor.runtime import triton_heuristics
from torch._inductor.runtime import triton_helpers
from torch._dynamo.testing import rand_strided
import torch.nn as nn

assert_size_stride = torch._C._dynamo.guards.assert_size_stride
empty_strided_cpu = torch._C._dynamo.guards._empty_strided_cpu


@triton.jit
def triton_poi_fused_add_relu_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + x0, xmask)
    tmp1 = tl.full([1], 0, tl.int32)
    tmp2 = triton_helpers.maximum(tmp1, tmp0)
    tmp3 = 1.0
    tmp4 = tmp2 + tmp3
    tl.store(out_ptr0 + x0, tmp4, xmask)


def call(args):
    arg0_1, = args
    args.clear()
    assert_size_stride(arg0_1, (8, 125), (125, 1))
    buf0 = empty_strided_cpu((8, 125), (125, 1), torch.float32)
    triton_poi_fused_add_relu_0[triton_heuristics.grid(1000)](arg0_1, buf0, 1000, XBLOCK=256)
    del arg0_1
    return buf0,


def sample_inputs():
    """The row's benchmark inputs, as the generated module's own harness makes them."""
    return [rand_strided((8, 125), (125, 1), device="cpu", dtype=torch.float32)]


class ModelNew(nn.Module):
    def forward(self, input_0):
        output = call([input_0.contiguous()])
        return output[0]
