"""End-to-end: a candidate that takes over its worker's channel never makes `evaluate()` raise.

Red-team finding 5: frames whose JSON nests thousands of levels, integers with thousands of
digits (after the candidate lifts Python's limit in its own process), fields of the wrong type and
absurd tensor shapes raised out of the parent. Each candidate below writes such a frame on the
channel itself (the descriptor number is in its argv) with the run-time policy in record-only
mode, so that only the channel's own defences stand between it and the parent. Every one must end
in a verdict without reward, and an honest evaluation right after must still be `ok`.
"""

from __future__ import annotations

import textwrap

import pytest

import tritongym
from tritongym import Status

from .helpers import TINY_RELU, candidate

TEMPLATE = '''
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

_FD = int(sys.argv[sys.argv.index("--fd") + 1])


@triton.jit
def _kernel(x_ptr):
    pass


def _send(header_bytes, blobs=b""):
    os.write(_FD, struct.pack(">I", len(header_bytes)) + header_bytes + blobs)


class ModelNew(nn.Module):
    def forward(self, x):
        {body}
        return torch.relu(x)
'''

BODIES = {
    "deep-json": '_send(b"[" * 200000 + b"]" * 200000)',
    "huge-integer": 'sys.set_int_max_str_digits(0); _send(json.dumps({"v": 1, "kind": "called", '
                    '"payload": 10 ** 20000, "blobs": []}).encode())',
    "refused-wrong-type": '_send(json.dumps({"v": 1, "kind": "error", "payload": {"refused": 5, "message": 7}, '
                          '"blobs": []}).encode())',
    "absurd-shape": '_send(json.dumps({"v": 1, "kind": "called", "payload": {"outputs": {"__tensor__": 0, '
                    '"dtype": "float32", "shape": [0, 2 ** 62]}}, "blobs": [0]}).encode())',
    "huge-blob-claim": '_send(json.dumps({"v": 1, "kind": "called", "payload": None, "blobs": [2 ** 60]}).encode())',
    "well-formed-untagged": '_send(json.dumps({"v": 1, "kind": "called", "payload": {"nonce": "x"}, '
                            '"blobs": []}).encode())',
}


@pytest.mark.parametrize("name", list(BODIES))
def test_frames_a_candidate_writes_itself_end_in_a_verdict(name):
    source = textwrap.dedent(TEMPLATE).replace("{body}", BODIES[name])
    result = tritongym.evaluate(TINY_RELU, source, device="cpu", num_trials=1, input_families=(), timeout=60,
                                disabled_checks=frozenset({"forbidden_construct"}))
    assert result.reward == 0
    assert result.status == Status.CRASHED, (result.status, result.error)


def test_an_honest_evaluation_after_them_is_ok():
    result = tritongym.evaluate(TINY_RELU, candidate("relu_honest"), device="cpu", num_trials=1, timeout=60)
    assert result.status == Status.OK, (result.status, result.error, result.violations)
