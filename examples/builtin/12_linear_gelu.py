"""Triton solution for builtin/12_linear_gelu: gelu(x @ W.T + b) as one GEMM kernel with a fused epilogue."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_gelu_kernel(x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K,
                        stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        x = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)
        # W is (N, K); read the (BLOCK_K, BLOCK_N) tile of W.T.
        w = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None] * stride_wk,
                    mask=(kk[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc += tl.dot(x, w, input_precision="ieee")
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
    v = acc + bias[None, :]
    y = 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476))
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, y, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        # Declared like the reference so that a shared seed gives the same weights; never called.
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.linear.weight
        bias = self.linear.bias
        K = x.shape[-1]
        x2 = x.reshape(-1, K)
        M = x2.shape[0]
        N = weight.shape[0]
        out = torch.empty(tuple(x.shape[:-1]) + (N,), device=x.device, dtype=x.dtype)
        out2 = out.view(M, N)
        block_m, block_n, block_k = 64, 64, 32
        grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
        _linear_gelu_kernel[grid](x2, weight, bias, out2, M, N, K,
                                  x2.stride(0), x2.stride(1), weight.stride(0), weight.stride(1),
                                  out2.stride(0), out2.stride(1),
                                  BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k)
        return out
