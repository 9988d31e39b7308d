"""The run-time policy: what candidate code may and may not do inside the worker.

Each scenario runs in its own process that installs the policy for a module file, then imports
that file (as the worker imports the candidate) and reports what happened. The processes are forked
from one driver per module that has torch loaded, as a pool's fork server forks each candidate
worker (a fresh interpreter per scenario cost 30 torch imports, 95 s of the full tier); the policy
is installed after the fork, in the scenario's process only.
"""

from __future__ import annotations

import atexit
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The candidate worker has torch (and with it tempfile's cached temp folder) loaded before it
# installs the policy; the driver does the same, once, and forks a process per scenario. The
# scenario's report and its stderr go to files opened before the policy is installed.
DRIVER = textwrap.dedent('''
    import importlib.util, json, os, sys
    import torch
    from tritongym.evaluator.worker import audit_policy

    def scenario(path, enforce, report_fd):
        refused = audit_policy.install(path, enforce=enforce)
        spec = importlib.util.spec_from_file_location("candidate", path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            outcome = "ran"
        except PermissionError as exc:
            outcome = "refused: " + str(exc)
        # the harness (not the candidate) may still do what the candidate may not
        import gc
        gc.get_objects()
        sys._getframe(0)
        os.write(report_fd, json.dumps({"outcome": outcome, "refused": refused,
                                        "result": getattr(module, "RESULT", None)}, default=str).encode())

    for line in sys.stdin:
        path, enforce, report, errors = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                report_fd = os.open(report, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.dup2(os.open(errors, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
                scenario(path, enforce, report_fd)
                code = 0
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)
''')


_DRIVER: list[subprocess.Popen] = []


def _driver() -> subprocess.Popen:
    """The test process's forking driver (this module's and test_audit_policy_codegen.py's), started
    on first use, again if it died, and ended at exit."""
    if not _DRIVER or _DRIVER[0].poll() is not None:
        process = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        _DRIVER[:] = [process]
        atexit.register(_close, process)
    return _DRIVER[0]


def _close(process: subprocess.Popen) -> None:
    process.stdin.close()
    process.wait(timeout=60)
    process.stdout.close()


def run(tmp_path: Path, candidate: str, enforce: bool = True) -> dict:
    path = tmp_path / "candidate.py"
    path.write_text(textwrap.dedent(candidate))
    report, errors = tmp_path / "report.json", tmp_path / "stderr.txt"
    process = _driver()
    process.stdin.write(json.dumps([str(path), enforce, str(report), str(errors)]) + "\n")
    process.stdin.flush()
    exit_code = process.stdout.readline().strip()
    assert exit_code == "0", (exit_code, errors.read_text()[-2000:] if errors.exists() else "no stderr file")
    return json.loads(report.read_text())


def test_honest_imports_and_torch_calls_are_allowed(tmp_path):
    result = run(tmp_path, """
        import math
        import torch
        import triton
        import triton.language as tl
        from triton.language.extra import libdevice   # not loaded yet: its file is opened and compiled
        RESULT = float(torch.nn.functional.gelu(torch.ones(3)).sum()) + math.sqrt(4.0)
    """)
    assert result["outcome"] == "ran" and result["refused"] == []
    assert result["result"] == pytest.approx(3 * 0.8413447 + 2.0, rel=1e-5)


@pytest.mark.parametrize(("code", "event"), [
    ("import gc\nRESULT = len(gc.get_objects())", "gc.get_objects"),
    ("RESULT = len(len.__self__.__import__('g' + 'c').get_referrers(len))", "gc.get_referrers"),
    ("import sys\nRESULT = sys._getframe(0).f_back", "sys._getframe"),
    ("import inspect\nRESULT = inspect.currentframe()", "sys._getframe"),
    ("def gen():\n    yield 1\nRESULT = str(gen().gi_frame)", "object.__getattr__ gi_frame"),
    ("exec('RESULT = 1')", "compile <string>"),
    ("def f():\n    pass\ndef g():\n    return 1\nf.__code__ = g.__code__", "object.__setattr__ __code__"),
    ("def f(a=1):\n    return a\nf.__defaults__ = (2,)", "object.__setattr__ __defaults__"),
    # The harness keeps captured references in default arguments: its functions' defaults and
    # code stay out of reach, however they are read (inspect.signature reads both).
    ("from tritongym.evaluator.worker import audit_policy as p\nRESULT = p.install.__defaults__",
     "object.__getattr__ __defaults__"),
    ("import inspect\nfrom tritongym.evaluator.worker import audit_policy as p\n"
     "RESULT = str(inspect.signature(p.install))",
     "object.__getattr__ __code__"),
    ("import inspect\nRESULT = inspect.stack()", "sys._getframe"),
    ("import inspect, sys\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    RESULT = inspect.trace()",
     "object.__getattr__ tb_frame"),
    # Files: the job's own files may be read, not written; nothing else may be opened.
    ("RESULT = open(__file__, 'a')", "open "),
    ("import os\nRESULT = os.open(__file__, os.O_RDWR)", "open "),
    ("import torch, os\nRESULT = __loader__.get_data(os.path.join(os.path.dirname(torch.__file__), "
     "'version.txt'))", "open "),
    # A library called by the candidate acts for it (the red team's numpy DataSource opened
    # /proc/self/mem this way): the policy looks through it.
    ("import numpy\nRESULT = numpy.lib.npyio.DataSource(None).open('/etc/hostname').read()",
     "open /etc/hostname"),
    ("RESULT = __loader__.get_data('/etc/hostname')", "open /etc/hostname"),
    ("import os\nos.kill(os.getpid(), 0)", "os.kill"),
    ("import os\nRESULT = os.fork()", "os.fork"),
    ("import sys\nsys.settrace(None)", "sys.settrace"),
    ("import ctypes\nRESULT = ctypes.string_at(id(1), 8)", "ctypes."),
    ("import pty", "import pty"),  # a forbidden module that is not loaded yet
])
def test_the_forbidden_vocabulary_is_refused_however_it_is_spelled(tmp_path, code, event):
    result = run(tmp_path, code)
    assert result["outcome"].startswith("refused"), result
    assert any(entry.startswith(event) for entry in result["refused"]), result["refused"]


def test_honest_introspection_and_reads_of_the_jobs_own_files_are_allowed(tmp_path):
    """inspect.signature on the candidate's, Triton's and torch's functions; warnings in forward
    (the warning machinery reads the solution's source line); read-only opens of the solution, of
    problem.py beside it and of a library's source (torch.library reads its own to find kernels)."""
    (tmp_path / "problem.py").write_text("X = 1\n")
    result = run(tmp_path, """
        import inspect, linecache, os, warnings
        import torch, triton
        def mine(a, b=2, *, c=3):
            return a
        found = [str(inspect.signature(mine)), "restore_value" in inspect.signature(triton.autotune).parameters,
                 "input" in inspect.signature(torch.nn.functional.relu).parameters]
        warnings.simplefilter("always")
        warnings.warn("an old API path")
        found.append(__loader__.get_data(__file__).lstrip().startswith(b"import inspect"))
        found.append(linecache.getline(os.path.join(os.path.dirname(__file__), "problem.py"), 1))
        found.append(len(inspect.getsource(torch.library.custom_op)) > 0)
        RESULT = found
    """)
    assert result["outcome"] == "ran" and result["refused"] == [], result
    assert result["result"][0] == "(a, b=2, *, c=3)"
    assert result["result"][1:] == [True, True, True, "X = 1\n", True]


def test_without_enforcement_attempts_are_recorded_but_allowed(tmp_path):
    result = run(tmp_path, "import gc\nRESULT = len(gc.get_objects()) > 0", enforce=False)
    assert result["outcome"] == "ran" and result["result"] is True
    assert result["refused"] == ["gc.get_objects"]


def test_rebinding_the_policys_module_globals_changes_nothing(tmp_path):
    result = run(tmp_path, """
        import sys
        policy = sys.modules["tritongym.evaluator.worker.audit_policy"]
        policy.FORBIDDEN_MODULES = frozenset()          # module attribute writes are not audited...
        policy.REFUSED_EVENTS = frozenset()
        import gc
        gc.get_objects()                                 # ...but the hook bound its own copies
    """)
    assert result["outcome"].startswith("refused")
