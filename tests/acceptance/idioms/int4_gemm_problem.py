"""Weight-only int4 GEMM (GPTQ-style layout): y = x @ ((q - zeros) * scales), fp16.

`qweight` packs eight 4-bit values per int32 along K; `scales` and `zeros` are per group of G rows
of K and per output column. The quantisation tensors are what a real layer holds: positive scales
around 1e-2 and zero points in the middle of the 4-bit range.
"""

import torch
import torch.nn as nn

M, K, N, G = 8, 256, 64, 64


class Model(nn.Module):
    def forward(self, x, qweight, scales, zeros):
        shifts = torch.arange(8, dtype=torch.int32, device=x.device) * 4
        q = (qweight.unsqueeze(1) >> shifts.view(1, 8, 1)) & 0xF
        q = q.reshape(K, N).to(x.dtype)
        group = torch.arange(K, device=x.device) // G
        w = (q - zeros[group]) * scales[group]
        return x @ w


def get_inputs():
    x = torch.randn(M, K, dtype=torch.float16)
    qweight = torch.randint(-2**31, 2**31 - 1, (K // 8, N), dtype=torch.int32)
    scales = (torch.rand(K // G, N) * 0.02 + 0.005).to(torch.float16)
    zeros = torch.randint(6, 10, (K // G, N)).to(torch.float16)
    return [x, qweight, scales, zeros]


def get_init_inputs():
    return []
