"""Unsigned 16/32/64-bit and the other whole-byte float8 tensors on the channel (issue 44, family 6).

A kernel that sorts by bitcast keys (``x.view(torch.uint32)``) or hashes into uint64 returns
tensors that must cross the channel bit for bit: before these dtypes were on the wire a correct
replay read as ``evidence_mismatch``. Every bit pattern a 16-bit type has, and the patterns of the
wider types that an int64 round trip would corrupt (the high bit set, all ones), arrive unchanged.
"""

from __future__ import annotations

import socket
import threading

import pytest
import torch

from tritongym.evaluator.common.channel import WIRE_DTYPES, Channel

NEW_DTYPES = ("uint16", "uint32", "uint64", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")


def send_and_receive(payload):
    left, right = socket.socketpair()
    sender, receiver = Channel(left), Channel(right)
    thread = threading.Thread(target=sender.send, args=("t", payload))
    try:
        thread.start()
        message = receiver.recv(timeout=30)
    finally:
        thread.join(timeout=30)
        sender.close()
        receiver.close()
    return message.payload


def bits(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("name", NEW_DTYPES)
def test_the_dtype_is_on_the_wire_where_torch_has_it(name):
    if not hasattr(torch, name):
        pytest.skip(f"this torch has no {name}")
    assert WIRE_DTYPES[name] is getattr(torch, name)


def test_every_16_bit_pattern_round_trips_as_uint16():
    keys = torch.arange(1 << 16, dtype=torch.int32).to(torch.uint16)
    received = send_and_receive({"keys": keys})["keys"]
    assert received.dtype == torch.uint16 and received.shape == keys.shape
    assert bits(received) == bits(keys)


@pytest.mark.parametrize(("name", "width"), [("uint32", 32), ("uint64", 64)])
def test_wide_unsigned_patterns_round_trip(name, width):
    """All ones, the high bit alone, and float bit patterns reinterpreted as keys (the sort idiom)."""
    dtype = getattr(torch, name)
    signed = torch.int32 if width == 32 else torch.int64
    floats = torch.tensor([0.0, -0.0, 1.5, -1.5, float("inf"), float("-inf"), float("nan"), 3.4e38, -1e-45],
                          dtype=torch.float32 if width == 32 else torch.float64)
    patterns = torch.cat([torch.tensor([-1, 0, 1, -(1 << (width - 1)), (1 << (width - 1)) - 1], dtype=signed),
                          floats.view(signed), torch.randint(-(1 << 31), 1 << 31, (4096,), dtype=signed)])
    keys = patterns.view(dtype)
    received = send_and_receive([keys, keys[::3].reshape(-1, 1)])
    assert [r.dtype for r in received] == [dtype, dtype]
    assert bits(received[0]) == bits(keys)
    assert bits(received[1]) == bits(keys[::3])
    # The values, not only the bytes: the maximum stays 2**width - 1 (an int64 detour would go negative).
    assert int(received[0][0].item()) == (1 << width) - 1


@pytest.mark.parametrize("name", ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"])
def test_every_byte_pattern_of_the_other_float8_formats_round_trips(name):
    if not hasattr(torch, name):
        pytest.skip(f"this torch has no {name}")
    values = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(getattr(torch, name))
    received = send_and_receive(values)
    assert received.dtype == values.dtype and bits(received) == bits(values)


def test_dtype_objects_of_the_new_types_round_trip():
    dtypes = [WIRE_DTYPES[name] for name in NEW_DTYPES if name in WIRE_DTYPES]
    assert send_and_receive(dtypes) == dtypes
