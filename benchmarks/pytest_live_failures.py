"""pytest plugin for device runs: print a failed test's report the moment it ends.

pytest prints failure details at the end of the session; a device run bounded by ``timeout`` is
often cut before then and loses them. Load with ``-p pytest_live_failures`` (benchmarks/ on
PYTHONPATH); benchmarks/device_check.sh does.
"""

from __future__ import annotations

#: The tail of a report kept (the assertion and the frames nearest to it).
TAIL_CHARS = 4000

_config = None


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's Config
    global _config
    _config = config


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001 - pytest's TestReport
    # Looked up here: the terminal reporter registers itself after this plugin's configure.
    terminal = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    if not report.failed or terminal is None:
        return
    terminal.write_line(f"\n--- {report.nodeid} failed in {report.when}:")
    terminal.write_line(report.longreprtext[-TAIL_CHARS:])
    terminal.write_line(f"--- end {report.nodeid}", flush=True)
