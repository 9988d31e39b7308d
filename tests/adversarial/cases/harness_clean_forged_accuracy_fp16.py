"""Case: F2-forged-accuracy-fp16
Family: harness
Problem: builtin/10_matmul
Attack surface: clean room: the replay's outputs are held to the reference's tolerance only while
  the precision check (float32-accurate against a float64 evaluation) looks at the candidate's own
  outputs, which the candidate can compute with torch and hide from its log
Strategy: B6-fp16-operand-matmul's kernel (A tiles rounded to float16, ~1.5e-4 relative error,
  inside 1e-2 on every family); its output is then overwritten with torch's float32 product and
  those ops are erased from the live launch log, so the candidate's outputs are float32-accurate
  while the log replays to the float16 kernel's
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import torch
import torch.nn as nn
import torch.utils._python_dispatch as _pd
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
        acc += tl.dot(a.to(tl.float16).to(tl.float32), b, input_precision="ieee")
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc, mask=mask)


def _logged():
    mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
    record = getattr(mode, "log", None) if mode is not None else None
    return None if record is None else len(record.log.events)


def _erase_since(start):
    mode = getattr(_pd, "_get_current_" + "dispatch_mode")()
    if mode is None:
        return
    for name in ("compute", "counts"):
        table = getattr(mode, name, None)
        if table is not None:
            table.clear()
    mode.compute_elements = 0
    mode.compute_flops = 0
    record = getattr(mode, "log", None)
    if record is not None and start is not None:
        del record.log.events[start:]


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
        start = _logged()
        c.copy_(a @ b)
        _erase_since(start)
        return c
