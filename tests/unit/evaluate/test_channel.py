"""Tests for tritongym.evaluator.common.channel: round trips of every value type and dtype over a real
socket pair, and every malformed frame a hostile worker could send turning into `ProtocolError`."""

from __future__ import annotations

import json
import math
import socket
import struct
import threading
import time
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tritongym.evaluator.common.channel import (
    MAX_HEADER_BYTES,
    PROTOCOL_VERSION,
    WIRE_DTYPES,
    Channel,
    ChannelClosed,
    ProtocolError,
)


@pytest.fixture
def pair():
    """Two connected channels over a real `socket.socketpair()`."""
    left, right = socket.socketpair()
    a, b = Channel(left), Channel(right)
    yield a, b
    a.close()
    b.close()


def roundtrip(pair, kind: str, payload: Any):
    """Send on one end from a thread (large frames exceed the socket buffer) and receive on the other."""
    sender, receiver = pair
    sent: list[int] = []
    errors: list[BaseException] = []

    def send():
        try:
            sent.append(sender.send(kind, payload))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            errors.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    try:
        message = receiver.recv(timeout=30)
    finally:
        thread.join(timeout=30)
    if errors:
        raise errors[0]
    assert message.kind == kind
    assert message.nbytes == sent[0]
    return message.payload


def same(a: Any, b: Any) -> bool:
    """Structural equality with bitwise tensor comparison and NaN == NaN."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or type(b) is not torch.Tensor:
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.numel() == 0:
            return True
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    if isinstance(a, float):
        return isinstance(b, float) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def make_tensor(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 10).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(max(info.min, -1000), min(info.max, 1000), shape, generator=generator).to(dtype)


# -- scalar and container values -------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**70,
        "",
        "héllo ✓",
        0.0,
        -0.0,
        1.5,
        -1e-300,
        1e308,
        float("nan"),
        float("inf"),
        float("-inf"),
        [],
        (),
        {},
        [1, [2, [3]]],
        (1, (2.5, "x")),
        {"a": {"b": [None, (True,)]}},
    ],
    ids=repr,
)
def test_plain_values_round_trip(pair, value):
    assert same(value, roundtrip(pair, "v", value))


def test_special_floats_are_tagged_not_bare_json(pair):
    """NaN/±Inf travel as tags, so the header is strict JSON (json.dumps(allow_nan=False))."""
    received = roundtrip(pair, "v", [float("nan"), float("inf"), float("-inf")])
    assert math.isnan(received[0]) and received[1] == math.inf and received[2] == -math.inf


@pytest.mark.parametrize("name", sorted(WIRE_DTYPES))
def test_dtype_values_round_trip(pair, name):
    assert roundtrip(pair, "v", WIRE_DTYPES[name]) is WIRE_DTYPES[name]


def test_torch_size_arrives_as_a_tuple(pair):
    assert roundtrip(pair, "v", torch.Size([2, 0, 5])) == (2, 0, 5)


def test_wire_dtypes_cover_the_common_precisions():
    assert {
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "int8",
        "int32",
        "int64",
        "uint8",
        "bool",
        "complex64",
    } <= set(WIRE_DTYPES)


# -- tensors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 0, 3), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("name", sorted(WIRE_DTYPES))
def test_tensor_round_trip_every_dtype_and_shape(pair, name, shape):
    tensor = make_tensor(WIRE_DTYPES[name], shape, seed=len(shape))
    received = roundtrip(pair, "t", {"x": tensor})["x"]
    assert same(tensor, received)


def test_float_tensor_specials_and_nan_payload_survive_bitwise(pair):
    tensor = torch.tensor([0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4e38])
    tensor.view(torch.int32)[2] = 0x7FC0_1234  # a NaN with a payload
    assert same(tensor, roundtrip(pair, "t", tensor))


def test_non_contiguous_and_offset_views_send_only_their_elements(pair):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    transposed = base.t()
    sliced = base[1:3, ::2]
    expanded = torch.tensor([1.0, 2.0]).expand(3, 2)
    received = roundtrip(pair, "t", [transposed, sliced, expanded])
    for original, got in zip([transposed, sliced, expanded], received, strict=True):
        assert got.is_contiguous()
        assert torch.equal(got, original)
        assert got.untyped_storage().nbytes() == original.numel() * original.element_size()


def test_received_tensors_are_independent_writable_copies(pair):
    tensor = torch.ones(4)
    received = roundtrip(pair, "t", tensor)
    received.add_(1)
    assert torch.equal(tensor, torch.ones(4))
    assert torch.equal(received, torch.full((4,), 2.0))


def test_tensors_with_autograd_and_subclasses_arrive_plain(pair):
    class Sub(torch.Tensor):
        pass

    weight = torch.randn(3, requires_grad=True)
    received = roundtrip(pair, "t", [weight, torch.zeros(2).as_subclass(Sub)])
    assert all(type(t) is torch.Tensor and not t.requires_grad for t in received)
    assert torch.equal(received[0], weight.detach())


def test_large_tensor_over_the_chunk_size(pair):
    tensor = torch.randn(5_000_000)  # 20 MB: more than one 16 MB receive chunk
    assert torch.equal(roundtrip(pair, "big", tensor), tensor)


def tensors() -> st.SearchStrategy[torch.Tensor]:
    shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
    return st.builds(
        make_tensor, st.sampled_from(sorted(WIRE_DTYPES.values(), key=str)), shapes, st.integers(0, 2**31)
    )


def wire_values() -> st.SearchStrategy[Any]:
    keys = st.text(min_size=0, max_size=6).filter(lambda k: not (k.startswith("__") and k.endswith("__")))
    leaves = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=8)
        | tensors()
        | st.sampled_from(list(WIRE_DTYPES.values()))
    )
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=4)
            | st.lists(children, max_size=4).map(tuple)
            | st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=12,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=wire_values())
def test_nested_structures_round_trip(pair, value):
    received = roundtrip(pair, "nested", value)
    if isinstance(value, torch.dtype):
        assert received is value
    else:
        assert same(value, received), (value, received)


# -- what cannot be sent ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (object(), "cannot send a value of type object"),
        ({1: "x"}, "only dicts with string keys"),
        ({"__tensor__": 0}, "reserved by the wire format"),
        ({"ok": {"__float__": "nan"}}, "reserved by the wire format"),
        ({1, 2}, "cannot send a value of type set"),
        (b"bytes", "cannot send a value of type bytes"),
    ],
    ids=["object", "int-key", "tensor-tag", "nested-tag", "set", "bytes"],
)
def test_unsendable_values_raise_type_error_before_writing(pair, payload, message):
    sender, receiver = pair
    with pytest.raises(TypeError, match=message):
        sender.send("bad", payload)
    sender.send("after", 1)  # nothing half-written: the next frame is intact
    assert receiver.recv(timeout=5).kind == "after"


@pytest.mark.parametrize("name", ["complex32", "quint8", "qint8", "float4_e2m1fn_x2", "uint4", "bits8"])
def test_unsupported_tensor_dtype_is_refused(pair, name):
    """Quantized (scale not in the bytes), packed sub-byte and experimental dtypes stay off the wire."""
    unsupported = getattr(torch, name, None)
    if unsupported is None:
        pytest.skip(f"this torch has no {name}")
    with pytest.raises(TypeError, match="cannot send"):
        pair[0].send("bad", torch.zeros(8, dtype=torch.uint8).view(unsupported))


# -- malformed frames ------------------------------------------------------------------------------


def raw_frame(header: bytes | dict, *blobs: bytes) -> bytes:
    if isinstance(header, dict):
        header = json.dumps(header).encode()
    return struct.pack(">I", len(header)) + header + b"".join(blobs)


def header(payload: Any = None, blobs: list[int] | None = None, **extra: Any) -> dict:
    return {"v": PROTOCOL_VERSION, "kind": "called", "payload": payload, "blobs": blobs or [], **extra}


def receive_raw(data: bytes, *, max_message_bytes: int | None = None, close: bool = True):
    left, right = socket.socketpair()
    try:
        kwargs = {} if max_message_bytes is None else {"max_message_bytes": max_message_bytes}
        channel = Channel(left, **kwargs)
        right.sendall(data)
        if close:
            right.close()
        return channel.recv(timeout=5)
    finally:
        left.close()
        right.close()


def tensor_ref(index: Any = 0, dtype: Any = "float32", shape: Any = (4,)) -> dict:
    return {"__tensor__": index, "dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape}


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (raw_frame(b"{not json"), "header is not JSON"),
        (raw_frame(b"\xff\xfe\xfd"), "header is not JSON"),
        (raw_frame(b"[1, 2]"), "not a protocol-1 header"),
        (raw_frame(header(v=2)), "not a protocol-1 header"),
        (raw_frame({"v": 1, "payload": None, "blobs": []}), "header lacks kind or blobs"),
        (raw_frame({"v": 1, "kind": 5, "payload": None, "blobs": []}), "header lacks kind or blobs"),
        (raw_frame(header(blobs=None) | {"blobs": "16"}), "header lacks kind or blobs"),
        (raw_frame(header(blobs=[-1])), "blob sizes must be non-negative integers"),
        (raw_frame(header(blobs=[1.5])), "blob sizes must be non-negative integers"),
        (raw_frame(header({"__evil__": 1})), "unknown tag"),
        (raw_frame(header({"x": {"__pickle__": "gASV"}})), "unknown tag"),
        (raw_frame(header({"__float__": "1e999"})), "bad special float"),
        (raw_frame(header({"__dtype__": "float128"})), "unknown dtype"),
        (raw_frame(header({"__tuple__": "abc"})), "__tuple__ must hold a list"),
        (raw_frame(header(tensor_ref(), [8]), b"\0" * 8), r"needs 16 bytes, got 8"),
        (raw_frame(header(tensor_ref(shape=(2, 2)), [20]), b"\0" * 20), r"needs 16 bytes, got 20"),
        (raw_frame(header(tensor_ref(index=1), [16]), b"\0" * 16), "tensor refers to blob 1 of 1"),
        (raw_frame(header(tensor_ref(index=0))), "tensor refers to blob 0 of 0"),
        (raw_frame(header(tensor_ref(index=-1), [16]), b"\0" * 16), "tensor refers to blob -1"),
        (raw_frame(header(tensor_ref(index="0"), [16]), b"\0" * 16), "tensor refers to blob '0'"),
        (raw_frame(header(tensor_ref(dtype="object"), [16]), b"\0" * 16), "unknown tensor dtype 'object'"),
        (raw_frame(header(tensor_ref(shape=(-4,)), [16]), b"\0" * 16), "bad tensor shape"),
        (raw_frame(header(tensor_ref(shape="4"), [16]), b"\0" * 16), "bad tensor shape"),
        (raw_frame(header(tensor_ref(shape=[2.0, 2]), [16]), b"\0" * 16), "bad tensor shape"),
    ],
    ids=[
        "bad-json",
        "not-utf8",
        "header-not-object",
        "wrong-version",
        "no-kind",
        "kind-not-str",
        "blobs-not-list",
        "negative-blob",
        "float-blob",
        "unknown-tag",
        "nested-unknown-tag",
        "bad-special-float",
        "unknown-dtype-tag",
        "tuple-not-list",
        "blob-too-small",
        "blob-too-large",
        "missing-blob",
        "no-blobs-at-all",
        "negative-blob-index",
        "string-blob-index",
        "bad-tensor-dtype",
        "negative-dim",
        "shape-not-list",
        "float-dim",
    ],
)
def test_malformed_frames_raise_protocol_error(frame, match):
    with pytest.raises(ProtocolError, match=match):
        receive_raw(frame)


def test_oversize_header_is_refused_before_it_is_read():
    length = struct.pack(">I", MAX_HEADER_BYTES + 1)
    started = time.monotonic()
    with pytest.raises(ProtocolError, match=f"header of {MAX_HEADER_BYTES + 1} bytes exceeds"):
        receive_raw(length, close=False)  # the header never comes: refusing must not wait for it
    assert time.monotonic() - started < 2


def test_oversize_message_is_refused_before_its_blobs_are_read():
    frame = raw_frame(header(tensor_ref(shape=(64,)), [256]))  # declares 256 bytes, sends none
    with pytest.raises(ProtocolError, match="message of 256 bytes exceeds the limit of 100"):
        receive_raw(frame, max_message_bytes=100, close=False)
    split = raw_frame(header(None, [60, 60]))
    with pytest.raises(ProtocolError, match="message of 120 bytes exceeds the limit of 100"):
        receive_raw(split, max_message_bytes=100, close=False)


def test_message_at_the_limit_is_accepted():
    frame = raw_frame(header(tensor_ref(shape=(25,)), [100]), b"\0" * 100)
    assert torch.equal(receive_raw(frame, max_message_bytes=100).payload, torch.zeros(25))


def test_truncated_frame_is_channel_closed():
    frame = raw_frame(header(tensor_ref(), [16]), b"\0" * 8)
    with pytest.raises(ChannelClosed, match="connection closed after 8 of 16 bytes"):
        receive_raw(frame)
    with pytest.raises(ChannelClosed, match="after 0 of 4 bytes"):
        receive_raw(b"")
    with pytest.raises(ChannelClosed, match="after 2 of 4 bytes"):
        receive_raw(b"\0\0")


def test_silence_is_a_timeout_within_the_deadline(pair):
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        pair[1].recv(timeout=0.3)
    assert 0.25 < time.monotonic() - started < 2


def test_a_slow_partial_frame_still_times_out(pair):
    """The deadline covers the whole frame: trickling bytes cannot extend it."""
    sender, receiver = pair
    frame = raw_frame(header(None, [64]), b"\0" * 10)

    def trickle():
        for index in range(len(frame)):
            try:
                sender.sock.sendall(frame[index : index + 1])
            except OSError:
                return
            time.sleep(0.02)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        receiver.recv(timeout=0.5)
    assert time.monotonic() - started < 2
    sender.close()
    thread.join(timeout=10)


def test_frames_arrive_in_order_and_are_delimited(pair):
    sender, receiver = pair
    for index in range(5):
        sender.send(f"m{index}", {"i": index, "t": torch.full((index,), float(index))})
    for index in range(5):
        message = receiver.recv(timeout=5)
        assert message.kind == f"m{index}"
        assert message.payload["i"] == index
        assert torch.equal(message.payload["t"], torch.full((index,), float(index)))


def test_from_fd_wraps_an_inherited_descriptor():
    left, right = socket.socketpair()
    channel = Channel.from_fd(right.detach())
    try:
        Channel(left).send("hello", {"n": 1})
        assert channel.recv(timeout=5).payload == {"n": 1}
    finally:
        channel.close()
        left.close()
    channel.close()  # closing twice is harmless


def test_a_worker_takes_inputs_larger_than_the_default_bound_from_its_parent():
    # A GPU run: an 8192 x 8192 float32 input (256 MiB) crashed the candidate worker at its first
    # trial, because the worker's end kept the 64 MiB bound meant for frames *from* a worker.
    from tritongym.evaluator.common.channel import DEFAULT_MAX_MESSAGE_BYTES
    from tritongym.evaluator.worker.startup import open_channel

    left, right = socket.socketpair()
    worker = open_channel(right.detach())
    inputs = torch.arange((DEFAULT_MAX_MESSAGE_BYTES >> 2) + 1024, dtype=torch.float32)
    try:
        payload = roundtrip((Channel(left), worker), "call", {"inputs": [inputs]})
        assert torch.equal(payload["inputs"][0], inputs)
        # The parent's end keeps its bound on frames from a worker (test_oversize_message_...).
        assert Channel(left).max_message_bytes == DEFAULT_MAX_MESSAGE_BYTES
    finally:
        worker.close()
        left.close()


# -- frames a compromised worker writes itself (red-team findings 2 and 5) ------------------------


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "header is not JSON: RecursionError"),
        (b'{"v": 1, "kind": "x", "payload": ' + b"9" * 5000 + b', "blobs": []}', "header is not JSON: ValueError"),
    ],
    ids=["nested-100k-deep", "5000-digit-integer"],
)
def test_headers_that_would_make_the_parent_raise_are_protocol_errors(raw, match):
    with pytest.raises(ProtocolError, match=match):
        receive_raw(raw_frame(raw))


@pytest.mark.parametrize("shape", [[0, 1 << 50], list(range(1, 40)), [True, 4], [2, -1]],
                         ids=["absurd-dimension", "too-many-dimensions", "bool-dimension", "negative"])
def test_absurd_tensor_shapes_are_protocol_errors(shape):
    with pytest.raises(ProtocolError, match="bad tensor shape"):
        receive_raw(raw_frame(header(tensor_ref(shape=shape), [0])))


def test_a_deeply_nested_payload_is_a_protocol_error():
    payload: Any = [1]
    text = json.dumps(payload)
    text = '{"v": 1, "kind": "called", "blobs": [], "payload": ' + "[" * 5000 + text + "]" * 5000 + "}"
    with pytest.raises(ProtocolError):
        receive_raw(raw_frame(text.encode()))


@pytest.fixture
def signed_pair():
    """A worker end that signs (as the candidate worker does) and a parent end that verifies."""
    left, right = socket.socketpair()
    key = bytes(range(32))
    worker, parent = Channel(left), Channel(right, verify_key=key)
    worker.enable_signing(key)
    yield worker, parent, right, left
    worker.close()
    parent.close()


def test_signed_frames_round_trip_in_sequence(signed_pair):
    worker, parent, _, _ = signed_pair
    for index in range(3):
        worker.send("called", {"n": index, "t": torch.arange(4.0) + index, "nan": math.nan, "tuple": (1, 2)})
        message = parent.recv(timeout=5)
        assert message.payload["n"] == index
        assert torch.equal(message.payload["t"], torch.arange(4.0) + index)
        assert math.isnan(message.payload["nan"]) and message.payload["tuple"] == (1, 2)


def test_a_frame_the_worker_did_not_sign_is_refused(signed_pair):
    _, parent, _, worker_socket = signed_pair
    # A candidate that found the socket writes a well-formed frame (with a guessed tag).
    worker_socket.sendall(raw_frame(header({"nonce": "0" * 16})) + b"\0" * 32)
    with pytest.raises(ProtocolError, match="does not carry the worker's tag"):
        parent.recv(timeout=5)


def test_a_replayed_frame_is_refused(signed_pair):
    worker, parent, _, worker_socket = signed_pair
    captured: list[bytes] = []
    original = worker_socket.sendall
    # Capture the bytes of the first signed frame as they leave, then replay them.
    first = socket.socketpair()
    spy, sink = first
    replay_channel = Channel(spy)
    replay_channel.enable_signing(bytes(range(32)))
    replay_channel.send("called", {"n": 0})
    spy.close()
    data = b""
    while chunk := sink.recv(65536):
        data += chunk
    sink.close()
    captured.append(data)
    worker.send("called", {"n": 0})
    assert parent.recv(timeout=5).payload == {"n": 0}
    original(captured[0])  # the same bytes again: sequence number 0 a second time
    with pytest.raises(ProtocolError, match="tag"):
        parent.recv(timeout=5)


def test_the_signing_key_must_be_long_enough():
    left, right = socket.socketpair()
    with pytest.raises(ValueError, match="16 bytes"):
        Channel(left).enable_signing(b"short")
    left.close()
    right.close()


def test_the_signed_send_path_ignores_later_rebinding_of_json(signed_pair, monkeypatch):
    """The sender's encoder was captured at enable_signing: patching json afterwards changes nothing."""
    import json.encoder

    worker, parent, _, _ = signed_pair
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    monkeypatch.setattr(json, "dumps", lambda *a, **k: '{"forged": true}')
    worker.send("called", {"evidence": {"tampered": ["x"]}})
    assert parent.recv(timeout=5).payload == {"evidence": {"tampered": ["x"]}}
