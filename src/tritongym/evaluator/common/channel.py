"""The wire format between the trusted parent and its workers (the one module both sides import).

A message is one frame on a private, inherited UNIX socket (never stdout/stderr)::

    u32 header length | header: UTF-8 JSON {"v", "kind", "payload", "blobs": [byte lengths]} | blobs

Values in `payload` are JSON with tagged extras: tensors (``{"__tensor__": i, "dtype", "shape"}``
referring to blob `i`, raw contiguous bytes), tuples, dicts with non-string keys are refused,
dtypes, and NaN/±Inf floats. **Nothing is ever unpickled**: a hostile worker can send at most
malformed JSON or wrong bytes, which `recv` turns into `ProtocolError`. Sizes are bounded on
receipt so a worker cannot make the parent allocate without limit.

**Authenticated frames.** A worker that runs candidate code must be assumed compromised: the
candidate can find the socket (its descriptor number is no secret) and write frames of its own.
The parent therefore gives the candidate worker a fresh key in a ``hello`` frame *before* any
candidate code is imported; from then on every frame the worker sends ends with an
HMAC-SHA256 over a sequence number, the header and the blobs, and the parent refuses any frame
whose tag does not verify (a `ProtocolError`: a ``crashed`` verdict, never ``ok``). The worker's
signing sender is built from C functions and closures captured at that moment (`_make_sender`):
rebinding a module global, a class attribute or ``json``'s internals later changes nothing on
the send path. What stays forgeable is named in docs/integrity.md ("Evidence").

Imports only the standard library and torch, so the workers start fast.
"""

from __future__ import annotations

import _hashlib
import _json
import hmac
import json
import math
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import torch

PROTOCOL_VERSION = 1
MAX_HEADER_BYTES = 8 << 20
#: Default bound of one message's blobs; the parent raises it per request where outputs are big.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20
#: Most bytes of external buffers (tensors of unknown origin) one forward's launch log may ship;
#: the parent raises a candidate's message bound by this much when it asks for launch logs.
MAX_EXTERNAL_BYTES = 64 << 20
#: Buffers up to this size are allocated at once; larger ones grow as bytes actually arrive, so a
#: worker that claims a huge blob and sends nothing makes the parent allocate nothing.
_PREALLOCATE_BYTES = 16 << 20
_LENGTH = struct.Struct(">I")
#: Bytes of the HMAC-SHA256 tag that ends every authenticated frame.
TAG_BYTES = 32
#: Bounds on a tensor's description in a frame (no real output comes near them).
MAX_TENSOR_DIMS = 32
MAX_TENSOR_DIM = 1 << 40

#: dtypes that may cross the channel, by wire name: every dtype whose elements are whole bytes with
#: one value each, so a tensor is its bytes and the comparison can read every element (unsigned
#: 16/32/64-bit integers are bitcast sort keys and hashes; the fnuz and e8m0 float8 formats are
#: ROCm's and MX scales). Left out, deliberately: quantized dtypes (their scale and zero point are
#: not in the bytes), packed sub-byte formats (``float4_e2m1fn_x2``, ``uint1``..``uint7``,
#: ``int1``..``int7``, ``bits*``: one byte is not one value), and ``complex32`` (experimental in
#: torch, most ops missing). Names torch lacks are skipped (``uint16``..``uint64`` are torch >= 2.3).
WIRE_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
        "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu",
    )
    if hasattr(torch, name)
}
_DTYPE_NAMES = {dtype: name for name, dtype in WIRE_DTYPES.items()}


class ChannelClosed(Exception):
    """The other side closed the socket (or died) before a whole message arrived."""


class ProtocolError(Exception):
    """A frame broke the wire format (bad JSON, unknown tag, sizes that do not add up)."""


@dataclass
class Message:
    """One received frame: its `kind`, decoded `payload`, and the wire size in bytes."""

    kind: str
    payload: Any = None
    nbytes: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _encode(value: Any, blobs: list[memoryview]) -> Any:
    if isinstance(value, torch.Tensor):
        tensor = torch.Tensor.detach(value)
        if tensor.dtype not in _DTYPE_NAMES:
            raise TypeError(f"cannot send a tensor of dtype {tensor.dtype}")
        tensor = torch.Tensor.contiguous(torch.Tensor.cpu(tensor))
        shape = list(tensor.shape)
        if tensor.numel() == 0:
            raw = memoryview(b"")
        else:
            raw = memoryview(torch.Tensor.numpy(tensor.reshape(-1).view(torch.uint8))).cast("B")
        blobs.append(raw)
        return {"__tensor__": len(blobs) - 1, "dtype": _DTYPE_NAMES[tensor.dtype], "shape": shape}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"__float__": repr(value)}
    if isinstance(value, torch.dtype):
        if value not in _DTYPE_NAMES:
            raise TypeError(f"cannot send dtype {value}")
        return {"__dtype__": _DTYPE_NAMES[value]}
    if isinstance(value, torch.Size):
        return {"__tuple__": [int(v) for v in value]}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, blobs) for v in value]}
    if isinstance(value, list):
        return [_encode(v, blobs) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("only dicts with string keys can be sent")
        if any(k.startswith("__") and k.endswith("__") for k in value):
            raise TypeError("dict keys of the form __name__ are reserved by the wire format")
        return {k: _encode(v, blobs) for k, v in value.items()}
    raise TypeError(f"cannot send a value of type {type(value).__name__}")


def _decode(value: Any, blobs: list[bytearray]) -> Any:
    if isinstance(value, list):
        return [_decode(v, blobs) for v in value]
    if not isinstance(value, dict):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        raise ProtocolError(f"unexpected JSON value of type {type(value).__name__}")
    if "__tensor__" in value:
        index, dtype_name, shape = value.get("__tensor__"), value.get("dtype"), value.get("shape")
        if not isinstance(index, int) or not 0 <= index < len(blobs):
            raise ProtocolError(f"tensor refers to blob {index!r} of {len(blobs)}")
        if dtype_name not in WIRE_DTYPES:
            raise ProtocolError(f"unknown tensor dtype {dtype_name!r}")
        if not isinstance(shape, list) or len(shape) > MAX_TENSOR_DIMS or not all(
                isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_TENSOR_DIM for s in shape):
            raise ProtocolError(f"bad tensor shape {str(shape)[:200]}")
        dtype = WIRE_DTYPES[dtype_name]
        numel = math.prod(shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        blob = blobs[index]
        if len(blob) != numel * itemsize:
            raise ProtocolError(f"tensor of shape {shape} {dtype_name} needs {numel * itemsize} bytes, got {len(blob)}")
        if numel == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(blob, dtype=torch.uint8).view(dtype).reshape(shape)
    if "__tuple__" in value:
        items = value["__tuple__"]
        if not isinstance(items, list):
            raise ProtocolError("__tuple__ must hold a list")
        return tuple(_decode(v, blobs) for v in items)
    if "__float__" in value:
        text = value["__float__"]
        if text not in ("nan", "inf", "-inf"):
            raise ProtocolError(f"bad special float {text!r}")
        return float(text)
    if "__dtype__" in value:
        name = value["__dtype__"]
        if name not in WIRE_DTYPES:
            raise ProtocolError(f"unknown dtype {name!r}")
        return WIRE_DTYPES[name]
    if any(k.startswith("__") and k.endswith("__") for k in value):
        raise ProtocolError(f"unknown tag in {sorted(value)}")
    return {k: _decode(v, blobs) for k, v in value.items()}


def _refuse_default(value: Any) -> Any:
    raise TypeError(f"cannot send a value of type {type(value).__name__}")


def _make_sender(sock: socket.socket, key: bytes) -> Any:
    """An authenticated ``send(kind, payload) -> int`` bound to `sock` and `key`.

    Called in the candidate worker before candidate code is imported. Every function and type
    the sender needs is captured here as a closure variable: C functions (`_json`'s encoder,
    `_hashlib`'s HMAC, the socket's ``sendall``) and the torch methods that turn a tensor into
    bytes, so later rebinding of module globals, builtins or class attributes does not reach the
    send path. The closure itself is reachable only through the channel object, which only the
    worker holds.
    """
    encode_json = _json.make_encoder(None, _refuse_default, _json.encode_basestring_ascii, None, ":", ",",
                                     False, False, False)
    hmac_new, sendall, pack_length, pack_seq = _hashlib.hmac_new, sock.sendall, _LENGTH.pack, struct.Struct(">Q").pack
    tensor_type, dtype_type, size_type = torch.Tensor, torch.dtype, torch.Size
    detach, contiguous = torch.Tensor.detach, torch.Tensor.contiguous
    to_cpu, to_numpy = torch.Tensor.cpu, torch.Tensor.numpy
    reshape, view, numel, uint8 = torch.Tensor.reshape, torch.Tensor.view, torch.Tensor.numel, torch.uint8
    dtype_names = dict(_DTYPE_NAMES)
    _isinstance, _list, _len, _str, _int, _float, _bool, _repr = isinstance, list, len, str, int, float, bool, repr
    _memoryview, _tuple, _dict, _type_error, _isfinite, _sum = memoryview, tuple, dict, TypeError, math.isfinite, sum
    _bytes = bytes
    counter = [0]

    def encode(value: Any, blobs: list) -> Any:
        if _isinstance(value, tensor_type):
            tensor = detach(value)
            if tensor.dtype not in dtype_names:
                raise _type_error(f"cannot send a tensor of dtype {tensor.dtype}")
            tensor = contiguous(to_cpu(tensor))
            shape = [_int(v) for v in tensor.shape]
            # A private copy: the tag and the bytes sent must be the same bytes even if candidate
            # code (a thread) still writes into the tensor's storage.
            raw = _memoryview(b"") if numel(tensor) == 0 else _memoryview(
                _bytes(_memoryview(to_numpy(view(reshape(tensor, -1), uint8))).cast("B")))
            blobs.append(raw)
            return {"__tensor__": _len(blobs) - 1, "dtype": dtype_names[tensor.dtype], "shape": shape}
        if value is None or _isinstance(value, (_bool, _int, _str)):
            return value
        if _isinstance(value, _float):
            return value if _isfinite(value) else {"__float__": _repr(value)}
        if _isinstance(value, dtype_type):
            if value not in dtype_names:
                raise _type_error(f"cannot send dtype {value}")
            return {"__dtype__": dtype_names[value]}
        if _isinstance(value, size_type):
            return {"__tuple__": [_int(v) for v in value]}
        if _isinstance(value, _tuple):
            return {"__tuple__": [encode(v, blobs) for v in value]}
        if _isinstance(value, _list):
            return [encode(v, blobs) for v in value]
        if _isinstance(value, _dict):
            out = {}
            for k, v in value.items():
                if not _isinstance(k, _str) or (k.startswith("__") and k.endswith("__")):
                    raise _type_error("only dicts with plain string keys can be sent")
                out[k] = encode(v, blobs)
            return out
        raise _type_error(f"cannot send a value of type {type(value).__name__}")

    def send(kind: str, payload: Any = None) -> int:
        blobs: list = []
        encoded = encode(payload, blobs)
        sizes = [blob.nbytes for blob in blobs]
        header = "".join(encode_json({"v": PROTOCOL_VERSION, "kind": _str(kind), "payload": encoded,
                                      "blobs": sizes}, 0)).encode("utf-8")
        tag = hmac_new(key, digestmod="sha256")
        tag.update(pack_seq(counter[0]))
        tag.update(header)
        for blob in blobs:
            tag.update(blob)
        counter[0] += 1
        sendall(pack_length(_len(header)) + header)
        for blob in blobs:
            if blob.nbytes:
                sendall(blob)
        sendall(tag.digest())
        return _LENGTH.size + _len(header) + _sum(sizes) + TAG_BYTES

    return send


class Channel:
    """A framed, bounded, pickle-free message channel over a connected socket.

    Args:
        sock: a connected stream socket (one end of `socket.socketpair()`).
        max_message_bytes: frames larger than this are refused with `ProtocolError`.
    """

    def __init__(self, sock: socket.socket, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
                 verify_key: bytes | None = None) -> None:
        self.sock = sock
        self.max_message_bytes = max_message_bytes
        # Parent side: frames must carry a valid tag under this key, in sequence.
        self._verify_key = verify_key
        self._received = 0
        # Worker side: set by `enable_signing` before candidate code runs.
        self._signed_send: Any = None

    def enable_signing(self, key: bytes) -> None:
        """From now on every frame this end sends is authenticated with `key` (worker side)."""
        if len(key) < 16:
            raise ValueError("the channel key must be at least 16 bytes")
        self._signed_send = _make_sender(self.sock, bytes(key))

    @classmethod
    def from_fd(cls, fd: int, **kwargs: Any) -> Channel:
        """Wrap an inherited socket file descriptor (the worker side)."""
        return cls(socket.socket(fileno=fd), **kwargs)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, kind: str, payload: Any = None) -> int:
        """Send one message; returns the number of bytes written."""
        if self._signed_send is not None:
            return self._signed_send(kind, payload)
        blobs: list[memoryview] = []
        encoded = _encode(payload, blobs)
        header = json.dumps(
            {"v": PROTOCOL_VERSION, "kind": kind, "payload": encoded, "blobs": [b.nbytes for b in blobs]},
            allow_nan=False,
        ).encode("utf-8")
        self.sock.sendall(_LENGTH.pack(len(header)) + header)
        for blob in blobs:
            if blob.nbytes:
                self.sock.sendall(blob)
        return _LENGTH.size + len(header) + sum(b.nbytes for b in blobs)

    def _recv_exact(self, n: int, deadline: float | None) -> bytearray:
        if n > _PREALLOCATE_BYTES:
            return self._recv_growing(n, deadline)
        buffer = bytearray(n)
        view = memoryview(buffer)
        received = 0
        while received < n:
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError("timed out waiting for the worker")
                self.sock.settimeout(remaining)
            else:
                self.sock.settimeout(None)
            try:
                count = self.sock.recv_into(view[received:], min(n - received, 1 << 24))
            except TimeoutError as exc:
                raise TimeoutError("timed out waiting for the worker") from exc
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise ChannelClosed(str(exc)) from exc
            if count == 0:
                raise ChannelClosed(f"connection closed after {received} of {n} bytes")
            received += count
        return buffer

    def _recv_growing(self, n: int, deadline: float | None) -> bytearray:
        """Receive `n` bytes into a buffer that grows only as they arrive."""
        buffer = bytearray()
        while len(buffer) < n:
            chunk = self._recv_exact(min(n - len(buffer), _PREALLOCATE_BYTES), deadline)
            buffer += chunk
        return buffer

    def recv(self, timeout: float | None = None) -> Message:
        """Receive one message, waiting at most `timeout` seconds (None: forever).

        Raises:
            TimeoutError: nothing complete arrived in time.
            ChannelClosed: the other side went away.
            ProtocolError: the frame broke the format or the size bounds.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        (header_length,) = _LENGTH.unpack(self._recv_exact(_LENGTH.size, deadline))
        if header_length > MAX_HEADER_BYTES:
            raise ProtocolError(f"header of {header_length} bytes exceeds {MAX_HEADER_BYTES}")
        raw_header = self._recv_exact(header_length, deadline)
        try:
            header = json.loads(raw_header.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError, MemoryError) as exc:
            # ValueError covers malformed JSON and integers beyond Python's digit limit;
            # RecursionError deeply nested arrays.
            raise ProtocolError(f"header is not JSON: {type(exc).__name__}: {str(exc)[:200]}") from None
        if not isinstance(header, dict) or header.get("v") != PROTOCOL_VERSION:
            raise ProtocolError(f"not a protocol-{PROTOCOL_VERSION} header")
        kind, blob_sizes = header.get("kind"), header.get("blobs")
        if not isinstance(kind, str) or not isinstance(blob_sizes, list) or len(blob_sizes) > 100_000:
            raise ProtocolError("header lacks kind or blobs")
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in blob_sizes):
            raise ProtocolError("blob sizes must be non-negative integers")
        total = sum(blob_sizes)
        if total > self.max_message_bytes:
            raise ProtocolError(f"a {kind!r} message of {total} bytes exceeds the limit of "
                                f"{self.max_message_bytes} for this request")
        blobs = [self._recv_exact(size, deadline) if size else bytearray() for size in blob_sizes]
        if self._verify_key is not None:
            tag = bytes(self._recv_exact(TAG_BYTES, deadline))
            expected = hmac.new(self._verify_key, digestmod="sha256")
            expected.update(struct.pack(">Q", self._received))
            expected.update(raw_header)
            for blob in blobs:
                expected.update(blob)
            if not hmac.compare_digest(tag, expected.digest()):
                raise ProtocolError(f"frame {self._received} ({kind[:40]!r}) does not carry the worker's tag: it was "
                                    "not written by the harness")
            self._received += 1
        try:
            payload = _decode(header.get("payload"), blobs)
        except (RecursionError, ValueError, TypeError, OverflowError, RuntimeError, MemoryError) as exc:
            raise ProtocolError(f"undecodable payload: {type(exc).__name__}: {str(exc)[:200]}") from None
        return Message(kind=kind, payload=payload, nbytes=_LENGTH.size + header_length + total)
