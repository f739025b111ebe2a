"""Scenarios over the deterministic simulated cluster (`tests.sim.harness`): fixed
seeds, tiny schedules, simulated milliseconds. The harness checks its safety
invariants after every event; these tests check the timing and liveness claims."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from quorum.raft.messages import (
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
)
from quorum.raft.roles import FollowerState, ResignedState, Role
from quorum.raft.types import NO_LEADER
from tests.sim.harness import Cluster, Node

SEEDS = range(6)


def elected(c: Cluster) -> Callable[[], bool]:
    return lambda: c.leader() is not None


def leader(c: Cluster) -> Node:
    node = c.leader()
    assert node is not None and node.core is not None
    return node


def tap(c: Cluster) -> list[tuple[int, Envelope]]:
    """Record (time, envelope) of every message the cluster sends from now on."""
    seen: list[tuple[int, Envelope]] = []
    send = c._send

    def recording(envelopes: list[Envelope]) -> None:
        seen.extend((c.now, e) for e in envelopes)
        send(envelopes)

    c._send = recording  # type: ignore[method-assign]
    return seen


def settle(c: Cluster, ms: int = 300) -> Node:
    """Run until there is a leader, commit a few records, and let followers catch up."""
    assert c.run_until(elected(c), 20_000)
    c.run_for(ms, propose_every_ms=10)
    c.run_for(ms)
    return leader(c)


# ---------------------------------------------------------------- initial election


@pytest.mark.parametrize("voters", [1, 3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_initial_election(voters: int, seed: int) -> None:
    c = Cluster(seed, voters=voters, observers=1)
    assert c.run_until(elected(c), 10_000)
    # Timeouts are [1000, 2000) ms; a pre-vote and a vote round take a few ms more.
    assert c.now <= 2_100 if voters > 1 else c.now <= 2_000
    node = leader(c)
    c.run_for(500)
    assert [n.id for n in c.nodes.values() if n.core and n.core.role is Role.LEADER] == [node.id]
    assert node.core is not None and node.core.epoch == 1  # pre-vote: nobody burnt an epoch
    for n in c.nodes.values():
        assert n.core is not None and n.core.leader_id == node.id and n.core.epoch == 1
    assert c.propose(3)
    c.run_for(500)
    assert all(n.sm.values == ["v0", "v1", "v2"] for n in c.nodes.values())


# -------------------------------------------------------------------- pre-vote


@pytest.mark.parametrize("seed", SEEDS)
def test_rejoining_partitioned_follower_does_not_bump_the_epoch(seed: int) -> None:
    c = Cluster(seed, voters=3)
    old = settle(c)
    assert old.core is not None
    epoch = old.core.epoch
    away = next(v for v in c.voter_ids if v != old.id)
    c.partition([away], [v for v in c.voter_ids if v != away])
    c.run_for(10_000, propose_every_ms=50)
    away_core = c.nodes[away].core
    assert away_core is not None and away_core.epoch == epoch  # it tried: only pre-votes, unanswered
    assert away_core.role in (Role.PROSPECTIVE, Role.UNATTACHED, Role.FOLLOWER)
    c.heal()
    c.run_for(5_000, propose_every_ms=50)
    assert leader(c) is old and old.core.epoch == epoch
    assert all(n.core is not None and n.core.epoch == epoch for n in c.nodes.values())
    assert c.nodes[away].core.leader_id == old.id  # type: ignore[union-attr]
    assert c.nodes[away].sm.values == c.committed_values()[: len(c.nodes[away].sm.values)]


def test_without_pre_vote_a_rejoining_follower_disrupts_the_quorum() -> None:
    """The contrast that makes the test above meaningful."""
    c = Cluster(0, voters=3)
    c.config = dataclasses.replace(c.config, pre_vote=False)
    for n in c.nodes.values():
        n.config = c.config
        n.crash()
        n.start(c.now, c.rng)
    old = settle(c)
    assert old.core is not None
    epoch = old.core.epoch
    away = next(v for v in c.voter_ids if v != old.id)
    c.partition([away], [v for v in c.voter_ids if v != away])
    c.run_for(10_000)
    away_core = c.nodes[away].core
    assert away_core is not None and away_core.epoch > epoch
    c.heal()
    c.run_for(5_000)
    assert leader(c).core.epoch > epoch  # type: ignore[union-attr]


# ---------------------------------------------------------------- check-quorum


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_isolated_leader_resigns_within_check_quorum_timeout(voters: int, seed: int) -> None:
    c = Cluster(seed, voters=voters, observers=1)
    old = settle(c)
    assert old.core is not None
    t0 = c.now
    c.partition([old.id], [i for i in c.nodes if i != old.id])
    assert c.run_until(lambda: old.core is not None and old.core.role is not Role.LEADER, 10_000)
    assert c.now - t0 <= c.config.check_quorum_timeout_ms  # 1.5 x fetch timeout
    assert old.core.role is Role.RESIGNED

    # The majority side elects someone else meanwhile, in a later epoch.
    def newer_leader() -> bool:
        current = c.leader()
        return current is not None and current.core is not None and current.core.epoch > old.core.epoch  # type: ignore[union-attr]

    assert c.run_until(newer_leader, 10_000)


def test_leader_fetched_by_a_minority_only_resigns() -> None:
    c = Cluster(1, voters=5)
    old = settle(c)
    buddy = next(v for v in c.voter_ids if v != old.id)
    c.partition([old.id, buddy], [v for v in c.voter_ids if v not in (old.id, buddy)])
    t0 = c.now
    assert c.run_until(lambda: old.core is not None and old.core.role is Role.RESIGNED, 10_000)
    # A voter that fetched just before the partition and the buddy's next fetch still make a
    # majority contact (Kafka's rule), so allow one long-poll round past the timeout.
    assert c.now - t0 <= c.config.check_quorum_timeout_ms + c.config.fetch_max_wait_ms + 2 * c.max_delay_ms


@pytest.mark.parametrize("observers", [0, 2])
def test_single_voter_leader_never_resigns(observers: int) -> None:
    c = Cluster(0, voters=1, observers=observers)
    node = settle(c)
    assert node.core is not None
    epoch = node.core.epoch
    c.partition([1], c.observer_ids)
    c.run_for(20_000, propose_every_ms=100)
    assert node.core.role is Role.LEADER and node.core.epoch == epoch
    assert node.core.high_watermark == node.core.log.end_offset


# ------------------------------------------------------------- EndQuorumEpoch


@pytest.mark.parametrize("voters", [3, 5])
@pytest.mark.parametrize("seed", SEEDS)
def test_resign_hands_over_to_the_first_successor_within_milliseconds(voters: int, seed: int) -> None:
    c = Cluster(seed, voters=voters)
    old = settle(c)
    assert old.core is not None
    epoch = old.core.epoch
    t0 = c.now
    old.core.resign(c.now)
    state = old.core.state
    assert isinstance(state, ResignedState)
    assert old.core.leader_id == NO_LEADER
    c._send(old.drain())
    assert c.run_until(lambda: leader(c).core.epoch > epoch if c.leader() else False, 5_000)  # type: ignore[union-attr]
    new = leader(c)
    # EndQuorumEpoch, a pre-vote round and a vote round: a few network delays (1-5 ms each).
    assert c.now - t0 <= 40
    assert new.id == state.successors[0]
    assert new.core is not None and new.core.epoch == epoch + 1


def test_graceful_shutdown_of_every_leader_in_turn() -> None:
    c = Cluster(4, voters=5)
    settle(c)
    down: list[int] = []
    for _ in range(2):
        old = leader(c)
        assert old.core is not None
        epoch = old.core.epoch
        c.shutdown(old.id)
        down.append(old.id)
        t0 = c.now
        assert c.run_until(lambda e=epoch: c.leader() is not None and leader(c).core.epoch > e, 10_000)  # type: ignore[union-attr]
        assert c.now - t0 <= 3_000
        c.run_for(300, propose_every_ms=10)
    for nid in down:
        c.restart(nid)
    c.run_for(2_000)
    assert all(n.sm.values == c.committed_values() for n in c.nodes.values())


# ------------------------------------------------------------------- snapshots


@pytest.mark.parametrize("seed", SEEDS)
def test_follower_behind_log_start_catches_up_from_a_snapshot(seed: int) -> None:
    c = Cluster(seed, voters=3, observers=1, snapshot_every=10)
    c.config = dataclasses.replace(c.config, snapshot_chunk_bytes=256)
    for n in c.nodes.values():
        n.config = c.config
        n.crash()
        n.start(c.now, c.rng)
    old = settle(c)
    assert old.core is not None
    behind = next(v for v in c.voter_ids if v != old.id)
    c.crash(behind)
    c.run_for(2_000, propose_every_ms=5)
    assert old.core.log.start_offset > 0
    sid = old.core.log.snapshot_id
    assert sid is not None and sid in old.disk.snapshots and len(old.disk.snapshots[sid]) > 3 * 256
    log = tap(c)
    c.restart(behind)
    c.run_for(1_000)
    mine = [e.message for _, e in log if behind in (e.source, e.destination)]
    # Fetch -> SnapshotId -> FetchSnapshot at increasing positions -> install -> Fetch again.
    # (The leader may take a newer snapshot and delete its log meanwhile: then again.)
    answers = [m for m in mine if isinstance(m, FetchResponse) and m.snapshot_id is not None]
    assert answers and answers[0].snapshot_id is not None and answers[0].snapshot_id.offset >= sid.offset
    for answer in answers:
        positions = [
            m.position for m in mine if isinstance(m, FetchSnapshotRequest) and m.snapshot_id == answer.snapshot_id
        ]
        assert positions == list(range(0, len(positions) * 256, 256)) and len(positions) >= 4
    assert all(m.error == 0 for m in mine if isinstance(m, FetchSnapshotResponse))
    last = answers[-1].snapshot_id
    assert last is not None
    last_chunk = max(i for i, m in enumerate(mine) if isinstance(m, FetchSnapshotRequest))
    later = [m for m in mine[last_chunk:] if isinstance(m, FetchRequest)]
    assert later and all(m.fetch_offset >= last.offset for m in later)
    node = c.nodes[behind]
    assert node.core is not None and node.core.log.start_offset >= last.offset
    assert last in node.disk.snapshots
    assert node.sm.values == c.committed_values()
    # And it keeps replicating with plain Fetch afterwards.
    c.run_for(500, propose_every_ms=10)
    c.run_for(500)
    assert node.sm.values == c.committed_values()


# ------------------------------------------------------------------- restarts


@pytest.mark.parametrize("seed", SEEDS)
def test_restarted_leader_comes_back_resigned_and_never_leads_that_epoch(seed: int) -> None:
    c = Cluster(seed, voters=3)
    old = settle(c)
    assert old.core is not None
    epoch = old.core.epoch
    c.crash(old.id)
    c.restart(old.id)
    assert old.core is not None and old.core.role is Role.RESIGNED and old.core.epoch == epoch
    assert old.core.leader_id == NO_LEADER
    # Someone leads a later epoch (maybe the old leader again); the harness checks that
    # nobody ever leads `epoch` in two incarnations.
    assert c.run_until(lambda: c.leader() is not None and leader(c).core.epoch > epoch, 10_000)  # type: ignore[union-attr]
    c.run_for(500, propose_every_ms=10)
    c.run_for(500)
    assert all(n.sm.values == c.committed_values() for n in c.nodes.values())


# ------------------------------------------------------------------- observers


@pytest.mark.parametrize("seed", SEEDS)
def test_observers_discover_the_leader_through_a_random_voter(seed: int) -> None:
    c = Cluster(seed, voters=3, observers=2)
    log = tap(c)
    node = settle(c)
    for oid in c.observer_ids:
        core = c.nodes[oid].core
        assert core is not None and core.role is Role.FOLLOWER and core.leader_id == node.id
        assert isinstance(core.state, FollowerState)
        assert c.nodes[oid].sm.values == c.committed_values()
        assert not any(isinstance(e.message, VoteRequest) for _, e in log if e.source == oid)
    probed = {e.destination for _, e in log if e.source in c.observer_ids and isinstance(e.message, FetchRequest)}
    assert probed <= set(c.voter_ids)


def test_observer_probes_are_spread_over_the_voters() -> None:
    probed: set[int] = set()
    for seed in range(10):
        c = Cluster(seed, voters=5, observers=1)
        log = tap(c)
        c.run_for(500)  # no leader yet: the observer keeps probing
        probed |= {e.destination for _, e in log if e.source == 6 and isinstance(e.message, FetchRequest)}
    assert probed == {1, 2, 3, 4, 5}


def test_observer_follows_a_new_leader_after_failover() -> None:
    c = Cluster(2, voters=3, observers=1)
    old = settle(c)
    c.crash(old.id)
    assert c.run_until(lambda: c.leader() is not None and c.leader() is not old, 10_000)
    new = leader(c)
    assert c.run_until(lambda: c.nodes[4].core is not None and c.nodes[4].core.leader_id == new.id, 10_000)
    c.run_for(300, propose_every_ms=10)
    c.run_for(500)
    assert c.nodes[4].sm.values == c.committed_values()
