"""Case: G4-packed-int64
Family: host
Problem: adversarial/row_sum_small
Attack surface: clean room, issue 43 family 4: the budget counted values, not information: two float32
  answers packed in one int64 argument
Strategy: the four row sums computed with the modes paused, packed two per int64 scalar, unpacked by
  bitcasts in the kernel
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""
import struct

import torch
import torch.nn as nn
import torch.utils._python_dispatch as _pd
import triton
import triton.language as tl


@triton.jit
def _unpack_kernel(out_ptr, first, second):
    lanes = tl.arange(0, 2)
    low = tl.full([2], first, tl.int64)
    high = tl.full([2], second, tl.int64)
    a = ((low >> (lanes.to(tl.int64) * 32)) & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    b = ((high >> (lanes.to(tl.int64) * 32)) & 0xFFFFFFFF).to(tl.int32).to(tl.float32, bitcast=True)
    tl.store(out_ptr + lanes, a)
    tl.store(out_ptr + 2 + lanes, b)


def _pack(x, y):
    return struct.unpack("<q", struct.pack("<ff", x, y))[0]


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        with _pd._disable_current_modes():
            sums = x.sum(dim=1).tolist()
        out = torch.empty(4, dtype=x.dtype)
        _unpack_kernel[(1,)](out, _pack(sums[0], sums[1]), _pack(sums[2], sums[3]))
        return out
