"""The GPU as a shared, fallible resource: which device, whether it works, who else uses it.

Used by the parent (device parsing, the per-device lock, the sharing notice, which device nodes
the jail binds) and by the workers (the start-up probe, the candidate's memory cap, IEEE fp32 in
the reference). Imports only the standard library, torch and triton.

* `parse_device` reads ``auto``, ``cpu``, ``cuda`` and ``cuda:N``.
* `probe_device` initialises CUDA and compiles and launches a tiny Triton kernel: run in a
  worker before any candidate code, its failure is the machine's or the jail's (a missing C
  compiler for Triton's launcher, no device node, a driver error), never the candidate's.
* `cap_candidate_memory` caps the caching allocator of the candidate's process, so a candidate
  that fills the GPU fails itself, not the reference worker's later allocations.
* `pin_ieee_fp32` turns TF32 off for matmul and cuDNN: torch leaves ``cudnn.allow_tf32`` on, so
  reference convolutions would otherwise be TF32 (a fast baseline and TF32-accurate outputs).
* `DeviceLock` is a file lock per physical GPU: timing and profiling hold it exclusively, so two
  evaluations on one GPU never time at once (other GPU work may hold it shared).
* `sharing_report` asks NVML (through ctypes; no Python package needed) for the compute mode and
  the processes holding a context on the GPU.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import torch
import triton
import triton.language as tl

from tritongym.errors import EvaluatorError, OptionsError

# Re-exported: device names are read without torch where only a name is checked (the CLI).
from tritongym.evaluator.common.device_names import parse_device  # noqa: F401

#: Where the kernel module exposes each GPU: ``<bus id>/information`` holds its minor and UUID.
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"


# -- the start-up probe ----------------------------------------------------------------------

@triton.jit
def _probe_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2.0 + 1.0, mask=mask)


def probe_device(device: torch.device | str, triton_kernel: bool = True) -> str | None:
    """None when CUDA initialises and a Triton kernel compiles, launches and computes; else why not.

    Run it in a worker before importing candidate code: a failure here is the environment's
    (driver, device node, C compiler for Triton's launcher, cache directory), and the caller
    raises an `EvaluatorError` rather than scoring it against the candidate. With
    ``triton_kernel=False`` (the reference worker, which runs no Triton) only CUDA is checked.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return None
    try:
        torch.cuda.init()
        if device.index is not None:
            torch.cuda.set_device(device)
        x = torch.arange(100, dtype=torch.float32, device=device)
        y = torch.empty_like(x)
        if triton_kernel:
            _probe_kernel[(1,)](x, y, x.numel(), BLOCK=128)
        else:
            torch.add(x * 2.0, 1.0, out=y)
        torch.cuda.synchronize(device)
        if not torch.equal(y.cpu(), torch.arange(100, dtype=torch.float32) * 2 + 1):
            return "a probe Triton kernel ran but computed wrong values: the device or driver is faulty"
    except Exception as exc:  # noqa: BLE001 - every failure here is the environment's, reported as text
        message = f"{type(exc).__name__}: {str(exc).strip()[:800]}"
        hint = _probe_hint(message)
        return f"the GPU probe failed before any candidate code ran: {message}" + (f" ({hint})" if hint else "")
    return None


def _probe_hint(message: str, cc: str | None = None) -> str:
    lowered = message.lower()
    cc = os.environ.get("CC") if cc is None else cc
    if cc and message.startswith("FileNotFoundError") and cc in message:
        # Triton >= 3.6 runs $CC directly: a missing one is a bare FileNotFoundError naming it.
        return f"Triton builds its launcher with the C compiler CC={cc}, which is missing: install it or unset CC"
    if "c compiler" in lowered or "gcc" in lowered or "clang" in lowered:
        return "Triton builds its launcher with a C compiler: install gcc or set CC"
    if "no cuda gpus are available" in lowered or "no cuda-capable device" in lowered:
        return "no GPU is visible here: check CUDA_VISIBLE_DEVICES and that the jail binds /dev/nvidia*"
    if "busy or unavailable" in lowered:
        return "the GPU is in an exclusive compute mode and another process holds it"
    return ""


def cap_candidate_memory(device: torch.device | str, fraction: float) -> None:
    """Cap this process's CUDA caching allocator at `fraction` of the device's memory.

    Allocations beyond the cap raise ``torch.OutOfMemoryError`` in this process (a verdict
    against whoever allocated), leaving the rest for the reference worker. Memory taken
    outside the caching allocator (``cudaMalloc`` from a C extension) is not capped; the
    reference allocates its own large buffers at setup, before the candidate runs.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    # torch >= 2.11 wants an index ("cuda" alone raises ValueError): the bare name is the current GPU.
    index = device.index if device.index is not None else torch.cuda.current_device()
    torch.cuda.set_per_process_memory_fraction(fraction, index)


def pin_ieee_fp32() -> str:
    """TF32 off for matmul and cuDNN (convolutions) in this process; returns what was set."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return "torch.backends.cuda.matmul.allow_tf32 = False, torch.backends.cudnn.allow_tf32 = False"


def tf32_enabled() -> bool:
    """Whether either TF32 switch is on in this process."""
    return bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)


# -- which physical GPU ----------------------------------------------------------------------

@dataclass(frozen=True)
class PhysicalGpu:
    """One GPU as the kernel module lists it."""

    bus_id: str
    minor: int
    uuid: str


def physical_gpus(root: str = NVIDIA_GPUS_DIR) -> list[PhysicalGpu]:
    """The GPUs of this machine in PCI bus order (empty where the NVIDIA module is not loaded)."""
    gpus = []
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return []
    for bus_id in entries:
        try:
            text = Path(root, bus_id, "information").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        minor = re.search(r"^Device Minor:\s*(\d+)", text, re.MULTILINE)
        uuid = re.search(r"^GPU UUID:\s*(\S+)", text, re.MULTILINE)
        if minor is not None:
            gpus.append(PhysicalGpu(bus_id=bus_id.lower(), minor=int(minor.group(1)),
                                    uuid=uuid.group(1) if uuid else ""))
    return gpus


def visible_entries(cuda_visible_devices: str | None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES`` up to the first invalid one (CUDA's rule); None if unset."""
    if cuda_visible_devices is None:
        return None
    entries = []
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if not entry or (entry.lstrip("-").isdigit() and int(entry) < 0):
            break
        entries.append(entry)
    return entries


def resolve_visible(entry: str, gpus: list[PhysicalGpu]) -> PhysicalGpu | None:
    """The GPU a ``CUDA_VISIBLE_DEVICES`` entry names (an index in PCI order, or a UUID prefix)."""
    if entry.isdigit():
        index = int(entry)
        return gpus[index] if index < len(gpus) else None
    if entry.startswith("GPU-"):
        matches = [gpu for gpu in gpus if gpu.uuid.startswith(entry)]
        return matches[0] if len(matches) == 1 else None
    return None  # MIG instances and anything else: not resolvable to one device node


def visible_gpu_minors(cuda_visible_devices: str | None, gpus: list[PhysicalGpu]) -> list[int] | None:
    """Minor numbers of the ``/dev/nvidiaN`` nodes the visible devices need; None when unknown.

    None means "bind every GPU node" (no NVIDIA listing, a MIG or unparsable entry). Index
    entries assume PCI bus order, which the workers get (``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
    """
    entries = visible_entries(cuda_visible_devices)
    if not gpus:
        return None
    if entries is None:
        return sorted(gpu.minor for gpu in gpus)
    minors = []
    for entry in entries:
        gpu = resolve_visible(entry, gpus)
        if gpu is None:
            return None
        minors.append(gpu.minor)
    return sorted(set(minors))


def worker_visible_devices(index: int | None, cuda_visible_devices: str | None) -> str | None:
    """The ``CUDA_VISIBLE_DEVICES`` a worker for ``cuda:index`` gets: that one device only.

    The worker then sees it as ``cuda:0``. None keeps the caller's setting (no index given).
    """
    if index is None:
        return cuda_visible_devices
    entries = visible_entries(cuda_visible_devices)
    if entries is None:
        return str(index)
    if index >= len(entries):
        raise OptionsError(f"device cuda:{index} is not visible: CUDA_VISIBLE_DEVICES={cuda_visible_devices!r} "
                           f"lists {len(entries)} device(s)")
    return entries[index]


def lock_key(index: int | None, cuda_visible_devices: str | None = None,
             gpus: list[PhysicalGpu] | None = None) -> str:
    """A name for the physical GPU ``cuda:index`` is, the same from every process on the machine."""
    gpus = physical_gpus() if gpus is None else gpus
    entry = worker_visible_devices(index if index is not None else 0, cuda_visible_devices) or "0"
    gpu = resolve_visible(entry, gpus)
    if gpu is not None:
        return f"gpu-{gpu.bus_id}"
    return "gpu-" + re.sub(r"[^A-Za-z0-9_.-]", "_", entry)[:100]


# -- the per-device lock ---------------------------------------------------------------------

def lock_dir() -> Path:
    """``$TRITONGYM_LOCK_DIR``, else a sticky, world-writable folder under the temp directory.

    Shared between users on purpose: two users timing on one GPU disturb each other too.
    """
    configured = os.environ.get("TRITONGYM_LOCK_DIR")
    folder = Path(configured) if configured else Path(tempfile.gettempdir()) / "tritongym-locks"
    try:
        folder.mkdir(mode=0o1777, exist_ok=True)
        if not configured and folder.stat().st_uid == os.getuid():
            os.chmod(folder, 0o1777)
    except OSError as exc:
        raise EvaluatorError(f"cannot create the device lock folder {folder}: {exc}; set TRITONGYM_LOCK_DIR") from exc
    return folder


class DeviceLock:
    """An ``flock`` on ``<lock_dir>/<key>.lock``: exclusive for timing and profiling, shared otherwise.

    Waits up to `timeout` seconds (then `EvaluatorError`: the machine is overloaded, not the
    candidate's fault). `waited_s` says how long acquiring took. Released on exit, and by the
    kernel if the process dies.
    """

    def __init__(self, key: str, *, exclusive: bool = True, timeout: float = 600.0,
                 folder: Path | None = None) -> None:
        self.path = (folder or lock_dir()) / f"{key}.lock"
        self.exclusive = exclusive
        self.timeout = timeout
        self.waited_s = 0.0
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        operation = (fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        started = time.monotonic()
        delay = 0.001
        while True:
            try:
                fcntl.flock(fd, operation)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise EvaluatorError(f"cannot lock {self.path}: {exc}") from exc
            if time.monotonic() - started > self.timeout:
                os.close(fd)
                raise EvaluatorError(f"the GPU lock {self.path} stayed taken for {self.timeout:g} s: another "
                                     "evaluation is timing on this GPU for too long")
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        self.waited_s = time.monotonic() - started
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DeviceLock:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()


def device_lock(device: str, *, exclusive: bool = True, timeout: float = 600.0) -> DeviceLock:
    """The lock of the GPU that `device` (``cuda`` or ``cuda:N``, as the parent sees it) names."""
    _, index = parse_device(device)
    return DeviceLock(lock_key(index, os.environ.get("CUDA_VISIBLE_DEVICES")), exclusive=exclusive,
                      timeout=timeout)


# -- who else uses the GPU (NVML through ctypes) ----------------------------------------------

#: NVML compute modes (nvmlComputeMode_t).
COMPUTE_MODES = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}


@dataclass(frozen=True)
class SharingReport:
    """What NVML says about one GPU: its compute mode and the PIDs holding a context on it."""

    compute_mode: str
    pids: tuple[int, ...]


class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2/v3 layout)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class _ProcessInfoV1(ctypes.Structure):
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


def sharing_report(device: str) -> SharingReport | None:
    """NVML's view of the GPU `device` names; None when NVML or the device cannot be reached."""
    _, index = parse_device(device)
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        handle = ctypes.c_void_p()
        entry = worker_visible_devices(index if index is not None else 0, os.environ.get("CUDA_VISIBLE_DEVICES"))
        gpu = resolve_visible(entry or "0", physical_gpus())
        if gpu is not None:
            found = nvml.nvmlDeviceGetHandleByPciBusId_v2(gpu.bus_id.encode(), ctypes.byref(handle))
        elif entry is not None and entry.startswith(("GPU-", "MIG-")):
            found = nvml.nvmlDeviceGetHandleByUUID(entry.encode(), ctypes.byref(handle))
        elif entry is not None and entry.isdigit():
            found = nvml.nvmlDeviceGetHandleByIndex_v2(int(entry), ctypes.byref(handle))
        else:
            return None
        if found != 0:
            return None
        mode = ctypes.c_int()
        compute_mode = COMPUTE_MODES.get(mode.value, str(mode.value)) \
            if nvml.nvmlDeviceGetComputeMode(handle, ctypes.byref(mode)) == 0 else "unknown"
        return SharingReport(compute_mode=compute_mode, pids=_nvml_pids(nvml, handle))
    finally:
        nvml.nvmlShutdown()


def _nvml_pids(nvml: ctypes.CDLL, handle: ctypes.c_void_p) -> tuple[int, ...]:
    for symbol, struct in (("nvmlDeviceGetComputeRunningProcesses_v3", _ProcessInfo),
                           ("nvmlDeviceGetComputeRunningProcesses_v2", _ProcessInfo),
                           ("nvmlDeviceGetComputeRunningProcesses", _ProcessInfoV1)):
        function = getattr(nvml, symbol, None)
        if function is None:
            continue
        count = ctypes.c_uint(64)
        infos = (struct * 64)()
        if function(handle, ctypes.byref(count), infos) == 0:
            return tuple(int(infos[i].pid) for i in range(min(count.value, 64)))
    return ()


def sharing_notice(report: SharingReport | None, own_contexts: int = 2) -> str | None:
    """The notice text when the GPU is shared or exclusive; None when it is ours alone (or unknown).

    `own_contexts` is how many contexts this evaluation holds (the reference and the candidate
    worker); NVML's PIDs are the host's, so inside a container they cannot be matched to ours
    and are counted instead.
    """
    if report is None:
        return None
    parts = []
    foreign = len(report.pids) - own_contexts
    if os.getpid() in report.pids:
        foreign -= 1  # the caller's own process (a trainer using the GPU)
    if foreign > 0:
        parts.append(f"{foreign} other process(es) hold a CUDA context on this GPU; their work can slow "
                     "either side's timed calls (timing and profiling hold a per-GPU lock against other "
                     "tritongym evaluations only)")
    if report.compute_mode in ("exclusive_process", "exclusive_thread", "prohibited"):
        parts.append(f"the GPU's compute mode is {report.compute_mode}: the reference and candidate workers "
                     "need a context each, so evaluations fail here; set the default compute mode")
    return "; ".join(parts) or None
