"""Partition replication (`broker.replica.state`) under a simulated hostile world.

1. `ReplicationSafety`: a Hypothesis stateful test over `tests.sim.replication.harness.World`
   (3 brokers, 3 partitions sharing one fetcher per follower/leader pair, min.insync.replicas
   1 or 2, unclean election on or off): rules produce (acks 0/1/-1, batches of 1-3 records),
   consume, run time, crash, lose power, restart, partition a pair, isolate a broker, heal,
   set message loss/duplication/far delays, replay old messages, controlled shutdown,
   preferred election, controller failover, DeleteRecords and retention. The world checks the
   replication properties after every delivered message and every tick; teardown heals,
   restarts every broker, and checks that acked records survived and the replicas converged.
2. Seeded random walks (the same world, driven by `random.Random(seed)`) whose summed coverage
   counters prove the runs reach the interesting histories (printed at the end).
3. Mutants (`tests.sim.replication.mutants`): deliberately broken rules that the same walks
   must catch, each within a known number of seeds; the same seeds pass unmutated.

Profiles (top-level conftest.py): "ci" (default) keeps this file around a minute on this
machine; "long" (``--hypothesis-profile=long`` or HYPOTHESIS_PROFILE=long) runs far more.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.replica.state import PartitionState
from tests.scale import long_profile
from tests.sim.core_mutants import first_caught
from tests.sim.replication import mutants
from tests.sim.replication.harness import SimConfig, StateFactory, Violation, World

LONG = long_profile()
STATEFUL_EXAMPLES = 1500 if LONG else 150
STATEFUL_STEPS = 80 if LONG else 40
WALK_SEEDS = range(400 if LONG else 20)
WALK_ACTIONS = 120

BROKERS = st.integers(min_value=1, max_value=3)
PARTITIONS = st.integers(min_value=0, max_value=2)
COVERAGE: Counter[str] = Counter()
"""What this module's runs reached (printed by tests/sim/replication/conftest.py)."""


class ReplicationSafety(RuleBasedStateMachine):
    world: World

    @initialize(min_isr=st.sampled_from((1, 2)), unclean=st.booleans(), seed=st.integers(0, 2**16))
    def start(self, min_isr: int, unclean: bool, seed: int) -> None:
        self.world = World(SimConfig(min_isr=min_isr, unclean=unclean), seed)

    @rule(ms=st.sampled_from((10, 30, 100, 300, 700, 1500, 5000)))
    def run(self, ms: int) -> None:
        self.world.run(ms)

    @rule(
        acks=st.sampled_from((-1, -1, 1, 0)),
        pick=st.integers(0, 2),
        partition=PARTITIONS,
        count=st.integers(1, 4),
        records=st.integers(1, 3),
    )
    def produce(self, acks: int, pick: int, partition: int, count: int, records: int) -> None:
        for _ in range(count):
            self.world.produce(acks, pick, partition, records)

    @rule(pick=st.integers(0, 2), partition=PARTITIONS)
    def consume(self, pick: int, partition: int) -> None:
        self.world.consume(pick, partition)

    @rule(broker=BROKERS)
    def crash(self, broker: int) -> None:
        self.world.crash(broker)

    @rule(broker=BROKERS)
    def power_loss(self, broker: int) -> None:
        self.world.power_loss(broker)

    @rule(broker=BROKERS)
    def restart(self, broker: int) -> None:
        self.world.restart(broker)

    @rule(a=st.integers(0, 3), b=BROKERS)
    def partition(self, a: int, b: int) -> None:
        self.world.partition(a, b)

    @rule(broker=BROKERS)
    def isolate(self, broker: int) -> None:
        self.world.isolate(broker)

    @precondition(lambda self: bool(self.world.blocked))
    @rule()
    def heal(self) -> None:
        self.world.heal()

    @rule(
        loss=st.sampled_from((0.0, 0.05, 0.2, 0.5)),
        duplicate=st.sampled_from((0.0, 0.0, 0.1)),
        long_delay=st.sampled_from((0.0, 0.0, 0.05)),
    )
    def set_network(self, loss: float, duplicate: float, long_delay: float) -> None:
        self.world.set_network(loss, duplicate, long_delay)

    @rule(count=st.integers(1, 30))
    def replay(self, count: int) -> None:
        self.world.replay(count)

    @rule(broker=BROKERS)
    def controlled_shutdown(self, broker: int) -> None:
        self.world.controlled_shutdown(broker)

    @rule(wait_ms=st.sampled_from((0, 1500, 4000)))
    def preferred_election(self, wait_ms: int) -> None:
        # (a preferred replica that lost its leadership needs time to come back into the ISR)
        self.world.run(wait_ms)
        self.world.preferred_election()

    @rule()
    def controller_failover(self) -> None:
        self.world.controller_failover()

    @rule(partition=PARTITIONS, fraction=st.floats(0.0, 1.0), whole_batches=st.booleans())
    def delete(self, partition: int, fraction: float, whole_batches: bool) -> None:
        if whole_batches:
            self.world.retention(partition, fraction)
        else:
            self.world.delete_records(partition, fraction)

    @invariant()
    def properties(self) -> None:
        self.world.check()

    def teardown(self) -> None:
        if hasattr(self, "world"):
            self.world.settle()
            self.world.check_converged()
            COVERAGE.update({f"stateful_{k}": v for k, v in self.world.stats.items() if k in STATEFUL_KINDS})


STATEFUL_KINDS = ("controlled_shutdowns", "preferred_elections", "controller_failovers", "power_losses_with_loss")

ReplicationSafety.TestCase.settings = settings(
    settings(),
    max_examples=STATEFUL_EXAMPLES,
    stateful_step_count=STATEFUL_STEPS,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestReplicationSafety = ReplicationSafety.TestCase


# ---------------------------------------------------------------- seeded walks


def walk(seed: int, config: SimConfig, actions: int = WALK_ACTIONS) -> World:
    """A random history of ``actions`` actions, then settle and check convergence."""
    w = World(config, seed)
    r = random.Random(seed * 7919 + 1)
    n, parts = config.brokers, config.partitions
    for _ in range(actions):
        x = r.random()
        if x < 0.30:
            w.produce(r.choice((-1, -1, 1, 0)), r.randrange(n), r.randrange(parts), r.choice((1, 1, 2, 3)))
        elif x < 0.38:
            w.consume(r.randrange(n), r.randrange(parts))
        elif x < 0.43:
            w.crash(r.randint(1, n))
        elif x < 0.45:
            w.power_loss(r.randint(1, n))
        elif x < 0.52:
            w.restart(r.randint(1, n))
        elif x < 0.56:
            w.partition(r.randint(0, n), r.randint(1, n))
        elif x < 0.58:
            w.isolate(r.randint(1, n))
        elif x < 0.62:
            w.heal()
        elif x < 0.65:
            w.set_network(r.choice((0.0, 0.05, 0.2)), r.choice((0.0, 0.05)), r.choice((0.0, 0.02)))
        elif x < 0.67:
            w.controlled_shutdown(r.randint(1, n))
        elif x < 0.69:
            w.preferred_election()
        elif x < 0.70:
            w.controller_failover()
        elif x < 0.72:
            w.replay(r.randint(1, 20))
        elif x < 0.74:
            w.delete_records(r.randrange(parts), r.random())
        elif x < 0.75:
            w.retention(r.randrange(parts), r.random())
        elif x < 0.76:
            w.run(r.choice((3000, 6000)))
        else:
            w.run(r.choice((10, 50, 200, 600)))
    w.settle()
    w.check_converged()
    return w


WALK_CONFIGS = tuple(SimConfig(min_isr=m, unclean=u) for m in (1, 2) for u in (False, True))


def test_seeded_walks_hold_every_property_and_reach_the_interesting_histories() -> None:
    totals: Counter[str] = Counter()
    for seed in WALK_SEEDS:
        for config in WALK_CONFIGS:
            totals.update(walk(seed, config).stats)
    COVERAGE.update(totals)
    runs = len(WALK_SEEDS) * len(WALK_CONFIGS)
    # Each history kind must show up over the runs (totals; measured on the 48 CI runs, see
    # the coverage line printed at the end of the session).
    assert totals["acked"] >= 2 * runs, totals
    assert totals["consumed"] >= 10 * runs, totals
    assert totals["truncations"] >= runs // 2, totals
    assert totals["diverging_answers"] >= runs // 2, totals
    assert totals["isr_shrinks"] >= 2 * runs, totals
    assert totals["isr_expands"] >= 2 * runs, totals
    assert totals["leader_changes"] >= 2 * runs, totals
    assert totals["unclean_elections"] >= runs // 10, totals
    assert totals["lost_to_unclean"] >= 1, totals  # unclean elections did lose data, and it was accounted
    assert totals["loss_logged"] >= 1, totals  # ... and reported by the truncating followers
    assert totals["produce_NOT_ENOUGH_REPLICAS"] >= 1, totals
    assert totals["produce_REQUEST_TIMED_OUT"] >= 1, totals
    assert totals["lost_msgs"] >= runs, totals
    # The histories of issue 19.
    assert totals["multi_partition_fetches"] >= 20 * runs, totals
    assert totals["controlled_shutdowns"] >= runs // 4, totals
    assert totals["change_controlled_shutdown"] >= runs // 2, totals
    assert totals["preferred_elections"] >= runs // 10, totals
    assert totals["controller_failovers"] >= runs // 4, totals
    assert totals["duplicated_msgs"] >= 2 * runs, totals
    assert totals["long_delayed_msgs"] >= runs, totals
    assert totals["replayed_msgs"] >= 5 * runs, totals
    assert totals["power_losses_with_loss"] >= runs // 8, totals
    assert totals["records_lost_to_power_loss"] >= runs // 2, totals
    assert totals["delete_records"] >= runs // 2, totals
    assert totals["delete_records_inside_a_batch"] >= runs // 8, totals
    assert totals["retention"] >= runs // 8, totals
    assert totals["out_of_range_restart"] >= runs // 8, totals
    assert totals["follower_restart_at_batch_base"] >= 1, totals


# Seeded walks that once failed, run in every profile: (seed, configuration, why).
REGRESSION_WALKS = (
    (
        375,
        SimConfig(min_isr=2, unclean=False),
        # The sole ISR member lost two committed records nobody had read (a power loss) and
        # was elected again (Kafka without KIP-966); a follower restarted with its checkpointed
        # HW over them. The checker took the election for a clean one and failed agreement
        # below the HW ("brokers 1 and 2 in epoch 5 differ below HW 1").
        "unclean_shutdown_elections",
    ),
)


@pytest.mark.parametrize(
    ("seed", "config", "reached"),
    REGRESSION_WALKS,
    ids=[f"seed{s}-min_isr{c.min_isr}-unclean_{'on' if c.unclean else 'off'}" for s, c, _ in REGRESSION_WALKS],
)
def test_a_walk_that_once_failed_holds_every_property(seed: int, config: SimConfig, reached: str) -> None:
    assert walk(seed, config).stats[reached] >= 1  # it still reaches the history it was found with


# ---------------------------------------------------------------- mutants


def _factory(cls: type[PartitionState]) -> StateFactory:
    def make(broker_id: int, min_isr: int, lag_ms: int) -> PartitionState:
        return cls(broker_id, min_insync_replicas=min_isr, replica_lag_time_max_ms=lag_ms)

    return make


MUTANT_CONFIG = SimConfig(min_isr=2)


def first_violation(mutant: mutants.Mutant, seeds: range, config: SimConfig = MUTANT_CONFIG) -> tuple[int, str] | None:
    """(seed, message) of the first seeded walk the mutant fails, or None."""
    config = SimConfig(**{**config.__dict__, "state_factory": _factory(mutant.state)})
    return first_caught(mutant.patch(), lambda seed: walk(seed, config), seeds, Violation)


# Every mutant gets the same budget of seeded walks and stops at its first violation (the
# first failing seeds, measured after the broker's KIP-903 change: 0-28, 20 for
# JoinIsrBelowHighWatermark with min ISR 1); a budget well above them keeps a change of the product's
# histories from hiding a mutant. The unmutated control below runs the same seeds.
MUTANT_SEED_BUDGET = 150
MUTANT_SEEDS = {
    # mutant: (property that caught it, seed budget)
    "NoDivergenceCheck": ("follower append offset (a batch straddles the log end)", MUTANT_SEED_BUDGET),
    "HwFromCommittedIsr": ("3: HW above an ISR member's LEO", MUTANT_SEED_BUDGET),
    "NoEpochTrimAtLogEnd": ("liveness: back in the ISR after healing", MUTANT_SEED_BUDGET),
    "NoMinIsrOnProduce": ("1: acks=-1 accepted below min ISR", MUTANT_SEED_BUDGET),
    "AckedAtLeaderAppend": ("1: a clean leader lacks an acked record", MUTANT_SEED_BUDGET),
    "TruncateToOwnEpochEnd": ("convergence below the HW", MUTANT_SEED_BUDGET),
    "JoinIsrBelowHighWatermark": ("3: HW above an ISR member's LEO", MUTANT_SEED_BUDGET),
    "NeverShrinkIsr": ("5: a cut-off replica stays in the ISR", MUTANT_SEED_BUDGET),
    "FollowerHwNotClamped": ("3: HW above the LEO", MUTANT_SEED_BUDGET),
    "NoHwFreezeBelowMinIsr": ("2: a clean leader lacks a consumed record", MUTANT_SEED_BUDGET),
    "OutOfRangeRestartAtLeaderEnd": ("2: a clean leader lacks a consumed record", MUTANT_SEED_BUDGET),
    "NoRestartAtBatchBase": ("follower append offset (a batch straddles the log end)", MUTANT_SEED_BUDGET),
    "ControllerElectsOutOfIsr": ("1: a clean leader lacks an acked record", MUTANT_SEED_BUDGET),
}
CONTROL_SEEDS = range(max(n for _, n in MUTANT_SEEDS.values()))


def test_every_mutant_has_a_seed_budget() -> None:
    assert {m.name for m in mutants.MUTANTS} == set(MUTANT_SEEDS)
    assert len(mutants.MUTANTS) >= 10


# Mutants caught with another configuration than MUTANT_CONFIG (the control runs it too).
MUTANT_CONFIGS = {
    # With min ISR 2 the HW rarely outruns a joining follower below it (first caught at seed
    # 799, unclean on or off); with min ISR 1 at seed 20.
    "JoinIsrBelowHighWatermark": SimConfig(min_isr=1),
}


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_the_simulation_catches_a_broken_rule(mutant: mutants.Mutant) -> None:
    prop, seeds = MUTANT_SEEDS[mutant.name]
    config = MUTANT_CONFIGS.get(mutant.name, MUTANT_CONFIG)
    caught = first_violation(mutant, range(seeds), config)
    assert caught is not None, f"{mutant.name} ({mutant.rule}): no violation in {seeds} seeded histories"
    print(f"{mutant.name}: caught at seed {caught[0]} by {prop}: {caught[1][:160]}")


def test_the_unmutated_rules_pass_the_mutants_seeds() -> None:
    """The control: the same walks (same seeds, same configurations) hold every property."""
    for config in (MUTANT_CONFIG, *MUTANT_CONFIGS.values()):
        for seed in CONTROL_SEEDS:
            walk(seed, config)


SLOW_SEED_BUDGET = 400
SLOW_SEED_BUDGETS = {
    # First caught at seed 799 with min ISR 2 (unclean on or off). Its catch at seed 375 before
    # was no catch: the unmutated rules failed that seed too (the checker's false violation of
    # walk 375, see REGRESSION_WALKS).
    "JoinIsrBelowHighWatermark": 1000,
}


@pytest.mark.slow
@pytest.mark.timeout(0)
@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.name)
def test_every_mutant_is_caught_under_every_configuration(mutant: mutants.Mutant) -> None:
    """The long profile of the mutant check: each mutant under every walk configuration whose
    settings keep its rule's guarantee (min ISR 2; also with unclean elections, except the
    controller's clean-election mutant, which unclean elections legitimately mask), within
    its seed budget; the unmutated rules must pass the seed that caught it (a violation they
    show too is no catch)."""
    budget = SLOW_SEED_BUDGETS.get(mutant.name, SLOW_SEED_BUDGET)
    for config in WALK_CONFIGS:
        if config.min_isr < 2 or (config.unclean and mutant.name == "ControllerElectsOutOfIsr"):
            continue
        caught = first_violation(mutant, range(budget), config)
        assert caught is not None, f"{mutant.name}: not caught in {budget} seeds with {config}"
        walk(caught[0], config)  # the control of that seed
