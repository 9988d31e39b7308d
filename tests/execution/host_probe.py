"""What a hostile client problem tries from inside the reference worker, as problem source text.

`host_probe(target, marker, marker_name, port)` is module-level code that tries to write `target`
on the host, find `marker` (a server's token) in any process's environment through ``/proc`` or in
its own environment, and connect to ``127.0.0.1:port``; it leaves what happened in ``report``. The
pool's jailed references (tests/execution/test_jailed_references.py) and the service
(tests/service/test_security_jail.py) send it, each followed by how its problem reports.
"""

from __future__ import annotations

PROBE = '''
import os
import socket
report = {}
try:
    with open(TARGET, "w") as handle:
        handle.write("written by a client's problem")
    report["host_write"] = "written"
except OSError as exc:
    report["host_write"] = type(exc).__name__
seen = False
try:
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                seen = seen or MARKER.encode() in handle.read()
        except OSError:
            pass
except OSError:
    pass
report["proc"] = os.path.exists("/proc/self")
report["marker_seen"] = seen or MARKER in os.environ.get(MARKER_NAME, "")
sock = socket.socket()
sock.settimeout(3)
try:
    sock.connect(("127.0.0.1", PORT))
    report["network"] = "connected"
except OSError as exc:
    report["network"] = type(exc).__name__
'''


def host_probe(target: object, marker: str, marker_name: str, port: int) -> str:
    """The probe with its constants bound (`report` holds the outcome)."""
    return (f"TARGET = {str(target)!r}\nMARKER = {marker!r}\nMARKER_NAME = {marker_name!r}\nPORT = {port}\n"
            + PROBE)
