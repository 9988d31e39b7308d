"""Prints the adversarial corpus's observed verdicts at the end of a run (``-rA`` not needed)."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from .test_corpus import OBSERVED

    if not OBSERVED:
        return
    write = terminalreporter.write_line
    terminalreporter.section("adversarial corpus: observed verdicts")
    write(f"{'case':48} {'status':20} {'reward':>6} {'time':>6}  violations (expected)")
    for case_id, row in OBSERVED.items():
        gap = "  [known gap]" if row["known_gap"] else ""
        write(f"{case_id:48} {row['status']:20} {row['reward']:6.2f} {row['seconds']:5.1f}s  "
              f"{','.join(row['violations']) or '-'} ({row['expected']}){gap}")
    total = sum(row["seconds"] for row in OBSERVED.values())
    write(f"{len(OBSERVED)} evaluations, {total:.0f} s of evaluation time")
