"""Run-time enforcement of the forbidden vocabulary inside the candidate worker (PEP 578 audit hook).

The static gate reads the source; aliasing and string-built attribute access evade it
(``len.__self__`` is the builtins module, ``getattr(m, "g" + "c")`` is anything). This hook is
installed in the candidate worker before the candidate is imported, and CPython offers no way to
remove it. For every audited event it finds the *responsible* frame (walking up past the standard
library, so ``import gc`` done through importlib, or ``inspect.currentframe()``, is attributed to
whoever called them) and, when that frame is the candidate's own file, refuses the event by
raising `PermissionError` and records it. Events caused by torch, triton or the harness (Triton
compiling a kernel with ``ptxas``, torch importing its own submodules) are allowed.

Refused when the candidate is responsible (reward-hacking.md B10, D2, D4, D5, E1–E5):

* walking the heap or the stack: ``gc.get_objects``/``get_referrers``/``get_referents``,
  ``sys._getframe``, ``sys._current_frames``, generator/coroutine/traceback frame attributes;
* tracing and new hooks: ``sys.settrace``, ``sys.setprofile``, ``sys.addaudithook``;
* code from strings: ``compile`` and ``exec`` of code that does not come from a file;
* replacing code: writes to a function's ``__code__``, ``__defaults__``, ``__kwdefaults__``;
* imports of the modules the static gate forbids, when they are not loaded yet (CPython raises
  the import event only for a real load: a module torch already imported is reachable through
  ``sys.modules``, so what matters is that its dangerous *operations* above are refused);
* new threads started by the candidate (``_thread.start_new_thread``, where the interpreter
  audits it: Python 3.11 does not, and there the thread-count check covers threads);
* native access: every ``ctypes`` event;
* processes and signals: ``os.kill``, ``os.fork``, ``os.exec*``, ``os.posix_spawn``,
  ``os.system``, ``subprocess.Popen``;
* files and sockets: ``open`` and every ``socket`` event (kernels never need them; the jail
  already confines what they could reach).

Not covered: writes to module and class attributes (CPython does not audit them: the worker's
identity checks detect those), and closure cells. The hook itself is reachable only through the
interpreter's hook list, frames or ``gc``, all of which it refuses.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable

from tritongym.evaluator.static import FORBIDDEN_MODULES

#: Events refused outright when the candidate is responsible.
REFUSED_EVENTS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "sys._current_frames",
    "sys._current_exceptions", "sys.settrace", "sys.setprofile", "sys.addaudithook",
    "os.kill", "os.killpg", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "os.startfile", "subprocess.Popen", "open", "pty.spawn", "code.__new__", "function.__new__",
    "_thread.start_new_thread",
    "marshal.loads", "marshal.load", "pickle.find_class", "builtins.breakpoint", "cpython.run_command",
})
#: Attribute reads that hand out frames (CPython audits these through object.__getattr__).
FRAME_ATTRIBUTES = frozenset({"gi_frame", "cr_frame", "ag_frame", "tb_frame", "f_back"})
#: Attribute writes that replace a function's code.
CODE_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__"})
#: Event name prefixes refused outright.
REFUSED_PREFIXES = ("ctypes.", "socket.", "_ctypes.")


def _stdlib_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    return tuple(sorted(roots))


def install(candidate_file: str, enforce: bool = True) -> list[str]:
    """Install the policy for `candidate_file`; returns the live list of refused events.

    With ``enforce=False`` the events are recorded but allowed (the caller disabled the
    `forbidden_construct` check, e.g. to test that the OS sandbox alone contains them).
    """
    candidate = os.path.realpath(candidate_file)
    refused: list[str] = []
    busy = [False]
    stdlib = _stdlib_roots()
    site_markers = ("site-packages", "dist-packages")
    # Everything the hook consults is bound here, now: module attributes and builtins can be
    # rebound by the candidate without any audit event, closure locals cannot be reached.
    frame_attributes, code_attributes = FRAME_ATTRIBUTES, CODE_ATTRIBUTES
    refused_events, refused_prefixes, forbidden_modules = REFUSED_EVENTS, REFUSED_PREFIXES, FORBIDDEN_MODULES
    _realpath, _str, _len, _any, _range, _isinstance, _getattr = (
        os.path.realpath, str, len, any, range, isinstance, getattr)
    _bytes, _permission_error = bytes, PermissionError
    import_machinery = frozenset({"_find_and_load", "_find_and_load_unlocked", "_load_unlocked", "_load",
                                  "_gcd_import", "_handle_fromlist", "exec_module", "_call_with_frames_removed"})

    realpaths: dict[str, str] = {}

    def responsible_file(frame, event: str) -> str | None:  # noqa: ANN001
        """The first frame up the stack that is not the standard library: who asked for this.

        The import machinery executing an import (``_find_and_load`` ...) is responsible for
        the files it opens and the code it compiles: the import itself was vetted by its own
        "import" event. Other frozen frames (``__loader__.get_data(...)`` called directly) are
        skipped like the standard library.
        """
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith("<frozen"):
                if event != "import" and frame.f_code.co_name in import_machinery:
                    return "<import machinery>"
                frame = frame.f_back
                continue
            path = realpaths.get(name)
            if path is None:
                path = realpaths[name] = _realpath(name) if not name.startswith("<") else name
            if path.startswith(stdlib) and not _any(marker in path for marker in site_markers):
                frame = frame.f_back
                continue
            return path
        return None

    def refuse(event: str, detail: str, _enforce: bool = enforce) -> None:
        if _len(refused) < 100:
            refused.append(f"{event} {detail}".strip())
        if _enforce:
            raise _permission_error(f"tritongym: {event} is not allowed in candidate code")

    def suspicious(event: str, args: tuple) -> str | None:
        """What would be refused if the candidate is responsible (None: allowed whoever asks).

        Cheap tests on the event's arguments come first, so the frame walk runs only for events
        that could be refused; most audited events in a worker (torch reading a function's
        code, importing its own modules) return here.
        """
        if event == "object.__getattr__":
            return _str(args[1]) if _len(args) > 1 and args[1] in frame_attributes else None
        if event == "object.__setattr__":
            return _str(args[1]) if _len(args) > 1 and args[1] in code_attributes else None
        if event == "import":
            parts = _str(args[0]).split(".")
            forbidden = _any(".".join(parts[:i]) in forbidden_modules for i in _range(1, _len(parts) + 1))
            return _str(args[0]) if forbidden else None
        if event in ("exec", "compile"):
            # Importing a module compiles and executes a real file; code from a string does not.
            filename = _getattr(args[0], "co_filename", None) if event == "exec" and args else None
            if event == "compile" and _len(args) > 1:
                filename = args[1]
            if _isinstance(filename, _bytes):
                filename = filename.decode(errors="replace")
            return _str(filename) if not _isinstance(filename, _str) or filename.startswith("<") else None
        if event in refused_events or event.startswith(refused_prefixes):
            return _str(args[0])[:120] if args and event in ("open", "subprocess.Popen", "os.system") else ""
        return None

    def hook(event: str, args: tuple, _getframe: Callable = sys._getframe,  # noqa: B008 - captured on purpose
             _candidate: str = candidate) -> None:
        if busy[0]:
            return
        detail = suspicious(event, args)
        if detail is None:
            return
        busy[0] = True
        try:
            if responsible_file(_getframe(1), event) == _candidate:
                refuse(event, detail)
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    return refused
