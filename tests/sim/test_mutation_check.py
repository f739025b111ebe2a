"""The quorum simulation catches every deliberate fault of `tests.sim.core_mutants` (slow).

Runs `tests/sim/mutation_check.py`: one pytest process per mutant over the simulation's
CI profile. Select with ``-m slow``."""

from __future__ import annotations

import pytest

from tests.sim import mutation_check
from tests.sim.raft_mutant_subset import SUBSET


@pytest.mark.pure_python  # plants mutants in the Raft core (conftest.py)
@pytest.mark.slow
@pytest.mark.timeout(0)
def test_simulation_catches_every_core_mutant() -> None:
    results = mutation_check.run_all()
    report = mutation_check.table(results)
    print("\n" + report)
    missed = [r.mutant for r in results if not r.caught]
    assert not missed, f"the simulation missed {missed}\n{report}"


@pytest.mark.pure_python  # plants mutants in the Raft core (conftest.py)
def test_every_mutant_still_applies() -> None:
    """Each mutant's edit still matches the core's source (a refactor would silently
    turn it into a no-op otherwise)."""
    from tests.sim.core_mutants import MUTANTS

    for mutant in MUTANTS:
        assert callable(mutant.build())


@pytest.mark.pure_python  # plants mutants in the Raft core (conftest.py)
@pytest.mark.parametrize("name", sorted(SUBSET))
def test_fast_subset_of_core_mutants_is_caught(name: str) -> None:
    """The default suite's share of the mutation check: each mutant of the subset fails its
    directed history within its seeds, and the unmutated core passes the same seeds."""
    from tests.sim import core_mutants
    from tests.sim.raft_mutant_subset import HISTORIES, caught

    history, seeds = SUBSET[name]
    with core_mutants.applied(name):
        result = caught(HISTORIES[history], range(seeds))
    assert result is not None, f"{name}: {history} passed {seeds} seeds"
    assert caught(HISTORIES[history], range(seeds)) is None, f"unmutated core fails {history}"
