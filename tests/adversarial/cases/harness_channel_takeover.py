"""Case: E1-channel-takeover
Family: harness
Problem: builtin/02_leaky_relu
Attack surface: the worker-to-parent channel: its descriptor number is in argv, and raw writes are
  not audited (red-team finding 2)
Strategy: the forward computes F.leaky_relu, then writes a well-formed 'called' frame with clean
  evidence on the channel itself (the nonce read from the request it steals first), answering for
  the harness
Expected status: not ok
Expected violation: none
Options: {}
Device: cpu
"""

import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton

_FD = int(sys.argv[sys.argv.index("--fd") + 1])
_WRITE = getattr(os, "wri" + "te")


@triton.jit
def _unused_kernel(x_ptr):
    pass


def _frame(kind, payload, blobs):
    header = json.dumps({"v": 1, "kind": kind, "payload": payload, "blobs": [len(b) for b in blobs]}).encode()
    return struct.pack(">I", len(header)) + header + b"".join(blobs)


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.leaky_relu(x, self.negative_slope).contiguous()
        evidence = {"launches": [{"kernel": "_unused_kernel", "candidate": True, "grid": "(1,)"}],
                    "compute_ops": [], "compute_work": [0, 0], "outputs": [{"plain": True, "from_kernel": True,
                                                                              "aliases": None}],
                    "mutated_inputs": [], "threads_before": 1, "threads_after": 1, "tampered": [], "refused": []}
        blob = out.numpy().tobytes()
        payload = {"nonce": "0" * 16, "evidence": evidence,
                   "outputs": {"__tensor__": 0, "dtype": "float32", "shape": list(out.shape)}}
        _WRITE(_FD, _frame("called", payload, [blob]))
        return out
