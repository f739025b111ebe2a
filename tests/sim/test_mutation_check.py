"""The quorum simulation catches every deliberate fault of `tests.sim.core_mutants` (slow).

Runs `tests/sim/mutation_check.py`: one pytest process per mutant over the simulation's
CI profile. Select with ``-m slow``."""

from __future__ import annotations

import pytest

from tests.sim import mutation_check


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_simulation_catches_every_core_mutant() -> None:
    results = mutation_check.run_all()
    report = mutation_check.table(results)
    print("\n" + report)
    missed = [r.mutant for r in results if not r.caught]
    assert not missed, f"the simulation missed {missed}\n{report}"


def test_every_mutant_still_applies() -> None:
    """Each mutant's edit still matches the core's source (a refactor would silently
    turn it into a no-op otherwise)."""
    from tests.sim.core_mutants import MUTANTS

    for mutant in MUTANTS:
        assert callable(mutant.build())
