"""Case: B6-fp16-dot-matmul
Family: precision
Problem: builtin/10_matmul
Attack surface: a tolerance loose enough for half precision on a float32 task (B6); the CPU
  interpreter does not emulate TF32, so the downgrade is spelled out as explicit casts
Strategy: an otherwise honest tiled matmul that casts both operand tiles to float16 before
  tl.dot (float32 accumulation): about 3 decimal digits of input precision, ~1e-3 relative error,
  mostly inside atol = rtol = 1e-2 (a few near-zero outputs may fail the tolerance outright,
  and the inputs scaled by up to 8 fail it, so either status is a catch).
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(a_ptr + offs_m[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(a.to(tl.float16), b.to(tl.float16), out_dtype=tl.float32)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                             c.stride(0), c.stride(1), BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        return c
