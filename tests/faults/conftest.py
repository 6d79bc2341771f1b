"""Print the fault table (fault, requests, replies, duplicates, lost, the longest stall after
the fault, and the time from the fault to the last reply) at the end."""

from __future__ import annotations

import json
import time

import pytest

from tests.faults.harness import REPORT

_STARTED = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REPORT.exists():
        return
    rows = [json.loads(line) for line in REPORT.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r["at"] >= _STARTED]
    if not rows:
        return
    write = terminalreporter.write_line
    write("")
    write("fault injection: every request_id counted on its reply topic")
    head = f"{'fault':<34}{'requests':>9}{'replies':>9}{'dups':>6}{'lost':>6}"
    write(f"{head}{'stall s':>9}{'all answered s':>16}")
    for r in rows:
        write(
            f"{r['fault']:<34}{r['requests']:>9}{r['replies']:>9}{r['duplicates']:>6}"
            f"{r['lost']:>6}{r['recovery_s']:>9.2f}{r.get('all_answered_s', float('nan')):>16.2f}"
            f"  {r['errors'] or ''}"
        )
