"""Transactions simulation: the coverage totals of the session, printed at its end."""

from __future__ import annotations

import pytest

from tests.sim.txn.test_txn_sim import COVERAGE


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if COVERAGE:
        terminalreporter.write_sep("-", "transactions simulation coverage (this session's runs)")
        terminalreporter.write_line(", ".join(f"{k}={v}" for k, v in sorted(COVERAGE.items())))
