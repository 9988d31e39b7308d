"""A CPU-tier jailed fork server installs the interpreter fixes once, for its children to inherit.

Each case runs `forkserver_main.main` in a fresh interpreter (the fixes patch Triton, which must
not leak into the test process), with `serve` replaced by a recorder: what matters is the state
the server forks its children from.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent('''
    import json, socket, sys
    from triton.runtime import interpreter
    from tritongym.execution import forkserver_main

    def record(control, trusted):
        print(json.dumps({"patched": getattr(interpreter._patch_lang, "_tritongym_once", False),
                          "trusted": trusted}))

    forkserver_main.serve = record
    server_end, _client_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    sys.argv = ["forkserver_main", "--fd", str(server_end.fileno()), "--device", sys.argv[1]] + sys.argv[2:]
    forkserver_main.main()
''')


@pytest.mark.parametrize("device, flags, patched", [
    ("cpu", [], True),             # candidate and clean-room children inherit the fixes
    ("cpu", ["--trusted"], False),  # a trusted server forks references only: left as it is
    ("cuda", [], False),           # a GPU compiles kernels: no interpreter to fix
])
def test_the_fixes_are_installed_before_serving_on_the_cpu_tier_only(device, flags, patched):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, device, *flags], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"patched": patched, "trusted": bool(flags)}
