"""Helpers shared by the reference and the candidate worker processes.

Imports only the standard library and torch. Runs inside the workers, never in the parent.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import traceback
from types import ModuleType
from typing import Any

import torch

from tritongym.evaluator.common.channel import Channel

#: Longest error text a worker sends back (the parent trims again).
MAX_ERROR_CHARS = 4000


def parse_worker_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--fd", type=int, required=True, help="inherited socket file descriptor")
    parser.add_argument("--source", required=True, help="path of the module to load")
    parser.add_argument("--device", required=True, choices=("cpu", "cuda"))
    parser.add_argument("--problem", help="path of the problem module (candidate worker: timing inputs)")
    parser.add_argument("--allow-forbidden", action="store_true",
                        help="candidate worker: record forbidden operations without refusing them")
    return parser.parse_args()


def load_module(path: str, name: str) -> ModuleType:
    """Import a module from a real file (``@triton.jit`` reads its source through `inspect`)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def exception_chain(exc: BaseException, limit: int = 64) -> list[BaseException]:
    """The exception and its causes, innermost last (``raise ... from ...`` and implicit context).

    Triton's interpreter re-raises a kernel's error as ``InterpreterError(repr(e)) from e``, so
    what a launch really raised is found down this chain.
    """
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < limit:
        chain.append(current)
        current = current.__cause__ or current.__context__
    return chain


def interpreter_limit(exc: BaseException) -> str | None:
    """The CPU interpreter's own "not supported in interpreter mode", anywhere in the chain."""
    for error in exception_chain(exc):
        if "not supported in interpreter mode" in str(error):
            return str(error)[:300]
    return None


def format_error(exc: BaseException, keep_file: str | None = None, label: str = "candidate") -> str:
    """``Type: message`` plus the traceback frames that belong to `keep_file` only.

    Candidates get feedback about their own lines, not about torch's or tritongym's internals.
    Frames of the causes are included too: the Triton interpreter re-raises an error inside a
    kernel from the launch line, with the kernel's own line in the cause.
    """
    frames = [frame for link in reversed(exception_chain(exc, limit=8))
              for frame in traceback.extract_tb(link.__traceback__)]
    if keep_file is not None:
        real = os.path.realpath(keep_file)
        frames = [f for f in frames if os.path.realpath(f.filename) == real]
        unique = []
        for frame in frames:
            if not unique or (frame.lineno, frame.name) != (unique[-1].lineno, unique[-1].name):
                unique.append(frame)
        frames = unique
    lines = []
    for frame in frames[-8:]:
        lines.append(f'  File "{os.path.basename(frame.filename)}", line {frame.lineno}, in {frame.name}')
        if frame.line:
            lines.append(f"    {frame.line.strip()}")
    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    text = (f"Traceback ({label} frames only):\n" + "\n".join(lines) + "\n" if lines else "") + message
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS // 2] + "\n…\n" + text[-MAX_ERROR_CHARS // 2 :]
    return text


def to_device(value: Any, device: torch.device, copy: bool = False) -> Any:
    """Move every tensor of a nested list/tuple/dict structure to `device`.

    With ``copy=True`` every tensor is a fresh copy even when it is already on `device`.
    """
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=copy)
    if isinstance(value, list):
        return [to_device(v, device, copy) for v in value]
    if isinstance(value, tuple):
        return tuple(to_device(v, device, copy) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device, copy) for k, v in value.items()}
    return value


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor of a nested structure, depth first."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def split_init_inputs(init_inputs: Any) -> tuple[list[Any], dict[str, Any]]:
    """Constructor ``(args, kwargs)`` from ``get_init_inputs()``.

    KernelBench returns a list of positional arguments; KernelGYM also accepts
    ``[[args...], {kwargs}]``, which is honoured here.
    """
    if isinstance(init_inputs, (list, tuple)) and len(init_inputs) == 2 \
            and isinstance(init_inputs[0], (list, tuple)) and isinstance(init_inputs[1], dict):
        return list(init_inputs[0]), dict(init_inputs[1])
    if isinstance(init_inputs, (list, tuple)):
        return list(init_inputs), {}
    raise TypeError(f"get_init_inputs() must return a list, got {type(init_inputs).__name__}")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seed_everything(seed: int) -> None:
    """Seed torch's CPU and CUDA generators, `random` and numpy's global generator.

    Problems that draw inputs with `random` or `numpy.random` must get the same inputs in both
    workers for the same seed (a timed output is rechecked against the reference's).
    """
    import random

    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:  # numpy is optional for torch; problems that use it need it installed
        return
    numpy.random.seed(seed % (1 << 32))


#: A worker's bound on one frame from the parent. The bound protects whoever reads a frame from the
#: process that wrote it; the parent is trusted, and its frames carry the problem's inputs, which
#: KernelBench sizes make hundreds of MiB to GiB (a 64 MiB bound made every large problem's first
#: trial crash on a GPU: 8192 x 8192 float32 is 256 MiB).
FROM_PARENT_MAX_BYTES = 1 << 40


def open_channel(fd: int) -> Channel:
    """The worker's end of its channel to the parent (inherited descriptor `fd`)."""
    return Channel.from_fd(fd, max_message_bytes=FROM_PARENT_MAX_BYTES)


def accept_hello(channel: Channel, who: str) -> dict[str, Any]:
    """Read the parent's first frame (the channel key, the source hash), sign from then on, and
    make this process non-dumpable. Called before any code the worker was started to run."""
    hello = channel.recv(timeout=60)
    payload = hello.payload if isinstance(hello.payload, dict) else {}
    if hello.kind != "hello" or not isinstance(payload.get("key"), str):
        raise SystemExit(f"tritongym {who} worker: expected a hello frame first")
    channel.enable_signing(bytes.fromhex(payload["key"]))
    # No process of the same user may attach to this one or read its memory through /proc.
    from tritongym.evaluator.jail.seccomp import make_non_dumpable

    make_non_dumpable()
    return payload
