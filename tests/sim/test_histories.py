"""The quorum simulation reaches, on purpose, the histories where Raft implementations break.

Each test draws the parameters of one directed generator (`tests.sim.histories`): cluster
shape, fetch size, snapshot interval, the variant of the history. The harness checks every
safety property after every event (`tests.sim.harness.Cluster.check`); after the history,
the cluster heals and must converge (one more commit, identical state machines).

`test_every_history_kind_is_reached` asserts, from the coverage counters the runs above
accumulated (it runs any of them that has not run yet: order does not matter), that each
kind of history happened: Figure-8 comebacks and the
re-replication of their stale entries, partial fetches with the leader's HW beyond the
follower's log end, diverging-epoch truncations (several epochs on one node, several
nodes in one epoch), snapshot installs in chunks and across leader changes, stale-epoch
refusals and deliveries, future-epoch transitions, duplicated and replayed messages.

Profiles (top-level conftest.py): "ci" (default, derandomized) keeps this file well under a
minute on two cores; "long" runs ten times the examples.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.scale import multiplier
from tests.sim import histories as h
from tests.sim.harness import Cluster
from tests.sim.test_safety import converge

SCALE = multiplier()  # ten times the examples under the long profile

# What the runs of this module reached, summed over every example.
RUN: Counter[str] = Counter()
RAN: set[str] = set()

SEED = st.integers(0, 2**16)
# Responses of one batch (1 byte), of a few batches, or of everything.
FETCH_BYTES = st.sampled_from([1, 1, 250, h.BASE.fetch_max_bytes])


def examples(n: int) -> settings:
    return settings(max_examples=n * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def finish(name: str, c: Cluster) -> None:
    """Heal, converge, and add what the run reached to the module's coverage."""
    converge(c, 30_000)
    RUN.update(c.coverage)
    RAN.add(name)


@examples(60)
@given(
    seed=SEED,
    voters=st.sampled_from([3, 3, 5]),
    observers=st.integers(0, 1),
    fetch_max_bytes=FETCH_BYTES,
    snapshot_every=st.sampled_from([0, 0, 10]),
    x_batches=st.integers(1, 3),
    y_batches=st.integers(0, 2),
    comeback=st.sampled_from(["restart", "heal"]),
    exit=st.sampled_from(["crash", "isolate"]),
)
def test_figure8(
    seed: int,
    voters: int,
    observers: int,
    fetch_max_bytes: int,
    snapshot_every: int,
    x_batches: int,
    y_batches: int,
    comeback: str,
    exit: str,
) -> None:
    c = Cluster(seed, voters, observers, h.config(fetch_max_bytes), snapshot_every)
    h.figure8(c, x_batches=x_batches, y_batches=y_batches, comeback=comeback, exit=exit)
    finish("figure8", c)


@examples(20)
@given(
    seed=SEED,
    voters=st.sampled_from([3, 5]),
    fetch_max_bytes=st.sampled_from([1, 120, 400]),
    lag_ms=st.sampled_from([1_000, 3_000]),
    crash_leader_midway=st.booleans(),
)
def test_lagging_follower_partial_fetches(
    seed: int, voters: int, fetch_max_bytes: int, lag_ms: int, crash_leader_midway: bool
) -> None:
    c = Cluster(seed, voters, 0, h.config(fetch_max_bytes))
    h.lagging_follower(c, lag_ms=lag_ms, crash_leader_midway=crash_leader_midway)
    finish("lagging_follower", c)


@examples(30)
@given(
    seed=SEED,
    voters=st.sampled_from([3, 5, 5]),
    observers=st.integers(0, 1),
    fetch_max_bytes=FETCH_BYTES,
    writes=st.integers(1, 3),
    with_follower=st.booleans(),
)
def test_divergence_storm(
    seed: int, voters: int, observers: int, fetch_max_bytes: int, writes: int, with_follower: bool
) -> None:
    c = Cluster(seed, voters, observers, h.config(fetch_max_bytes))
    h.divergence_storm(c, writes=writes, with_follower=with_follower)
    finish("divergence_storm", c)


@examples(30)
@given(
    seed=SEED,
    voters=st.sampled_from([3, 5]),
    observers=st.integers(0, 1),
    fetch_max_bytes=FETCH_BYTES,
    snapshot_every=st.sampled_from([3, 5, 10]),
    chunk_bytes=st.sampled_from([16, 64, 2048]),
    during=st.sampled_from(["crash-leader", "crash-follower", "isolate-leader"]),
)
def test_snapshot_catch_up(
    seed: int, voters: int, observers: int, fetch_max_bytes: int, snapshot_every: int, chunk_bytes: int, during: str
) -> None:
    c = Cluster(seed, voters, observers, h.config(fetch_max_bytes, chunk_bytes), snapshot_every)
    h.snapshot_catch_up(c, during=during)
    finish("snapshot_catch_up", c)


@examples(20)
@given(
    seed=SEED,
    voters=st.sampled_from([3, 5]),
    observers=st.integers(0, 2),
    fetch_max_bytes=FETCH_BYTES,
    snapshot_every=st.sampled_from([0, 10]),
    pre_vote=st.booleans(),
    rounds=st.integers(2, 4),
    duplicate=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_stale_and_future_epochs(
    seed: int,
    voters: int,
    observers: int,
    fetch_max_bytes: int,
    snapshot_every: int,
    pre_vote: bool,
    rounds: int,
    duplicate: float,
) -> None:
    c = Cluster(seed, voters, observers, h.config(fetch_max_bytes, pre_vote=pre_vote), snapshot_every)
    h.stale_messages(c, rounds=rounds, duplicate=duplicate)
    finish("stale_messages", c)


@examples(10)
@given(seed=SEED, voters=st.sampled_from([3, 5]))
def test_stale_vote_grants_replayed(seed: int, voters: int) -> None:
    c = Cluster(seed, voters, 0, h.config(pre_vote=False))
    h.stale_vote_replay(c)
    finish("stale_vote_replay", c)


@examples(6)
@given(seed=SEED, voters=st.sampled_from([5, 7]), observers=st.integers(0, 1), snapshot_every=st.sampled_from([0, 10]))
def test_deposed_leader_cut(seed: int, voters: int, observers: int, snapshot_every: int) -> None:
    """Issue 23, with a voter: it truncates entries it acknowledged in an old epoch that a
    later epoch committed, following the deposed leader of the epoch between (Raft allows it)."""
    c = Cluster(seed, voters, observers, h.config(), snapshot_every)
    h.deposed_leader_cut(c)
    finish("deposed_leader_cut", c)


@examples(20)
@given(
    seed=SEED,
    voters=st.sampled_from([3, 5]),
    fetch_max_bytes=FETCH_BYTES,
    snapshot_every=st.sampled_from([0, 5]),
    chain=st.lists(st.sampled_from(sorted(h.GENERATORS)), min_size=2, max_size=4),
)
def test_chained_histories(seed: int, voters: int, fetch_max_bytes: int, snapshot_every: int, chain: list[str]) -> None:
    """Histories one after the other on the same cluster: each starts from what the
    previous one left (stale suffixes, snapshots, old messages kept)."""
    c = Cluster(seed, voters, 1, h.config(fetch_max_bytes), snapshot_every)
    for name in chain:
        h.GENERATORS[name](c)
    finish("chained", c)


# Minimum counts per CI run of this module: about half of what the derandomized ci profile
# reaches today, leaving room for changes in the core. ("long" reaches ten times more.)
MINIMUM = {
    "figure8_histories": 30,  # a leader came back, still holding entries a later epoch overwrote
    "figure8_replications": 40,  # ... and replicated them to another voter in its new epoch
    "overwritten_uncommitted_suffixes": 80,
    "partial_fetches": 3000,  # an append left the follower's log end below the leader's HW
    "diverging_epoch_truncations": 80,
    "multi_epoch_divergences": 8,  # one node cut entries of >= 2 epochs before it matched again
    "multi_node_divergences": 30,  # >= 2 nodes truncated under the same leader epoch
    "snapshot_redirects": 400,
    "snapshot_installs": 150,
    "multi_chunk_snapshot_installs": 150,
    "snapshot_installs_across_leader_change": 15,  # the leader changed during the transfer
    "snapshot_transfer_restarts": 150,
    "snapshot_image_matches": 200,  # an installed image equalled a replayed one at its offset
    "stale_epoch_refusals": 700,  # FENCED_LEADER_EPOCH answers
    "stale_epoch_deliveries": 2000,
    "replayed_stale_epoch_deliveries": 1000,
    "future_epoch_transitions": 900,
    "duplicate_deliveries": 3000,
    "replay_deliveries": 2500,
    "later_commit_cut_by_voter": 3,  # a voter in an epoch between cut what a later one committed
}


# The tests whose runs feed the coverage counters, by the name `finish` records.
FEEDERS = {
    "figure8": test_figure8,
    "lagging_follower": test_lagging_follower_partial_fetches,
    "divergence_storm": test_divergence_storm,
    "snapshot_catch_up": test_snapshot_catch_up,
    "stale_messages": test_stale_and_future_epochs,
    "stale_vote_replay": test_stale_vote_grants_replayed,
    "deposed_leader_cut": test_deposed_leader_cut,
    "chained": test_chained_histories,
}


def test_every_history_kind_is_reached() -> None:
    """Whatever the order or selection of this module's tests: a feeder that has not run in
    this session runs here first (so the floors always see every feeder's examples)."""
    for name, feeder in FEEDERS.items():
        if name not in RAN:
            feeder()
    assert set(FEEDERS) <= RAN
    print("\nhistory coverage:", ", ".join(f"{k}={v}" for k, v in sorted(RUN.items())))
    missing = {k: (RUN[k], floor) for k, floor in MINIMUM.items() if RUN[k] < floor}
    assert not missing, f"history kinds below their floor (reached, floor): {missing}"
