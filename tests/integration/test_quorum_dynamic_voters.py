"""KIP-853 on real processes: controllers added, removed and replaced while the cluster runs.

Every node is a real `pykraft` process on loopback with `controller.quorum.bootstrap.servers`
(no `controller.quorum.voters`): storage is formatted with the real CLI (`storage format
--standalone`, `--initial-controllers`, `--no-initial-controllers`) and the voter set is
changed with `pykraft quorum add-controller` / `remove-controller`. The quorum's view comes
from DescribeQuorum (what `quorum describe` prints).

- grow: one voter (formatted --standalone) -> 3 -> 5 controllers, then shrink back to 3 by
  removing the leader (it resigns once the change commits; another is elected) and one
  follower, while an admin client creates topics through a broker; every topic whose creation
  was acknowledged is in the final metadata. Snapshots are taken often, so a joining
  controller also learns the voter set from a snapshot.
- replace: voters bootstrapped with --initial-controllers under another host name update their
  endpoints themselves (UpdateRaftVoter); then a follower's disk is wiped (a new directory id):
  the old replica is removed and the new one added, without an election (the epoch never
  moves: a majority was never lost); then the leader is removed.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from metadata_cluster import SNAPSHOT_TIMINGS
from quorum_cluster import describe_one, exchange, wait_until
from voter_change_cluster import PlannedCluster, TopicLoad, close_clusters, pykraft_ok

from quorum.node.meta_properties import random_uuid, uuid_string
from quorum.raft.describe import QuorumDescription
from quorum.wire import codec
from quorum.wire.transport import PeerUnavailable


class DynamicCluster(PlannedCluster):
    """Every node with controller.quorum.bootstrap.servers (the controllers), no static voters."""

    def configure(self) -> None:
        bootstrap = self.bootstrap(*self.controller_ids)
        for plan in self.plans.values():
            del plan.properties["controller.quorum.voters"]
            plan.properties["controller.quorum.bootstrap.servers"] = bootstrap

    def add(self, node_id: int, via: int) -> None:
        out = pykraft_ok(
            "quorum", "add-controller", "--config", self.config(node_id), "--bootstrap-controller", self.bootstrap(via)
        )
        assert f"Added controller {node_id} with directory id {self.directory_id(node_id)}" in out

    def remove(self, node_id: int, directory_id: str, via: int) -> None:
        out = pykraft_ok(
            "quorum",
            "remove-controller",
            "--controller-id",
            str(node_id),
            "--controller-directory-id",
            directory_id,
            "--bootstrap-controller",
            self.bootstrap(via),
        )
        assert f"Removed KRaft controller {node_id} with directory id {directory_id}" in out


@pytest.fixture
def make_dynamic(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[..., DynamicCluster]]:
    clusters: list[DynamicCluster] = []

    def make(controllers: int, brokers: int = 0, extra: dict[str, str] | None = None) -> DynamicCluster:
        c = DynamicCluster(tmp_path / f"cluster-{len(clusters) + 1}", controllers, brokers, extra)
        clusters.append(c)
        return c

    try:
        yield make
    finally:
        close_clusters(clusters, request)


def _replica(d: QuorumDescription, node_id: int, *, voter: bool) -> str:
    rows = d.voters if voter else d.observers
    row = next((r for r in rows if r.replica_id == node_id), None)
    assert row is not None, (node_id, voter, d)
    return uuid_string(row.directory_id)


def test_grow_one_voter_to_five_and_shrink_to_three_under_topic_creations(
    make_dynamic: Callable[..., DynamicCluster],
) -> None:
    c = make_dynamic(5, 1, SNAPSHOT_TIMINGS)
    broker = 6
    out = c.format(1, "--standalone", subprocess=True)
    assert f"voters 1@127.0.0.1:{c.port(1)}" in out
    for node_id in (2, 3, 4, 5):
        c.format(node_id, "--no-initial-controllers")
    c.format(broker)
    c.start(1)
    assert c.wait_voters([1]).leader_id == 1
    for node_id in (broker, 2, 3):
        c.start(node_id)
    load = TopicLoad(f"127.0.0.1:{c.port(broker)}")
    load.start()
    try:
        load.wait_for(5, timeout=60)
        # Grow to 3: each new controller is an observer that caught up; any controller relays.
        wait_until(
            "2 and 3 observing", lambda: {2, 3} <= {o.replica_id for o in (c.describe() or _EMPTY).observers}, 30
        )
        c.add(2, via=1)
        c.add(3, via=2)
        d = c.wait_voters([1, 2, 3])
        assert _replica(d, 3, voter=True) == c.directory_id(3)
        load.wait_for(5)
        # Grow to 5.
        c.start(4)
        c.start(5)
        c.add(4, via=3)
        c.add(5, via=1)
        c.wait_voters([1, 2, 3, 4, 5])
        load.wait_for(5)
        # Shrink to 3: first the leader, which resigns once the change commits.
        d = c.describe()
        assert d is not None
        old_leader, old_epoch = d.leader_id, d.leader_epoch
        via = next(i for i in (1, 2, 3, 4, 5) if i != old_leader)
        c.remove(old_leader, _replica(d, old_leader, voter=True), via=via)
        d = c.wait_voters(sorted({1, 2, 3, 4, 5} - {old_leader}))
        assert d.leader_id != old_leader and d.leader_epoch > old_epoch, d
        wait_until(
            f"{old_leader} observing",
            lambda: old_leader in {o.replica_id for o in (c.describe() or _EMPTY).observers},
            20,
        )
        load.wait_for(5)
        gone = next(i for i in (1, 2, 3, 4, 5) if i not in (old_leader, d.leader_id))
        c.remove(gone, c.directory_id(gone), via=d.leader_id)
        final = sorted({1, 2, 3, 4, 5} - {old_leader, gone})
        d = c.wait_voters(final)
        load.wait_for(5)
    finally:
        load.stop()
    # Nothing acknowledged is lost: every topic whose creation was acknowledged is in the
    # broker's metadata (the committed log) at the end.
    topics = wait_until(
        "the acknowledged topics in the metadata", lambda: (t := load.topics()) >= set(load.acknowledged) and t, 30
    )
    assert set(load.acknowledged) <= topics
    assert len(load.acknowledged) >= 30
    assert c.voters() == final
    # The removed controllers follow the quorum as observers.
    assert {old_leader, gone} <= {o.replica_id for o in (c.describe() or _EMPTY).observers}
    load.close()

    # A voter restarted after kill -9 reads the voter set back (its latest snapshot: the log
    # below it, where the VotersRecords were, is deleted) and votes: with the leader then
    # killed, it and the third voter elect a new leader.
    d = c.describe()
    assert d is not None
    follower = next(i for i in final if i != d.leader_id)
    c.kill9(follower)
    c.start(follower)

    def caught_up() -> bool:
        now = c.describe()
        return now is not None and any(
            v.replica_id == follower and v.log_end_offset >= now.high_watermark for v in now.voters
        )

    wait_until(f"{follower} caught up after its restart", caught_up, 30)
    snapshots = sorted((c.data_dir(follower) / "__cluster_metadata-0").glob("*.checkpoint"))
    assert snapshots and snapshots[-1].name != "00000000000000000000-0000000000.checkpoint"
    c.kill9(d.leader_id)
    after = wait_until(
        "a new leader among the survivors",
        lambda: (n := c.describe()) is not None and n.leader_id != d.leader_id and n,
        30,
    )
    assert after.leader_id in final and after.leader_epoch > d.leader_epoch


_EMPTY = QuorumDescription(-1, -1, -1, (), ())


def _described_hosts(port: int) -> dict[int, str]:
    """The host of each node in DescribeQuorum v2's Nodes (the voter set's endpoints, as the leader has them)."""
    frame = codec.encode_request(
        codec.DescribeQuorumCall(),
        correlation_id=1,
        client_id="t",
        cluster_id=None,
        source_id=-1,
        destination_id=-1,
        api_version=2,
    )
    try:
        _, body = codec._response_body(55, 2, exchange("127.0.0.1", port, frame))
    except (OSError, TimeoutError, codec.WireError, PeerUnavailable):
        return {}
    return {int(n.node_id): n.listeners[0].host for n in body.nodes if n.listeners}


def test_replace_a_wiped_controller_without_losing_a_majority_then_remove_the_leader(
    make_dynamic: Callable[..., DynamicCluster],
) -> None:
    c = make_dynamic(3)
    dirs = {i: random_uuid() for i in (1, 2, 3)}
    # The voters are bootstrapped with "localhost" (reachable, but not what they listen on):
    # each follower asks the leader to update its endpoint (UpdateRaftVoter), as Kafka's do.
    initial = ",".join(f"{i}@localhost:{c.port(i)}:{dirs[i]}" for i in (1, 2, 3))
    for i in (1, 2, 3):
        c.format(i, "--initial-controllers", initial)
        assert c.directory_id(i) == dirs[i]  # the entry's directory id is the node's
    for i in (1, 2, 3):
        c.start(i)
    c.wait_voters([1, 2, 3])

    def settled() -> QuorumDescription | None:
        d = c.describe()
        ok = d is not None and d.high_watermark > 0 and all(v.log_end_offset >= d.high_watermark for v in d.voters)
        return d if ok else None

    d = wait_until("every voter following the leader", settled, 30)
    followers = {i for i in (1, 2, 3) if i != d.leader_id}
    wait_until(
        "the followers' UpdateRaftVoter committed",
        lambda: all(_described_hosts(c.port(d.leader_id)).get(i) == "127.0.0.1" for i in followers),
        20,
    )
    d = wait_until("every voter following the leader", settled, 30)
    assert {_replica(d, i, voter=True) for i in (1, 2, 3)} == set(dirs.values())
    leader, epoch = d.leader_id, d.leader_epoch
    victim = next(i for i in (1, 2, 3) if i != leader)

    # Sample the quorum all along: the leader and its epoch must never change (no election
    # means a majority of the voters in force kept following the leader).
    samples: list[tuple[int, int]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            answer = describe_one("127.0.0.1", c.port(leader), 1.0)
            if isinstance(answer, QuorumDescription):
                samples.append((answer.leader_id, answer.leader_epoch))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        c.kill9(victim)
        shutil.rmtree(c.data_dir(victim))
        c.format(victim, "--no-initial-controllers")
        new_dir = c.directory_id(victim)
        assert new_dir != dirs[victim]
        c.start(victim)
        # The wiped replica fetches as an observer; the old one is still a voter.
        wait_until(
            "the wiped controller observing",
            lambda: victim in {o.replica_id for o in (c.describe() or _EMPTY).observers},
            30,
        )
        c.remove(victim, dirs[victim], via=victim)  # relayed by the new replica itself
        c.wait_voters(sorted({1, 2, 3} - {victim}))
        c.add(victim, via=leader)
        d = c.wait_voters([1, 2, 3])
        assert _replica(d, victim, voter=True) == new_dir
    finally:
        stop.set()
        sampler.join(5)
    assert samples and set(samples) == {(leader, epoch)}, sorted(set(samples))

    # Remove the current leader: it resigns after the commit and another voter is elected.
    c.remove(leader, dirs[leader], via=victim)
    d = c.wait_voters(sorted({1, 2, 3} - {leader}))
    assert d.leader_id != leader and d.leader_epoch > epoch
    wait_until(
        "the old leader observing", lambda: leader in {o.replica_id for o in (c.describe() or _EMPTY).observers}, 20
    )
