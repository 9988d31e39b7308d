"""Sizes without allocating: each problem built on the meta device in a short-lived subprocess.

A problem whose forward the meta device cannot follow (``bincount``, ``masked_select``, sizes read
with ``.item()``) can be measured by running it for real on the CPU instead (``device="cpu"``), with
the probe's address space capped at what it held plus `allowance_bytes` for that request.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from tritongym.bench.audit.model import GiB, SizeEstimate
from tritongym.tasks.problem import Problem

_PROBE_SOURCE = r'''
import gc, importlib.util, json, os, resource, signal, sys, weakref
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

replies = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # a problem's own prints go to stderr, never into the replies


def tensors(value):
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors(v)]
    return []


def nbytes(value):
    return sum(t.numel() * t.element_size() for t in tensors(value))


class LiveBytes(TorchDispatchMode):
    """Peak bytes of tensors created by the forward and still referenced (views not counted)."""

    def __init__(self):
        super().__init__()
        self.live = 0
        self.peak = 0
        self.workspace = 0

    def release(self, n):
        self.live -= n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.convolution.default:
            self.workspace = max(self.workspace, conv_columns_bytes(args, out))
        if not any(r.alias_info is not None for r in func._schema.returns):
            for t in tensors(out):
                n = t.numel() * t.element_size()
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(t, self.release, n)
        return out


def conv_columns_bytes(args, out):
    """The im2col (col2im for a transposed one) buffer a CPU convolution without oneDNN allocates
    inside the op, for the whole batch: invisible as a tensor, and what float64 convolutions (the
    reference's precision check) use. Bytes at the op's own dtype."""
    if len(args) < 9 or not isinstance(args[0], torch.Tensor) or not isinstance(args[1], torch.Tensor):
        return 0  # not the schema's positional form: no figure rather than a wrong one
    x, weight, transposed = args[0], args[1], bool(args[6])
    spatial = weight.shape[2:]
    kernel = 1
    for k in spatial:
        kernel *= int(k)
    if transposed:  # columns: (C_out x kernel) x input positions
        channels, positions = weight.shape[1] * int(args[8]), x.shape[2:]
    else:  # columns: (C_in x kernel) x output positions
        channels, positions = x.shape[1], out.shape[2:]
    count = int(x.shape[0]) * int(channels) * kernel
    for p in positions:
        count *= int(p)
    return count * x.element_size()


class TooSlow(BaseException):
    pass


def on_alarm(signum, frame):
    raise TooSlow()


signal.signal(signal.SIGALRM, on_alarm)


def split(init):
    if isinstance(init, (list, tuple)) and len(init) == 2 and isinstance(init[0], (list, tuple)) \
            and isinstance(init[1], dict):
        return list(init[0]), dict(init[1])
    return list(init), {}


def address_space():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def probe(path, forward_timeout, device="meta", allowance=0):
    report = {"measured_on": device}
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if device != "meta":  # real tensors: what this request may add to the address space, no more
        limit = address_space() + allowance
        resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        return measure(report, path, forward_timeout, device)
    finally:
        sys.modules.pop("audit_probe_problem", None)  # module-level tensors go with the request
        gc.collect()
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def measure(report, path, forward_timeout, device):
    with torch.device(device):
        spec = importlib.util.spec_from_file_location("audit_probe_problem", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["audit_probe_problem"] = module
        torch.manual_seed(0)
        spec.loader.exec_module(module)
        args, kwargs = split(module.get_init_inputs())
        model = module.Model(*args, **kwargs)
        inputs = module.get_inputs()
    params = list(model.parameters())
    report["input_bytes"] = nbytes(list(inputs))
    report["param_bytes"] = nbytes(params) + nbytes(list(model.buffers()))
    report["float_params"] = sum(p.numel() for p in params if p.is_floating_point())
    live, flops = LiveBytes(), FlopCounterMode(display=False)
    try:
        with torch.device(device), torch.no_grad(), flops, live:
            signal.setitimer(signal.ITIMER_REAL, forward_timeout)
            try:
                out = model(*inputs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        given = [id(t) for t in tensors(list(inputs)) + params]
        report["output_bytes"] = sum(t.numel() * t.element_size() for t in tensors(out) if id(t) not in given)
        report["forward_peak_bytes"] = max(live.peak, report["output_bytes"])
        report["workspace_bytes"] = live.workspace
        report["flops"] = int(flops.get_total_flops())
    except TooSlow:
        report["forward_error"] = f"the forward on the {device} device took more than {forward_timeout:g} s"
    except Exception as exc:
        report["forward_error"] = f"{type(exc).__name__}: {exc}"[:300]
    return report


for line in sys.stdin:
    request = json.loads(line)
    try:
        report = probe(request["path"], request["forward_timeout"], request.get("device", "meta"),
                       request.get("allowance", 0))
    except BaseException as exc:
        report = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    replies.write(json.dumps(report) + "\n")
    replies.flush()
'''


class _Prober:
    """One probe subprocess answering one problem at a time; restarted after a crash or hang."""

    def __init__(self, memory_limit_bytes: int, timeout: float, forward_timeout: float) -> None:
        self.memory_limit_bytes = memory_limit_bytes
        self.timeout = timeout
        self.forward_timeout = forward_timeout
        self.dir = Path(tempfile.mkdtemp(prefix="tritongym-audit-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.buffer = b""
        self.count = 0

    def _start(self) -> subprocess.Popen[bytes]:
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.dir),
               "TMPDIR": str(self.dir), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (self.memory_limit_bytes, self.memory_limit_bytes))

        self.buffer = b""
        return subprocess.Popen([sys.executable, "-I", "-B", "-c", _PROBE_SOURCE], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=str(self.dir), env=env,
                                start_new_session=True, preexec_fn=limit)

    def _kill(self) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    stream.close()
            self.process = None

    def close(self) -> None:
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _read_line(self, deadline: float) -> bytes | None:
        assert self.process is not None and self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def estimate(self, problem: Problem, *, device: str = "meta", allowance_bytes: int = 0) -> SizeEstimate:
        """`problem`'s sizes on the meta device, or (``device="cpu"``) measured by running it for real
        with at most `allowance_bytes` more address space than the probe already holds."""
        # A fresh file name each time: importlib's bytecode cache keys on (mtime, size), so two
        # same-sized problems written within a second under one name could share a stale module.
        self.count += 1
        path = self.dir / f"problem_{self.count}.py"
        path.write_text(problem.source, encoding="utf-8")
        if self.process is None or self.process.poll() is not None:
            self._kill()
            self.process = self._start()
        assert self.process.stdin is not None
        try:
            request = {"path": str(path), "forward_timeout": self.forward_timeout, "device": device,
                       "allowance": int(allowance_bytes)}
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
            line = self._read_line(time.monotonic() + self.timeout)
        except (BrokenPipeError, OSError):
            line = None
        if line is None:
            self._kill()
            return SizeEstimate(error=f"building the problem on the {device} device did not finish within "
                                      f"{self.timeout:g} s (or crashed the probe)", measured_on=device)
        report = json.loads(line)
        return SizeEstimate(**{k: report.get(k) for k in SizeEstimate.__dataclass_fields__})


def estimate_sizes(problems: Iterable[Problem], *, timeout: float = 60.0, forward_timeout: float = 10.0,
                   memory_limit_gb: float = 4.0, cache: bool = True) -> dict[str, SizeEstimate]:
    """Sizes of each problem built under ``torch.device("meta")``, keyed by content hash.

    The problems' code runs only in a probe subprocess (address space capped at
    `memory_limit_gb`, so a problem that allocates real memory despite the meta device fails
    there); one that hangs or crashes is killed after `timeout` seconds and the probe restarts.
    A meta forward slower than `forward_timeout` (RNNs unroll step by step) is abandoned and
    only the input and parameter sizes are reported.

    With `cache`, a complete estimate (no error, measured on the meta device) is kept under
    `size_cache_dir` by content hash and torch version, and read back instead of probing: the
    probe's start is most of a single ``tritongym eval``'s pre-flight (2.8 s of 10 s on the 2-core
    machine), and the same problem's sizes do not change between runs.
    """
    problems = list(problems)
    found = {p.content_hash: e for p in problems if cache and (e := _cached_estimate(p)) is not None}
    missing = [p for p in problems if p.content_hash not in found]
    if not missing:
        return found
    prober = _Prober(int(memory_limit_gb * GiB), timeout, forward_timeout)
    try:
        for problem in missing:
            found[problem.content_hash] = meta_estimate(prober, problem) if cache else prober.estimate(problem)
        return found
    finally:
        prober.close()


def meta_estimate(prober: _Prober, problem: Problem) -> SizeEstimate:
    """`prober.estimate(problem)` on the meta device through the size cache: read back when kept,
    else probed and kept when complete. The CPU sizing (`tasks.sizing`) measures with this, so a
    problem file evaluated again (``tritongym eval --problem mine.py``) is not probed again: 2.8 s of
    the command's 8 s on the 2-core machine."""
    cached = _cached_estimate(problem)
    if cached is not None:
        return cached
    estimate = prober.estimate(problem)
    _store_estimate(problem, estimate)
    return estimate


#: Bumped when `SizeEstimate` or what the probe measures changes: older entries are then ignored.
SIZE_CACHE_SCHEMA = 1


def size_cache_dir() -> Path:
    """Where complete size estimates are kept: `tasks.loaders.cache_root` ``/ "sizes"``."""
    from tritongym.tasks.loaders import cache_root

    return cache_root() / "sizes"


def _torch_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "unknown"


def _cached_estimate(problem: Problem) -> SizeEstimate | None:
    try:
        entry = json.loads((size_cache_dir() / f"{problem.content_hash}.json").read_text(encoding="utf-8"))
        if entry["schema"] != SIZE_CACHE_SCHEMA or entry["torch"] != _torch_version():
            return None
        fields = entry["estimate"]
        if set(fields) != set(SizeEstimate.__dataclass_fields__):
            return None
        estimate = SizeEstimate(**fields)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    numbers = (estimate.input_bytes, estimate.param_bytes, estimate.output_bytes, estimate.forward_peak_bytes,
               estimate.flops, estimate.float_params)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers):
        return None
    if estimate.error or estimate.forward_error or estimate.measured_on not in (None, "meta"):
        return None
    return estimate


def _store_estimate(problem: Problem, estimate: SizeEstimate) -> None:
    """Keep a complete meta-device estimate; errors and partial ones are probed again next time."""
    if estimate.error or estimate.forward_error or estimate.measured_on not in (None, "meta"):
        return
    directory = size_cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".size-", dir=directory)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump({"schema": SIZE_CACHE_SCHEMA, "torch": _torch_version(),
                       "estimate": {k: getattr(estimate, k) for k in SizeEstimate.__dataclass_fields__}}, out)
        os.replace(temporary, directory / f"{problem.content_hash}.json")
    except OSError:
        pass  # a read-only cache costs the probe next time, nothing else


