"""In a GPU jail, which has a ``/proc``, no candidate of a fork-server slot reads another's.

The CUDA driver reads ``/proc`` (without it, ``cudaGetDeviceCount`` failed with error 304 in the
jail on an H200), so GPU jails mount a procfs of the jail's PID namespace; CPU jails have none. A
fork server's jail holds every candidate of its slot under one uid, and that procfs lists them
all. Every candidate worker makes itself non-dumpable before the candidate's import
(`seccomp.make_non_dumpable`, as the fork server does at start), so a sibling's
``/proc/<pid>/environ`` (and ``maps``, ``mem``) is refused. Checked with the real bwrap, on a CPU:
the GPU jail's own command (no device nodes to bind here), a victim holding a secret, a sibling
reading it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tritongym.evaluator.jail import sandbox

pytestmark = pytest.mark.sandbox

VICTIM = r'''
import sys, time
from tritongym.evaluator.jail.seccomp import make_non_dumpable
if sys.argv[1] == "hidden":
    assert make_non_dumpable()
print("ready", flush=True)
time.sleep(60)
'''

SIBLING = r'''
import os, subprocess, sys
for mode in ("plain", "hidden"):
    victim = subprocess.Popen([sys.executable, "-c", sys.argv[1], mode], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "VICTIM_SECRET": "s3cret-" + mode})
    assert victim.stdout.readline().strip() == "ready"
    try:
        with open(f"/proc/{victim.pid}/environ", "rb") as f:
            found = "read" if b"s3cret-" + mode.encode() in f.read() else "no-secret"
    except OSError as exc:
        found = type(exc).__name__
    print(mode, found, flush=True)
    victim.kill()
    victim.wait()
'''


def test_a_sibling_cannot_read_a_hidden_candidates_proc_files_in_a_gpu_jail(tmp_path):
    assert "--proc" not in sandbox.bwrap_command(str(tmp_path), False)  # a CPU jail: no /proc at all
    command = sandbox.bwrap_command(str(tmp_path), True, {})  # the GPU jail itself (no GPU nodes here)
    assert "--proc" in command
    out = subprocess.run([*command, sys.executable, "-c", SIBLING, VICTIM], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    seen = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert seen["plain"] == "read"  # the control: same uid, dumpable, the secret is readable
    assert seen["hidden"] == "PermissionError"
