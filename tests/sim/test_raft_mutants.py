"""The quorum simulation has teeth: each deliberately broken rule of the Raft core
(tests/sim/raft_mutants.py) makes the CI profile of the simulation fail. Slow (a fresh
pytest run of the simulation per mutant): ``pytest -m slow tests/sim/test_raft_mutants.py``."""

from __future__ import annotations

import pytest

from tests.sim.raft_mutants import MUTANTS, mutated_class, run, table


def test_every_mutant_applies_to_the_current_source() -> None:
    """Each mutant's edit still matches the core's source (else it would test nothing)."""
    for mutant in MUTANTS:
        assert isinstance(mutated_class(mutant), type)


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_simulation_catches_every_mutant() -> None:
    verdicts = [run(mutant) for mutant in MUTANTS]
    print(table(verdicts))
    missed = [v.mutant.name for v in verdicts if not v.caught]
    assert not missed, f"the simulation did not catch: {missed}\n{table(verdicts)}"
