"""Quorum simulation: a coverage line at the end of the session, and mutant runs.

With PYKRAFT_SIM_MUTANT=<name> (see `tests.sim.core_mutants`), the named fault is patched
into the Raft core for the whole session and Hypothesis does not shrink (the first
failure is all `tests/sim/mutation_check.py` needs).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import Phase, settings

from tests.sim import core_mutants
from tests.sim.harness import COVERAGE

_MUTANT = os.environ.get(core_mutants.ENV)
if _MUTANT:
    core_mutants.apply_forever(_MUTANT)
    settings.register_profile("mutant", settings.get_profile("ci"), phases=[Phase.explicit, Phase.generate])
    settings.load_profile("mutant")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if COVERAGE:
        terminalreporter.write_sep("-", "quorum simulation coverage (all clusters of this session)")
        terminalreporter.write_line(", ".join(f"{k}={v}" for k, v in sorted(COVERAGE.items())))
    if _MUTANT:
        terminalreporter.write_line(f"mutant applied: {_MUTANT}")
