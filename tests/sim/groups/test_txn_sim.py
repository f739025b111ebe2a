"""Transactional offset commits under the seeded simulation of `tests.sim.groups.txn_world`:
producers commit offsets in transactions that commit or abort, a plain committer commits
beside them, an admin deletes the offsets or the group, coordinators crash and move,
appends (tombstones too) are refused and replication stalls; every OffsetFetch and every
load is checked against the log's oracle (a committed transaction's offsets are visible
after any move, an aborted one's never, pending ones never). Single-rule mutants
(`tests.sim.groups.mutants.TXN_MUTANTS`) must each be caught within a seed budget."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.scale import examples
from tests.sim.core_mutants import Mutant, first_caught
from tests.sim.groups import mutants
from tests.sim.groups.harness import Violation
from tests.sim.groups.txn_world import txn_walk

SEEDS = range(examples(150))
# Measured: each mutant is first caught at seed 0-39, except the one that needs a marker to
# commit while a tombstone of its offset is refused (seed 513): it runs only in the slow test.
MUTANT_BUDGET = 80
SLOW_ONLY = {"completion_ignores_outstanding_tombstones"}
SLOW_MUTANT_BUDGET = 1_500
CI_MUTANTS = tuple(m for m in mutants.TXN_MUTANTS if m.name not in SLOW_ONLY)


def test_seeded_transactional_walks_hold_every_property() -> None:
    totals: Counter[str] = Counter()
    for seed in SEEDS:
        totals.update(txn_walk(seed).stats)
    runs = len(SEEDS)
    per_run = {k: round(v / runs, 2) for k, v in sorted(totals.items())}
    print(f"txn offsets simulation, {runs} walks, per run: {per_run}")
    # Floors (measured per run on the 150 CI walks: ~2.5 transactions committed, ~1.8 aborted,
    # ~4.8 fetches checked, ~1.6 crashes and moves each, ~1 admin delete), with room.
    assert totals["txns_committed"] >= runs, totals
    assert totals["txns_aborted"] >= runs // 2, totals
    assert totals["fetches_checked"] >= 3 * runs, totals
    assert totals["coordinator_crashes"] >= runs, totals
    assert totals["coordinator_controlled_moves"] >= runs // 2, totals
    assert totals["uncommitted_batches_lost"] >= 1, totals
    assert totals["appends_refused"] >= runs // 4, totals
    assert totals["loads"] >= 2 * runs, totals
    assert totals["admin_delete_offsets"] + totals["admin_delete_group"] >= runs // 2, totals


def first_violation(mutant: Mutant, seeds: range) -> tuple[int, str] | None:
    """(seed, message) of the first seeded walk the mutant fails, or None."""
    return first_caught(mutants.applied(mutant), txn_walk, seeds, Violation)


@pytest.mark.pure_python  # plants mutants by editing the source (conftest.py)
@pytest.mark.parametrize("mutant", CI_MUTANTS, ids=lambda m: m.name)
def test_the_transactional_simulation_catches_a_broken_rule(mutant: Mutant) -> None:
    caught = first_violation(mutant, range(MUTANT_BUDGET))
    assert caught is not None, f"{mutant.name} ({mutant.rule}): no violation in {MUTANT_BUDGET} seeded walks"
    print(f"{mutant.name}: caught at seed {caught[0]}: {caught[1][:160]}")


def test_the_unmutated_coordinator_passes_the_mutants_seeds() -> None:
    for seed in range(MUTANT_BUDGET):
        txn_walk(seed)


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_many_more_transactional_walks_hold_every_property() -> None:
    for seed in range(150, 150 + examples(2_000)):
        txn_walk(seed)


@pytest.mark.pure_python  # plants mutants by editing the source (conftest.py)
@pytest.mark.slow
@pytest.mark.timeout(0)
@pytest.mark.parametrize("mutant", mutants.TXN_MUTANTS, ids=lambda m: m.name)
def test_every_transactional_mutant_is_caught(mutant: Mutant) -> None:
    caught = first_violation(mutant, range(SLOW_MUTANT_BUDGET))
    assert caught is not None, f"{mutant.name}: not caught in {SLOW_MUTANT_BUDGET} seeded walks"
    print(f"{mutant.name}: caught at seed {caught[0]}: {caught[1][:160]}")


@pytest.mark.pure_python  # plants mutants by editing the source (conftest.py)
def test_every_group_mutant_still_applies_to_the_source() -> None:
    """A mutant whose `old` text is gone from its method would only fail in the slow runs."""
    for mutant in mutants.MUTANTS + mutants.TXN_MUTANTS:
        mutant.build()
