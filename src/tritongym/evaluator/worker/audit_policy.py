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
* code from strings: ``compile`` and ``exec`` of code that does not come from a file, except the
  standard library generating code from names it has validated (`standard_library_codegen`):
  ``@dataclass`` building ``__init__``/``__repr__``/``__eq__``, and ``namedtuple`` (``typing.
  NamedTuple`` too) building ``__new__``. The candidate's own ``exec``/``compile``/``eval``, or
  text reaching those generators through anything the candidate can change, stays refused;
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


def _code_objects(functions: object) -> dict[int, object]:
    """Every code object of `functions` (and of the functions nested in them), by id."""
    found: dict[int, object] = {}
    pending = [getattr(f, "__code__", None) for f in functions]
    while pending:
        code = pending.pop()
        if code is None or id(code) in found or not hasattr(code, "co_consts"):
            continue
        found[id(code)] = code
        pending.extend(c for c in code.co_consts if hasattr(c, "co_consts"))
    return found


def standard_library_codegen() -> tuple[Callable[[str, tuple, object], bool], object]:
    """A judge of ``compile``/``exec`` events: whether the standard library generates this code for itself.

    ``@dataclass`` and ``namedtuple`` build methods by compiling text (CPython's own design: a
    generated ``__init__`` is as fast as a hand-written one); the text is made of the field names
    the class declares, so honest code that declares a dataclass would otherwise be blamed for
    "compile <string>". What decides is what the text can contain, not who called:

    * ``namedtuple``: the code ``eval``'d at its one exec site may use no global or attribute
      name other than ``_tuple_new`` (checked on the code object itself, nested code included),
      so however its field names were made, the code can only build a tuple.
    * ``@dataclass``: the text is generated by dataclasses' own functions from the class's field
      names. Allowed only when, at the exec site (``_create_fn``; 3.13's ``add_fns_to_class``),
      every frame out to ``_process_class`` is dataclasses' own code (no candidate frame between,
      which would mean the candidate reached into the generator), dataclasses' globals, the
      builtins and the ``Field`` class are the objects they were when the policy was installed (a
      rebound ``repr`` or ``_init_fn`` would write other text), and every field is an exact
      ``Field`` whose name is an exact ``str`` identifier that is not a keyword, equal to its key
      (the only text a class contributes: ``__annotations__ = {"x=__import__('os')...": int}``
      would be code). Python >= 3.13 builds the text earlier and sets class attributes before the
      exec: there the class's metaclass must be ``type`` or ``abc.ABCMeta``, so that no candidate
      code (a metaclass ``__setattr__``) runs in between to rename the fields back.

    * ``sys._getframe`` at the three places that read the caller's module name from it
      (``namedtuple``, ``typing``'s ``_caller``, ``Enum``'s functional API): the frame never
      leaves those functions; only ``f_globals["__name__"]``, a string, does.

    A compile event alone runs nothing; it is allowed at those two sites, and the exec decides.
    Returns the judge and namedtuple's code object (the one place that then sets ``__defaults__``
    on what it generated).
    """
    import abc
    import builtins
    import collections
    import dataclasses
    import enum
    import keyword
    import typing

    namedtuple_code = collections.namedtuple.__code__
    module_name_readers = {id(code): code for code in (
        namedtuple_code, getattr(getattr(typing, "_caller", None), "__code__", None),
        getattr(vars(getattr(enum, "EnumType", type)).get("_create_"), "__code__", None)) if code is not None}
    dataclass_functions = [v for v in vars(dataclasses).values()
                           if getattr(v, "__module__", None) == "dataclasses" and hasattr(v, "__code__")]
    for value in vars(dataclasses).values():
        if isinstance(value, type) and value.__module__ == "dataclasses":
            dataclass_functions.extend(v for v in vars(value).values() if hasattr(v, "__code__"))
    dataclass_codes = _code_objects(dataclass_functions)
    builder = getattr(dataclasses, "_FuncBuilder", None)
    exec_sites = {id(code): code for code in (
        getattr(getattr(dataclasses, "_create_fn", None), "__code__", None),
        getattr(getattr(builder, "add_fns_to_class", None), "__code__", None)) if code is not None}
    process_class = dataclasses._process_class.__code__
    deferred_site = getattr(getattr(builder, "add_fns_to_class", None), "__code__", None)
    plain_metaclasses = (type, object, abc.ABCMeta)
    field_type = dataclasses.Field
    module_snapshot = dict(vars(dataclasses))
    builtins_snapshot = dict(vars(builtins))
    field_snapshot = dict(vars(field_type))
    field_name = field_snapshot["name"]
    module_dict, builtins_dict, field_dict = vars(dataclasses), vars(builtins), vars(field_type)
    is_identifier, is_keyword, _type, _str, _dict, _id = str.isidentifier, keyword.iskeyword, type, str, dict, id

    def unchanged(now: object, snapshot: dict) -> bool:
        return all(now.get(name) is value for name, value in snapshot.items())

    def only_names(code: object, allowed: frozenset) -> bool:
        pending = [code]
        while pending:
            current = pending.pop()
            if not set(current.co_names) <= allowed:
                return False
            pending.extend(c for c in current.co_consts if _type(c) is _type(current))
        return True

    def valid_fields(fields: object) -> bool:
        if _type(fields) is not _dict:
            return False
        for key, value in fields.items():
            if _type(key) is not _str or not is_identifier(key) or is_keyword(key) or _type(value) is not field_type:
                return False
            name = field_name.__get__(value, field_type)
            if _type(name) is not _str or name != key:
                return False
        return True

    def generated(event: str, args: tuple, frame: object) -> bool:
        code = frame.f_code
        if event == "sys._getframe":
            return module_name_readers.get(_id(code)) is code
        if code is namedtuple_code:
            if event == "compile":
                return True
            executed = args[0] if args else None
            return _type(executed) is _type(code) and only_names(executed, frozenset({"_tuple_new"}))
        if exec_sites.get(_id(code)) is not code:
            return False
        if event == "compile":
            return True
        process = None
        current = frame
        while current is not None and dataclass_codes.get(_id(current.f_code)) is current.f_code:
            if current.f_code is process_class:
                process = current
                break
            current = current.f_back
        if process is None:
            return False
        if not (unchanged(module_dict, module_snapshot) and unchanged(builtins_dict, builtins_snapshot)
                and len(field_dict) == len(field_snapshot) and unchanged(field_dict, field_snapshot)):
            return False
        if code is deferred_site:
            metaclass = _type(process.f_locals.get("cls"))
            if not all(klass in plain_metaclasses for klass in metaclass.__mro__):
                return False
        return valid_fields(process.f_locals.get("fields"))

    return generated, namedtuple_code


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
    _bytes, _permission_error, _int, _id, _type = bytes, PermissionError, int, id, type
    write_flags, _function_type = _WRITE_FLAGS, type(read_only)

    def _read_only(mode: object, flags: object) -> bool:  # read_only(), with everything bound here
        if _isinstance(mode, _str):
            return not _any(c in mode for c in "wax+")
        return _isinstance(flags, _int) and not flags & write_flags

    # The code objects of the candidate's own dataclasses and namedtuples, by id (held): their
    # methods have no file, and `inspect.signature` on such a class (dataclasses itself does it
    # for the docstring) reads the candidate's generated code, not the harness's. Code generated
    # for anyone else (a library, the harness) is not recorded and stays the harness's.
    generated_codes: dict[int, object] = {}
    stdlib_generated, namedtuple_code = standard_library_codegen()

    def remember(code: object) -> None:
        pending = [code]
        while pending:
            current = pending.pop()
            generated_codes[_id(current)] = current
            pending.extend(c for c in current.co_consts if _type(c) is _type(current))

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
        if event == "compile":
            # Compiling is always of text (or an AST), whatever filename it is given: the import
            # machinery compiling a module's file acts for itself (`responsible_file`), a
            # candidate that passes `compile` the name of a real file is still compiling text.
            filename = args[1] if _len(args) > 1 else None
            if _isinstance(filename, _bytes):
                filename = filename.decode(errors="replace")
            return _str(filename)
        if event == "exec":
            # Executing code that came from a real file (a module's, a function's) runs nothing new.
            filename = _getattr(args[0], "co_filename", None) if args else None
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
        code = target.__code__  # audited too: the hook is busy, so it passes
        if generated_codes.get(_id(code)) is code:
            return False  # a dataclass's or namedtuple's generated method
        filename = code.co_filename
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
            if event in ("exec", "compile", "sys._getframe") and stdlib_generated(event, args, _getframe(1)):
                # @dataclass / namedtuple generating methods from validated names, or a module name
                if event == "exec" and responsible_file(_getframe(1), event, False) == _candidate:
                    remember(args[0])
                return
            if event == "object.__setattr__" and detail in harness_only and _getframe(1).f_code is namedtuple_code:
                return  # namedtuple setting the defaults of the __new__ it just generated
            if responsible_file(_getframe(1), event, event not in introspection) == _candidate:
                refuse(event, detail)
        finally:
            busy[0] = False

    sys.addaudithook(hook)
    return refused
