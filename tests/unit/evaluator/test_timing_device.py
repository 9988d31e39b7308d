"""The GPU as a shared resource, without a GPU: device parsing, the per-GPU lock across processes,
which device nodes the jail binds, the workers' GPU environment, and the sharing notice."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tritongym.errors import EvaluatorError, OptionsError
from tritongym.evaluator.common import device as gpu
from tritongym.evaluator.jail import sandbox


def test_parse_device_reads_auto_cpu_cuda_and_an_index():
    assert gpu.parse_device("auto") == ("auto", None)
    assert gpu.parse_device("cpu") == ("cpu", None)
    assert gpu.parse_device("cuda") == ("cuda", None)
    assert gpu.parse_device("cuda:3") == ("cuda", 3)
    for bad in ("gpu", "cuda:", "cuda:-1", "cuda:a", "CUDA", "cuda:1:2", 3):
        with pytest.raises(OptionsError):
            gpu.parse_device(bad)


def fake_nvidia(root: Path, gpus: list[tuple[str, int, str]]) -> list[gpu.PhysicalGpu]:
    for bus_id, minor, uuid in gpus:
        folder = root / bus_id
        folder.mkdir(parents=True)
        (folder / "information").write_text(f"Model: NVIDIA H100\nIRQ: 1\nGPU UUID: {uuid}\nDevice Minor: {minor}\n")
    return gpu.physical_gpus(str(root))


def test_visible_devices_map_to_their_device_nodes(tmp_path):
    # Minor numbers need not follow the bus order.
    gpus = fake_nvidia(tmp_path, [("0000:c1:00.0", 0, "GPU-ccc"), ("0000:41:00.0", 3, "GPU-aaa"),
                                  ("0000:81:00.0", 1, "GPU-bbb")])
    assert [g.minor for g in gpus] == [3, 1, 0]  # PCI bus order
    assert gpu.visible_gpu_minors(None, gpus) == [0, 1, 3]
    assert gpu.visible_gpu_minors("1", gpus) == [1]
    assert gpu.visible_gpu_minors("2,0", gpus) == [0, 3]
    assert gpu.visible_gpu_minors("GPU-bbb", gpus) == [1]
    assert gpu.visible_gpu_minors("0,-1,2", gpus) == [3]  # CUDA stops at the first invalid entry
    assert gpu.visible_gpu_minors("MIG-xyz", gpus) is None  # unknown: bind every GPU
    assert gpu.visible_gpu_minors("7", gpus) is None
    assert gpu.visible_gpu_minors("0", []) is None


def test_the_jail_binds_only_the_visible_gpus_node(tmp_path, monkeypatch):
    nodes = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia3", "/dev/nvidiactl", "/dev/nvidia-uvm",
             "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset"]
    gpus = fake_nvidia(tmp_path, [("0000:41:00.0", 3, "GPU-aaa"), ("0000:81:00.0", 1, "GPU-bbb")])
    monkeypatch.setattr(sandbox.glob, "glob", lambda pattern: list(nodes) if pattern == "/dev/nvidia*" else [])
    monkeypatch.setattr(gpu, "physical_gpus", lambda root=gpu.NVIDIA_GPUS_DIR: gpus)
    bound = sandbox._gpu_device_nodes("1", "PCI_BUS_ID")
    assert "/dev/nvidia1" in bound and "/dev/nvidia3" not in bound and "/dev/nvidia0" not in bound
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(bound)
    # Another device order, or an unresolvable entry: every node, as before.
    assert sandbox._gpu_device_nodes("1", "FASTEST_FIRST") == sorted(nodes)
    assert sandbox._gpu_device_nodes("MIG-1", "PCI_BUS_ID") == sorted(nodes)


def test_cuda_n_gives_the_worker_that_one_device(monkeypatch):
    assert sandbox.gpu_worker_env("cuda:1", {}) == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    assert sandbox.gpu_worker_env("cuda:1", {"CUDA_VISIBLE_DEVICES": "4,6"})["CUDA_VISIBLE_DEVICES"] == "6"
    assert sandbox.gpu_worker_env("cuda", {"CUDA_VISIBLE_DEVICES": "4,6"})["CUDA_VISIBLE_DEVICES"] == "4,6"
    assert "CUDA_VISIBLE_DEVICES" not in sandbox.gpu_worker_env("cuda", {})
    with pytest.raises(OptionsError, match="not visible"):
        sandbox.gpu_worker_env("cuda:2", {"CUDA_VISIBLE_DEVICES": "4,6"})


def test_triton_and_mps_variables_pass_into_the_worker():
    for name in ("CC", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_VISIBLE_DEVICES", "TRITON_LIBCUDA_PATH"):
        assert name in sandbox.PASSTHROUGH_ENV


def test_the_mps_pipe_directory_and_an_out_of_usr_compiler_are_bound(tmp_path, monkeypatch):
    pipes = tmp_path / "mps"
    pipes.mkdir()
    compiler_dir = tmp_path / "toolchain" / "bin"
    compiler_dir.mkdir(parents=True)
    compiler = compiler_dir / "gcc-custom"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipes))
    monkeypatch.setenv("CC", str(compiler))
    args = sandbox._gpu_binds()
    assert ["--bind", str(pipes), str(pipes)] == args[args.index(str(pipes)) - 1:args.index(str(pipes)) + 2]
    # The toolchain's prefix, not only its bin/: gcc runs …/libexec/gcc/*/cc1 (CC=/opt/gcc/bin/gcc on
    # the H200 image failed to build Triton's launcher with only /opt/gcc/bin bound).
    prefix = str(compiler_dir.parent)
    assert ["--ro-bind", prefix, prefix] == args[args.index(prefix) - 1:args.index(prefix) + 2]


def test_a_gpu_jail_has_its_own_proc_and_binds_nothing_under_usr_twice(tmp_path):
    # Seen on an H200: without /proc, cudaGetDeviceCount fails with error 304 in the jail; and a
    # second bind of /usr/local/cuda (a symbolic link to cuda-13.0 there) aborted bwrap itself.
    gpu_args = sandbox.bwrap_command(str(tmp_path), True, {})
    assert ["--proc", "/proc"] == gpu_args[gpu_args.index("--proc"):gpu_args.index("--proc") + 2]
    assert gpu_args.index("--proc") > gpu_args.index("--unshare-all")  # the jail's own PID namespace
    assert "--proc" not in sandbox.bwrap_command(str(tmp_path), False, {})  # CPU jails: no /proc at all
    bound = [gpu_args[i + 1] for i, arg in enumerate(gpu_args) if arg in ("--ro-bind", "--bind")]
    assert not [folder for folder in bound if folder.startswith("/usr/")]


def test_the_probe_names_a_missing_cc_and_not_a_failing_one():
    missing = "FileNotFoundError: [Errno 2] No such file or directory: '/opt/none/gcc'"
    assert "CC=/opt/none/gcc, which is missing" in gpu._probe_hint(missing, cc="/opt/none/gcc")
    failed = "CalledProcessError: Command '['/opt/gcc/bin/gcc', 'cuda_utils.c']' returned non-zero exit status 1."
    hint = gpu._probe_hint(failed, cc="/opt/gcc/bin/gcc")
    assert "missing" not in hint and "C compiler" in hint
    assert gpu._probe_hint("RuntimeError: no CUDA GPUs are available", cc="").startswith("no GPU is visible")


def test_the_memory_cap_names_the_current_gpu_for_a_bare_cuda(monkeypatch):
    # torch 2.11 raises ValueError for set_per_process_memory_fraction(f, device("cuda")) (seen on an
    # H200); the GPU calls are faked here, the only thing in this file that needs one.
    calls = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: calls.append((f, d)))
    gpu.cap_candidate_memory("cuda", 0.25)
    gpu.cap_candidate_memory("cuda:1", 0.5)
    assert calls == [(0.25, 2), (0.5, 1)]


def test_the_lock_key_names_the_physical_gpu_whatever_the_visible_list(tmp_path):
    gpus = fake_nvidia(tmp_path, [("0000:41:00.0", 3, "GPU-aaa"), ("0000:81:00.0", 1, "GPU-bbb")])
    # cuda:0 under CUDA_VISIBLE_DEVICES=1 and cuda:1 with all visible are the same GPU.
    assert gpu.lock_key(0, "1", gpus) == gpu.lock_key(1, None, gpus) == "gpu-0000:81:00.0"
    assert gpu.lock_key(None, "GPU-aaa", gpus) == "gpu-0000:41:00.0"
    assert gpu.lock_key(0, None, []) == "gpu-0"


HOLDER = """
import sys, time
from pathlib import Path
from tritongym.evaluator.common.device import DeviceLock
with DeviceLock("gpu-test", exclusive=sys.argv[2] == "x", folder=Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def _hold(folder: Path, mode: str, seconds: float) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), mode, str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    return holder


def _finish(holder: subprocess.Popen) -> None:
    holder.wait(timeout=30)
    holder.stdout.close()


def test_the_exclusive_lock_serialises_two_processes(tmp_path):
    holder = _hold(tmp_path, "x", 1.5)
    try:
        started = time.monotonic()
        with gpu.DeviceLock("gpu-test", folder=tmp_path, timeout=30) as lock:
            waited = time.monotonic() - started
        assert waited > 0.5 and lock.waited_s > 0.5
    finally:
        _finish(holder)


def test_shared_holders_coexist_and_exclude_an_exclusive_one(tmp_path):
    holder = _hold(tmp_path, "s", 1.5)
    try:
        with gpu.DeviceLock("gpu-test", exclusive=False, folder=tmp_path, timeout=5) as shared:
            assert shared.waited_s < 0.5  # readers share
        with pytest.raises(EvaluatorError, match="stayed taken"):
            gpu.DeviceLock("gpu-test", folder=tmp_path, timeout=0.2).acquire()
    finally:
        _finish(holder)


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    holder = _hold(tmp_path, "x", 60)
    holder.kill()
    _finish(holder)
    with gpu.DeviceLock("gpu-test", folder=tmp_path, timeout=5) as lock:
        assert lock.waited_s < 1.0


def test_sharing_notice_counts_foreign_contexts_and_names_exclusive_modes():
    assert gpu.sharing_notice(None) is None
    assert gpu.sharing_notice(gpu.SharingReport("default", (101, 102))) is None  # our two workers
    text = gpu.sharing_notice(gpu.SharingReport("default", (101, 102, 103, 104)))
    assert text.startswith("2 other process(es)")
    assert "exclusive_process" in gpu.sharing_notice(gpu.SharingReport("exclusive_process", (1,)))


def test_the_probe_and_the_memory_cap_do_nothing_on_a_cpu():
    assert gpu.probe_device("cpu") is None
    gpu.cap_candidate_memory("cpu", 0.5)
    if not torch.cuda.is_available():
        assert "GPU probe failed" in gpu.probe_device("cuda")


def test_pin_ieee_fp32_turns_tf32_off():
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.get_float32_matmul_precision())
    try:
        torch.backends.cudnn.allow_tf32 = True  # torch's default for convolutions
        assert gpu.tf32_enabled()
        note = gpu.pin_ieee_fp32()
        assert not gpu.tf32_enabled() and "cudnn.allow_tf32 = False" in note
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])


def test_a_broken_gpu_in_the_reference_worker_is_an_evaluator_error_not_a_problem_error(tmp_path):
    # On this CPU-only torch, CUDA cannot initialise: exactly a driver failure as the worker sees it.
    from tritongym.evaluator.worker.reference import ReferenceWorker

    sent: list[tuple[str, dict]] = []
    channel = type("Recording", (), {"send": lambda self, kind, payload=None: sent.append((kind, payload))})()
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32,
             torch.get_float32_matmul_precision())
    try:
        worker = ReferenceWorker(channel, str(tmp_path / "problem.py"), torch.device("cuda"))
        if torch.cuda.is_available():
            pytest.skip("CUDA works here")
        worker.setup(weight_seed=1)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved[0], saved[1]
        torch.set_float32_matmul_precision(saved[2])
    assert sent and sent[0][0] == "device_error" and "GPU probe failed" in sent[0][1]["message"]
    assert worker.module is None  # the problem was never loaded


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine where CUDA does not work")
def test_reference_runner_raises_evaluator_error_when_the_gpu_does_not_work():
    import tritongym
    from tritongym.evaluator.reference import ReferenceRunner

    problem = tritongym.builtin_suite()[0]
    with ReferenceRunner(problem, device="cuda:0", timeout=120) as runner:
        with pytest.raises(EvaluatorError, match="GPU failed in the reference worker"):
            runner.setup(weight_seed=1)
