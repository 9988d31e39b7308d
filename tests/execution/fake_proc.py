"""A /proc of chosen processes for the fast unit layers (test_forkserver_units.py, test_references_units.py).

It is answered in place of a module's builtin `open` (``monkeypatch.setattr(module, "open", fake.open,
raising=False)``) for the paths the process-tree walks read: ``/proc/<pid>/status`` and
``/proc/<pid>/task/<pid>/children``, each file's bytes as the kernel writes them, decoded with the
encoding and error handler the caller asks for, as `open` does. A process missing here has exited
(FileNotFoundError, as for a real /proc). Real /proc trees cannot be made this large, this racy or
this oddly named on a test machine; the real-process tests live beside these files.
"""

from __future__ import annotations

import io


class FakeProc:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.opened: list[str] = []

    def put(self, pid: int, status: list[bytes], children: tuple[int, ...]) -> None:
        """Process `pid` with these ``status`` lines and these children."""
        self.files[f"/proc/{pid}/status"] = b"\n".join(status) + b"\n"
        self.files[f"/proc/{pid}/task/{pid}/children"] = "".join(f"{child} " for child in children).encode()

    def open(self, path, mode="r", encoding=None, errors=None):
        assert mode == "r" and str(path).startswith("/proc/"), path
        self.opened.append(str(path))
        if path not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return io.TextIOWrapper(io.BytesIO(self.files[path]), encoding=encoding, errors=errors)

    def statuses(self) -> list[int]:
        """The PIDs whose status was read, in order."""
        return [int(path.split("/")[2]) for path in self.opened if path.endswith("/status")]
