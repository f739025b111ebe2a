"""The transaction rules (`broker.txn.coordinator.TxnCoordinator`, and per partition
`broker.log.producer_state.ProducerStateManager` with the aborted-transaction list) under a
simulated hostile world (`tests.sim.txn.harness`): producer retries, duplicated, reordered,
lost and late requests, failed coordinator appends, partition-leader and coordinator
crashes, zombie producers and producers stalling past their transaction timeout. The world
checks after every event that no batch is appended twice, that no fenced epoch writes
again, that every client transaction has one fate (the one its client was told) in every
partition, that no coordinator transaction is both committed and aborted, and that a
read_committed reader sees exactly the committed records below the LSO; `settle` then
requires every transaction to end and every LSO to reach its HW (liveness).

1. Seeded walks (`tests.sim.txn.walk`), their summed coverage asserted and printed at the
   end of the session (tests/sim/txn/conftest.py).
2. Hypothesis: walks from drawn seeds. Profiles (top-level conftest.py): "ci" (default)
   keeps this module to seconds; "long" (``--hypothesis-profile=long``) runs 10x more.
3. Mutants (`tests.sim.txn.mutants`): each broken rule must be caught within its seed
   budget; the same seeds pass unmutated. ``-m slow`` runs every mutant with a larger budget.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.scale import examples
from tests.sim.core_mutants import first_caught
from tests.sim.txn import mutants
from tests.sim.txn.harness import Violation
from tests.sim.txn.mutants import Mutant
from tests.sim.txn.walk import walk

WALK_SEEDS = range(examples(16))

COVERAGE: Counter[str] = Counter()
"""What this module's runs reached (printed by tests/sim/txn/conftest.py)."""

# ---------------------------------------------------------------- seeded walks


def test_seeded_walks_hold_every_property_and_reach_rich_histories() -> None:
    totals: Counter[str] = Counter()
    for seed in WALK_SEEDS:
        totals.update(walk(seed).stats)
    runs = len(WALK_SEEDS)
    COVERAGE.update({f"walk_{k}": v for k, v in totals.items()})
    COVERAGE["walk_runs"] += runs
    per_run = {k: round(v / runs, 2) for k, v in sorted(totals.items())}
    print(f"transactions simulation, {runs} walks, per run: {per_run}")
    # Measured on the 16 CI walks (per run): ~20 commits, ~11 aborts, ~20 fenced producer
    # instances, ~3.3 coordinator timeouts, ~3.2 coordinator moves (~1.9 deposed coordinators
    # acting on), ~3.5 leader crashes, ~11 duplicates caught, ~0.4 hanging-transaction attempts
    # refused by verification, ~0.6 stale-coordinator markers refused. The floors leave room
    # for changes of the walk.
    assert totals["commits"] >= 10 * runs, totals
    assert totals["aborts"] >= 4 * runs, totals
    assert totals["fenced_producers"] >= 5 * runs, totals
    assert totals["timeout_aborts"] >= runs, totals
    assert totals["coordinator_moves"] >= runs, totals
    assert totals["leader_crashes"] >= runs, totals
    assert totals["duplicates_caught"] >= 3 * runs, totals
    assert totals["zombies"] >= 5 * runs, totals
    assert totals["late_produces"] >= 3 * runs, totals
    assert totals["hanging_attempts"] >= 1, totals
    assert totals["appends_failed"] >= runs, totals
    assert totals["idempotent_acked"] >= 20 * runs, totals
    assert totals["zombie_coordinators"] >= runs // 2, totals
    assert totals["marker_TRANSACTION_COORDINATOR_FENCED"] >= 1, totals


@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
@settings(max_examples=examples(5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_walks_from_drawn_seeds_hold_every_property(seed: int) -> None:
    COVERAGE.update({f"drawn_{k}": v for k, v in walk(seed).stats.items() if k in SUMMARY})


SUMMARY = (
    "commits",
    "aborts",
    "fenced_producers",
    "timeout_aborts",
    "coordinator_moves",
    "zombie_coordinators",
    "hanging_attempts",
)

# ---------------------------------------------------------------- mutants


def first_violation(mutant: Mutant, seeds: range) -> tuple[int, str] | None:
    """(seed, message) of the first seeded walk the mutant fails, or None."""
    return first_caught(mutants.applied(mutant), walk, seeds, Violation)


# Measured: every mutant's first failing seed is 0-4 (CI_MUTANT_BUDGET leaves room).
CI_MUTANT_BUDGET = 8
SLOW_MUTANT_BUDGET = 200


def test_there_are_enough_mutants() -> None:
    assert len(mutants.MUTANTS) >= 8


@pytest.mark.pure_python  # plants mutants by editing the source (conftest.py)
@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_the_simulation_catches_a_broken_rule(mutant: Mutant) -> None:
    caught = first_violation(mutant, range(CI_MUTANT_BUDGET))
    assert caught is not None, f"{mutant.name} ({mutant.rule}): no violation in {CI_MUTANT_BUDGET} seeded walks"
    print(f"{mutant.name}: caught at seed {caught[0]}: {caught[1][:160]}")


def test_the_unmutated_code_passes_the_mutants_seeds() -> None:
    for seed in range(CI_MUTANT_BUDGET):
        walk(seed)


@pytest.mark.pure_python  # plants mutants by editing the source (conftest.py)
@pytest.mark.slow
@pytest.mark.timeout(0)
@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_every_mutant_is_caught(mutant: Mutant) -> None:
    caught = first_violation(mutant, range(SLOW_MUTANT_BUDGET))
    assert caught is not None, f"{mutant.name}: not caught in {SLOW_MUTANT_BUDGET} seeded walks"
    print(f"{mutant.name}: caught at seed {caught[0]}: {caught[1][:160]}")


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_the_unmutated_code_passes_the_slow_mutant_seeds() -> None:
    for seed in range(SLOW_MUTANT_BUDGET):
        walk(seed)
