"""Run-time enforcement of the forbidden vocabulary inside the candidate worker (PEP 578 audit hook).

The static gate reads the source; aliasing and string-built attribute access evade it
(``len.__self__`` is the builtins module, ``getattr(m, "g" + "c")`` is anything). This hook is
installed in the candidate worker before the candidate is imported, and CPython offers no way to
remove it. For every audited event it asks who is responsible, walking the stack from the
innermost frame outwards: the import machinery executing an import and Triton's own code
(compiling a kernel with ``ptxas``, writing its cache) act for themselves and are allowed; the
candidate's file is responsible when it is reached first; every other frame (the standard library,
torch, numpy, other libraries, tritongym's helpers) is looked through. So a library called by the
candidate acts *for* the candidate: numpy's ``DataSource`` opening ``/proc/self/mem`` for it is
refused (a red-team finding: the first version blamed the first non-standard-library frame).

Refused when the candidate is responsible (reward-hacking.md B10, D2, D4, D5, E1–E5):

* walking the heap or the stack: ``gc.get_objects``/``get_referrers``/``get_referents``,
  ``sys._getframe``, ``sys._current_frames``, generator/coroutine/traceback frame attributes;
* tracing and new hooks: ``sys.settrace``, ``sys.setprofile``, ``sys.addaudithook``;
* code from strings: ``compile`` and ``exec`` of code that does not come from a file;
* replacing or reaching into code: writes to a function's ``__code__``, ``__defaults__``,
  ``__kwdefaults__``, and reads of ``__code__``, ``__defaults__`` and ``__kwdefaults__`` of the
  *harness's* functions (it keeps its captured references in default arguments). Reading them on
  the candidate's own, torch's or Triton's functions is what ``inspect.signature`` does (a
  version-compatibility idiom: "does this Triton accept that keyword?") and reaches nothing of the
  harness, so it is allowed; a function whose code has no file (made from a string) counts as the
  harness's;
* imports of the modules the static gate forbids, when they are not loaded yet (CPython raises
  the import event only for a real load: a module torch already imported is reachable through
  ``sys.modules``, so what matters is that its dangerous *operations* above are refused);
* new threads started by the candidate (``_thread.start_new_thread``, where the interpreter
  audits it: Python 3.11 does not, and there the thread-count check covers threads);
* native access: every ``ctypes`` event;
* processes and signals: ``os.kill``, ``os.fork``, ``os.exec*``, ``os.posix_spawn``,
  ``os.system``, ``subprocess.Popen``;
* files and sockets: ``open`` and every ``socket`` event (kernels never need them; the jail
  already confines what they could reach). One exception: a **read-only** open of the solution
  file itself or of the problem file beside it (``/job/candidate.py``, ``/job/problem.py``). The
  standard library and torch read a module's own source for it: ``warnings.warn`` shows the
  source line, ``torch.library.custom_op``/``triton_op`` read the function's source, tracebacks
  and ``inspect.getsource`` use ``linecache``. Both files are bound read-only in the jail and the
  solution's text is the one the parent hashed, so reading them reveals nothing new. Likewise a
  read-only open of a library's ``.py`` source file (the standard library's, or an installed
  package's under ``site-packages``/``dist-packages``): ``torch.library.triton_op`` reads the
  source of every function the op calls (``wrap_triton`` included) to find its kernels; that text
  is published, and the jail binds those folders read-only.

Not covered: writes to module and class attributes (CPython does not audit them: the worker's
identity checks detect those), and closure cells. The hook itself is reachable only through the
interpreter's hook list, frames or ``gc``, all of which it refuses.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Callable

#: Modules no kernel solution imports (CPython audits only a first import; the operations of
#: modules that are already loaded are what the events below refuse).
FORBIDDEN_MODULES = frozenset({
    "ctypes", "_ctypes", "cffi", "pty", "subprocess", "multiprocessing", "_posixsubprocess", "socket",
    "marshal", "pdb", "bdb", "code", "codeop", "faulthandler", "tracemalloc", "mmap", "fcntl", "cupy", "pycuda",
    "numba",
})

#: Events refused outright when the candidate is responsible.
REFUSED_EVENTS = frozenset({
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys._getframe", "sys._current_frames",
    "sys._current_exceptions", "sys.settrace", "sys.setprofile", "sys.addaudithook",
    "os.kill", "os.killpg", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system",
    "os.startfile", "subprocess.Popen", "open", "pty.spawn", "code.__new__", "function.__new__",
    "_thread.start_new_thread",
    "marshal.loads", "marshal.load", "pickle.find_class", "builtins.breakpoint", "cpython.run_command",
})
#: Attribute reads that hand out frames or code (CPython audits these through object.__getattr__).
FRAME_ATTRIBUTES = frozenset({"gi_frame", "cr_frame", "ag_frame", "tb_frame", "f_back", "__code__", "__defaults__",
                              "__kwdefaults__"})
#: Attribute writes that replace a function's code.
CODE_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__", "__globals__", "__closure__"})
#: Event name prefixes refused outright.
REFUSED_PREFIXES = ("ctypes.", "socket.", "_ctypes.")
#: Reads of these are refused only on the harness's own functions (see the module docstring).
HARNESS_ONLY_ATTRIBUTES = frozenset({"__code__", "__defaults__", "__kwdefaults__"})
#: The file beside the solution that the candidate may read (read-only), with the solution itself.
PROBLEM_FILE = "problem.py"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


#: The harness's evidence modules: when they read a kernel's code they act for themselves.
HARNESS_MODULES = ("kernels.py", "launches.py", "optrace.py")
#: Events that only look at code or frames; every other refused event does something.
INTROSPECTION_EVENTS = frozenset({"object.__getattr__", "object.__setattr__", "sys._getframe", "exec", "compile",
                                  "sys._current_frames", "sys._current_exceptions",
                                  # a library importing its own dependencies acts for itself (torch
                                  # loading torch._dynamo, which imports ctypes, for
                                  # @torch.compiler.disable); what ctypes then does is audited
                                  "import"})


def _stdlib_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib") if key in paths}
    return tuple(sorted(roots))


def _package_root(name: str) -> str | None:
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return os.path.realpath(os.path.dirname(path)) + os.sep if path else None


def read_only(mode: object, flags: object) -> bool:
    """Whether an ``open`` audit event's mode (``io.open``: a string) or flags (``os.open``) only read."""
    if isinstance(mode, str):
        return not any(c in mode for c in "wax+")
    return isinstance(flags, int) and not flags & _WRITE_FLAGS


def install(candidate_file: str, enforce: bool = True, readable: tuple[str, ...] | None = None) -> list[str]:
    """Install the policy for `candidate_file`; returns the live list of refused events.

    With ``enforce=False`` the events are recorded but allowed (the caller disabled the
    `forbidden_construct` check, e.g. to test that the OS sandbox alone contains them).
    `readable`: the files the candidate may open read-only (default: the solution file and
    ``problem.py`` beside it, the job directory's layout).
    """
    candidate = os.path.realpath(candidate_file)
    if readable is None:
        readable = (candidate, os.path.join(os.path.dirname(candidate), PROBLEM_FILE))
    readable_paths = frozenset(os.path.realpath(path) for path in readable)
    harness_root = os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep  # the tritongym package
    harness_only = HARNESS_ONLY_ATTRIBUTES
    refused: list[str] = []
    busy = [False]
    # Everything the hook consults is bound here, now: module attributes and builtins can be
    # rebound by the candidate without any audit event, closure locals cannot be reached.
    frame_attributes, code_attributes = FRAME_ATTRIBUTES, CODE_ATTRIBUTES
    refused_events, refused_prefixes, forbidden_modules = REFUSED_EVENTS, REFUSED_PREFIXES, FORBIDDEN_MODULES
    introspection = INTROSPECTION_EVENTS
    _realpath, _str, _len, _any, _range, _isinstance, _getattr = (
        os.path.realpath, str, len, any, range, isinstance, getattr)
    _bytes, _permission_error, _int = bytes, PermissionError, int
    write_flags, _function_type = _WRITE_FLAGS, type(read_only)

    def _read_only(mode: object, flags: object) -> bool:  # read_only(), with everything bound here
        if _isinstance(mode, _str):
            return not _any(c in mode for c in "wax+")
        return _isinstance(flags, _int) and not flags & write_flags

    import_machinery = frozenset({"_find_and_load", "_find_and_load_unlocked", "_load_unlocked", "_load",
                                  "_gcd_import", "_handle_fromlist", "exec_module", "_call_with_frames_removed"})

    kinds: dict[str, str] = {}
    triton_dir = _package_root("triton") or "/nonexistent-triton/"
    here = _realpath(os.path.dirname(__file__)) + os.sep
    harness = frozenset(here + name for name in HARNESS_MODULES)
    stdlib = _stdlib_roots()
    site_markers = ("site-packages", "dist-packages")
    site_dirs = tuple(f"{os.sep}{marker}{os.sep}" for marker in site_markers)

    def kind_of(name: str) -> str:
        kind = kinds.get(name)
        if kind is None:
            path = _realpath(name) if not name.startswith("<") else name
            if path == candidate:
                kind = "candidate"
            elif path.startswith(triton_dir) or path in harness:
                kind = "acts-for-itself"
            elif path.startswith(stdlib) and not _any(marker in path for marker in site_markers):
                kind = "stdlib"
            else:
                kind = "library"
            kinds[name] = kind
        return kind

    def responsible_file(frame, event: str, full_walk: bool) -> str | None:  # noqa: ANN001
        """The candidate's file when the candidate asked for this event, else None.

        From the innermost frame outwards. The import machinery executing an import
        (``_find_and_load`` ...) acts for itself (the import was vetted by its own "import" event),
        as do Triton (compiling, caching) and the harness's evidence modules. The standard library
        is always looked through (``inspect.currentframe()``, ``traceback.walk_stack`` act for their
        caller). For events that *do* something (`full_walk`: files, processes, sockets, ctypes
        calls, heap walks) every other library is looked through too: numpy's ``DataSource`` opening
        ``/proc/self/mem`` acts for the candidate that called it. For introspection events (code and
        frame attributes, code from strings, imports) a library's own frame decides: torch reading a
        function's ``__code__`` or importing its own dependencies acts for itself.
        """
        while frame is not None:
            code = frame.f_code
            name = code.co_filename
            if name.startswith("<frozen"):
                if event != "import" and code.co_name in import_machinery:
                    return None
                frame = frame.f_back
                continue
            kind = kind_of(name)
            if kind == "candidate":
                return candidate
            if kind == "acts-for-itself" or (kind == "library" and not full_walk):
                return None
            frame = frame.f_back
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
        if event == "open" and _len(args) > 2 and _isinstance(args[0], (_str, _bytes)):
            path = args[0].decode(errors="replace") if _isinstance(args[0], _bytes) else args[0]
            if _read_only(args[1], args[2]):
                real = _realpath(path)
                if real in readable_paths:
                    return None  # the solution's own text, or the problem's: bound read-only, nothing new
                if real.endswith(".py") and (real.startswith(stdlib) or _any(m in real for m in site_dirs)):
                    return None  # a library's published source (inspect.getsource in torch.library)
        if event in refused_events or event.startswith(refused_prefixes):
            return _str(args[0])[:120] if args and event in ("open", "subprocess.Popen", "os.system") else ""
        return None

    def harness_function(target: object) -> bool:
        """Whether `target` (whose code or defaults are read) is the harness's: refuse unless known not."""
        if not _isinstance(target, _function_type):
            return True  # only functions are audited this way; anything else stays refused
        filename = target.__code__.co_filename  # audited too: the hook is busy, so it passes
        return not _isinstance(filename, _str) or filename.startswith("<") or _realpath(filename).startswith(
            harness_root)

    def hook(event: str, args: tuple, _getframe: Callable = sys._getframe,  # noqa: B008 - captured on purpose
             _candidate: str = candidate) -> None:
        if busy[0]:
            return
        detail = suspicious(event, args)
        if detail is None:
            return
        busy[0] = True
        try:
            if event == "object.__getattr__" and detail in harness_only and not harness_function(args[0]):
                return  # inspect.signature on the candidate's, torch's or Triton's functions
            if responsible_file(_getframe(1), event, event not in introspection) == _candidate:
                refuse(event, detail)
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    return refused
